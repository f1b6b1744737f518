"""The slot allocator: capacity, out-of-memory, statistics, threads."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

import interop


def stats(slot):
    s = torch.hybrid.memory_stats(slot)
    return {k: s[k] for k in ("allocated_bytes.all.current", "allocation.all.current", "allocation.all.allocated",
                              "allocation.all.freed", "allocated_bytes.all.peak")}


def test_every_byte_is_counted():
    before = torch.hybrid.memory_allocated(2)
    x = torch.empty(1000, dtype=torch.float64, device="hybrid:2")
    assert torch.hybrid.memory_allocated(2) - before == 8000
    y = x * 2  # the CPU kernel's output is drawn from the slot
    assert torch.hybrid.memory_allocated(2) - before == 16000
    del x, y
    assert torch.hybrid.memory_allocated(2) == before


def test_peak_and_reset():
    torch.hybrid.reset_peak_memory_stats(3)
    base = torch.hybrid.memory_allocated(3)
    x = torch.empty(1 << 20, dtype=torch.uint8, device="hybrid:3")
    del x
    assert torch.hybrid.max_memory_allocated(3) == base + (1 << 20)
    torch.hybrid.reset_peak_memory_stats(3)
    assert torch.hybrid.max_memory_allocated(3) == base


def test_oom_names_slot_kind_request_usage_and_capacity(use_rack, tmp_path):
    rack_file = tmp_path / "small.toml"
    rack_file.write_text('[rack]\nname = "small"\n[[slots]]\nkind = "h100"\ncount = 2\ncapacity = "1MiB"\n')
    use_rack(str(rack_file))
    keep = torch.empty(600 * 1024, dtype=torch.uint8, device="hybrid:1")
    before = stats(1)
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(600 * 1024, dtype=torch.uint8, device="hybrid:1")
    msg = str(err.value)
    for needle in ("hybrid:1", "h100", "600.00 KiB", "614400 bytes", "in use", "1.00 MiB", "1048576 bytes"):
        assert needle in msg, (needle, msg)
    assert stats(1) == before, "a refused allocation must leave the statistics exactly as they were"
    assert torch.hybrid.memory_stats(1)["num_ooms"] == 1
    # An op whose output does not fit fails before writing anything, and what
    # its kernel had drawn by then is returned.
    with pytest.raises(torch.OutOfMemoryError):
        keep + 1
    now = stats(1)
    assert now["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert now["allocation.all.current"] == before["allocation.all.current"]
    # The other slot is independent.
    other = torch.empty(600 * 1024, dtype=torch.uint8, device="hybrid:0")
    del keep, other


def test_allocate_free_cycles_return_to_baseline():
    gc.collect()
    base = stats(5)
    for _ in range(10_000):
        t = torch.empty(64, device="hybrid:5")
        del t
    after = stats(5)
    assert after["allocated_bytes.all.current"] == base["allocated_bytes.all.current"]
    assert after["allocation.all.current"] == base["allocation.all.current"]
    assert after["allocation.all.allocated"] - base["allocation.all.allocated"] == 10_000
    assert after["allocation.all.freed"] - base["allocation.all.freed"] == 10_000


def test_threads_allocating_concurrently_leave_consistent_stats():
    gc.collect()
    base = stats(6)
    errors = []

    def worker(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            live = []
            for i in range(500):
                n = int(torch.randint(1, 4096, (1,), generator=g))
                live.append(torch.empty(n, dtype=torch.uint8, device="hybrid:6"))
                if len(live) > 8:
                    live.pop(0)
            live.clear()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    after = stats(6)
    assert after["allocated_bytes.all.current"] == base["allocated_bytes.all.current"]
    assert after["allocation.all.current"] == base["allocation.all.current"]
    made = after["allocation.all.allocated"] - base["allocation.all.allocated"]
    freed = after["allocation.all.freed"] - base["allocation.all.freed"]
    assert made == freed == 8 * 500


def test_workspace_of_cpu_kernels_counts_and_is_returned():
    base = torch.hybrid.memory_allocated(7)
    a = torch.randn(64, 64, device="hybrid:7")
    b = a.t().contiguous() @ a  # temporaries inside the kernels come from the slot too
    del a, b
    assert torch.hybrid.memory_allocated(7) == base


def test_a_scalars_scratch_is_the_hosts_and_a_one_element_output_is_the_slots():
    # x.add_(1) casts the wrapped 1 to a 4-byte scratch tensor inside the CPU kernel; CUDA passes such a scalar
    # as a kernel argument (no device memory), so the slot does not count it either. A kernel's output of the
    # same size is still charged: it becomes a hybrid storage.
    x = torch.zeros(1, device="hybrid:5")
    base = stats(5)
    torch.hybrid.reset_peak_memory_stats(5)
    x.add_(1)
    after = stats(5)
    assert after["allocation.all.allocated"] == base["allocation.all.allocated"]
    assert after["allocated_bytes.all.peak"] == base["allocated_bytes.all.current"]
    y = x + 1
    assert stats(5)["allocated_bytes.all.current"] == base["allocated_bytes.all.current"] + 4
    assert y.item() == 2.0 and x.item() == 1.0
    del x, y


def test_zero_byte_tensors_hold_nothing():
    base = stats(4)
    z = torch.empty(0, device="hybrid:4")
    assert z.numel() == 0
    assert stats(4)["allocated_bytes.all.current"] == base["allocated_bytes.all.current"]
    del z


def test_changing_rack_with_live_tensors_retires_them():
    # Issue 7 changed this on purpose: a rack change is no longer refused while
    # tensors live. They stay counted on their own rack and refuse to run on
    # another's slots until their rack is current again.
    x = torch.ones(3, device="hybrid:0")
    outer = interop.current_rack()
    before = torch.hybrid.memory_allocated(0)
    with interop.Rack.from_spec("h100:2"):
        assert torch.hybrid.memory_allocated(0) == 0  # the new rack's own accounts
        with pytest.raises(RuntimeError, match="Re-enter its rack"):
            x.sum()
        assert x.cpu().tolist() == [1.0, 1.0, 1.0]
    assert interop.current_rack() is outer
    assert torch.hybrid.memory_allocated(0) == before
    assert x.sum().item() == 3  # usable again
    del x


def test_failed_resize_leaves_the_tensor_exactly_as_it_was(use_rack, tmp_path):
    # Issue 7, section 3: an out-of-memory resize_ used to leave the new shape
    # over the old storage, and the next op read past it (segfault).
    rack_file = tmp_path / "small.toml"
    rack_file.write_text('[rack]\nname = "small"\n[[slots]]\nkind = "h100"\ncount = 1\ncapacity = "64MiB"\n')
    use_rack(str(rack_file))
    x = torch.ones(10 << 20, device="hybrid:0")
    storage_bytes, data = x.untyped_storage().nbytes(), x.data_ptr()
    before = stats(0)
    with pytest.raises(torch.OutOfMemoryError, match="hybrid:0"):
        x.resize_(20 << 20)
    assert x.shape == (10 << 20,) and x.stride() == (1,) and x.storage_offset() == 0
    assert x.untyped_storage().nbytes() == storage_bytes and x.data_ptr() == data
    now = stats(0)
    assert now["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert now["allocation.all.current"] == before["allocation.all.current"]
    assert x.sum().item() == 10 << 20
    # A 2-d resize that fails keeps the strides too; one that fits still works.
    y = torch.ones(4, 6, device="hybrid:0").t()
    with pytest.raises(torch.OutOfMemoryError):
        y.resize_(1 << 14, 1 << 10)
    assert y.shape == (6, 4) and y.stride() == (1, 6)
    assert torch.equal(y.cpu(), torch.ones(6, 4))
    z = torch.arange(6.0, device="hybrid:0")
    z.resize_(2, 5)
    assert z.shape == (2, 5) and z.flatten()[:6].cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # set_ onto a geometry larger than the storage grows it, or fails cleanly.
    w = torch.ones(8, device="hybrid:0")
    with pytest.raises(torch.OutOfMemoryError):
        w.set_(w.untyped_storage(), 0, (20 << 20,), (1,))
    assert w.shape == (8,) and w.untyped_storage().nbytes() == 32 and w.sum().item() == 8
    del x, y, z, w
