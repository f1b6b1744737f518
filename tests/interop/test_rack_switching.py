"""Racks a user can switch: a rack change retires the current rack with its tensors intact.

A tensor of a retired rack keeps its bytes and its accounting on its own rack,
moves to the CPU, prints, saves and frees, and refuses everything else with one
error naming its rack and slot; its rack's memory statistics stay exact and
reach zero with its last tensor; re-entering the rack makes it usable again
and continues the rack's timeline.
"""

from __future__ import annotations

import io
import re
import threading

import pytest
import torch

import collectives
import devices
import interop

SPEC = "trn3:2+h100:2"  # hybrid:2 is an H100
RETIRED = re.compile(r"hybrid:2 \(h100, emulated\) of rack 'trn3:2\+h100:2' cannot be used while another rack is "
                     r"current .*Re-enter its rack .*`with rack:` or interop\.set_rack\(rack\).* or move it to the "
                     r"CPU first \(tensor\.cpu\(\)\)")


def held(rack, slot):
    s = rack.memory_stats(slot)
    return s["allocated_bytes.all.current"], s["allocation.all.current"]


@pytest.fixture
def retired():
    """A rack that held tensors and has been left: [rack, x on its hybrid:2, the CPU values of x].
    A test takes them out (``rack, x, values = retired; retired.clear()``) so that ``del x`` frees x."""
    torch.manual_seed(0)
    values = torch.randn(4, 8)
    rack = interop.Rack.from_spec(SPEC)
    with rack:
        x = values.to("hybrid:2")
    assert not rack.is_current
    return [rack, x, values]


def test_leaving_a_rack_keeps_its_tensors_and_their_accounting(retired):
    rack, x, values = retired
    retired.clear()
    outer = interop.current_rack()
    assert outer is not rack and outer.name == "fusion-default"
    assert held(rack, 2) == (4 * 8 * 4, 1)
    # The current rack's slot 2 (a trn4) never saw those bytes.
    assert torch.hybrid.get_device_properties(2).kind == "trn4"
    before = outer.memory_stats(2)
    assert torch.equal(x.cpu(), values)
    assert outer.memory_stats(2)["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    del x
    assert held(rack, 2) == (0, 0)
    stats = rack.memory_stats(2)
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 1


def test_every_op_on_a_retired_tensor_raises_one_clear_error_and_changes_nothing(retired):
    rack, x, values = retired
    retired.clear()
    current = interop.current_rack()
    y = torch.ones(4, 8, device="hybrid:2")  # the current rack's hybrid:2 (a trn4)
    w = torch.ones(3, 8, device="hybrid:2")
    z = torch.ones(4, 8, device="hybrid:3")
    interop.reset_timeline()
    current_before = [current.memory_stats(i)["allocated_bytes.all.current"] for i in range(len(current))]
    rack_before = rack.memory_stats(2)
    attempts = {
        "add": lambda: x + 1,
        "in-place": lambda: x.add_(1),
        "with a current tensor": lambda: x * y,
        "matmul": lambda: x @ x.t(),
        "item": lambda: x[0, 0].item(),
        "to another slot": lambda: x.to("hybrid:0"),
        "copy into it": lambda: x.copy_(torch.zeros(4, 8)),
        "copy from it to the current rack": lambda: y.copy_(x),
        "resize": lambda: x.resize_(64, 64),
        "clone": lambda: x.clone(),
        "a module": lambda: torch.nn.functional.linear(x, w),
        "a collective": lambda: collectives.all_reduce([x, z]),
        "storage resize": lambda: x.untyped_storage().resize_(1 << 20),
    }
    for what, attempt in attempts.items():
        with pytest.raises(RuntimeError, match=RETIRED):
            attempt()
    # Nothing was run on, written to or counted against either rack.
    assert torch.equal(x.cpu(), values), "a refused op must not write"
    assert x.shape == (4, 8) and x.untyped_storage().nbytes() == 4 * 8 * 4
    assert [current.memory_stats(i)["allocated_bytes.all.current"] for i in range(len(current))] == current_before
    now = rack.memory_stats(2)
    assert now["allocated_bytes.all.current"] == rack_before["allocated_bytes.all.current"]
    assert now["allocation.all.allocated"] == rack_before["allocation.all.allocated"]
    assert interop.timeline() == [], "a refused op must not reach the current rack's timeline"


def test_views_of_a_retired_tensor_are_still_its_rack(retired):
    rack, x, values = retired
    retired.clear()
    row = x[1]  # a view computes nothing
    assert torch.equal(row.cpu(), values[1])
    with pytest.raises(RuntimeError, match=RETIRED):
        row.sum()


def test_host_copies_printing_and_saving_work(retired, tmp_path):
    rack, x, values = retired
    retired.clear()
    assert torch.equal(x.to("cpu"), values)
    assert torch.equal(x.to("cpu", torch.float64), values.double())
    assert x.tolist() == values.tolist()
    # The CPU's formatting of the same values, with the device suffix (line breaks aside).
    assert "".join(repr(x).split()) == "".join(repr(values).split())[:-1] + ",device='hybrid:2')"
    assert str(x) == repr(x)
    with rack:
        p = torch.nn.Parameter(torch.ones(2, device="hybrid:2"))
    assert repr(p) == "Parameter containing:\ntensor([1., 1.], device='hybrid:2', requires_grad=True)"
    del p
    path = tmp_path / "retired.pt"
    torch.save({"x": x}, path)
    loaded = torch.load(path, map_location="cpu")
    assert torch.equal(loaded["x"], values)
    # Saved with its device: loading onto the current rack's slot puts the values there.
    again = torch.load(path)["x"]
    assert again.device == torch.device("hybrid:2") and torch.equal(again.cpu(), values)
    assert interop.current_rack().memory_allocated(2) >= again.untyped_storage().nbytes()
    # The retired rack holds exactly x; the host copies made nothing there.
    assert held(rack, 2) == (4 * 8 * 4, 1)


def test_a_retired_rack_with_more_slots_than_the_current_one_saves_and_prints():
    big = interop.Rack.from_spec("h100:6")
    with big:
        x = torch.arange(6.0, device="hybrid:5")
    with interop.Rack.from_spec("trn2:2"):
        assert torch.equal(x.cpu(), torch.arange(6.0))
        assert "device='hybrid:5'" in repr(x)
        buf = io.BytesIO()
        torch.save(x, buf)
        buf.seek(0)
        assert torch.equal(torch.load(buf, map_location="cpu"), torch.arange(6.0))
        with pytest.raises(RuntimeError, match="hybrid:5 \\(h100, emulated\\) of rack 'h100:6'"):
            x + 1
        with pytest.raises(RuntimeError, match="not a slot of the current rack"):
            torch.empty(1, device="hybrid:5")
    del x
    assert big.memory_allocated(5) == 0


def test_reentering_a_rack_makes_its_tensors_usable_and_continues_its_timeline(retired):
    rack, x, values = retired
    retired.clear()
    with rack:
        assert rack.is_current
        interop.timeline()
        clock = rack.timeline.now_ps(2)
        records = len(rack.timeline.records)
        assert records > 0  # the copy that made x
        y = x * 2
        assert torch.equal(y.cpu(), values * 2)
        after = interop.timeline()
        assert len(after) > records and rack.timeline.now_ps(2) > clock
        assert after[records].op.startswith("aten::mul") and after[records].start_ps >= clock
    assert held(rack, 2) == (2 * 4 * 8 * 4, 2)
    del x, y
    assert held(rack, 2) == (0, 0)


def test_nested_blocks_reinstall_the_previous_rack_object():
    outer = interop.current_rack()
    a, b = interop.Rack.from_spec("h100:2"), interop.Rack.from_spec("trn2:3")
    with a:
        xa = torch.ones(2, device="hybrid:1")
        with b:
            assert interop.current_rack() is b and torch.hybrid.device_count() == 3
            xb = torch.ones(3, device="hybrid:2")
            with pytest.raises(RuntimeError, match="of rack 'h100:2'"):
                xa + xb[:2]
        assert interop.current_rack() is a
        assert (xa + 1).sum().item() == 4  # a's tensors are usable again
        with pytest.raises(RuntimeError, match="of rack 'trn2:3'"):
            xb + 1
    assert interop.current_rack() is outer


def test_a_copy_of_a_retired_tensor_lands_on_its_own_racks_timeline(retired):
    rack, x, _ = retired
    retired.clear()
    interop.reset_timeline()
    interop.timeline()
    before = len(rack.timeline.records)
    x.cpu()
    assert [r for r in interop.timeline() if r.kind == "copy"] == [], "the current rack did not copy anything"
    rack.timeline.ingest()
    copies = rack.timeline.records[before:]
    assert [(r.kind, r.slot, r.peer, r.bytes) for r in copies] == [("copy", 2, -1, 4 * 8 * 4)]


def test_memory_stats_are_c10_device_stats_as_torch_reads_them():
    x = torch.empty(3000, dtype=torch.uint8, device="hybrid:3")  # small pool
    y = torch.empty(2 << 20, dtype=torch.uint8, device="hybrid:3")  # large pool
    ours = torch.hybrid.memory_stats(3)
    theirs = torch.accelerator.memory_stats(3)
    assert theirs, "torch.accelerator reads the PrivateUse1 allocator's DeviceStats"
    assert {k: ours[k] for k in theirs} == dict(theirs)
    assert ours["allocated_bytes.small_pool.current"] - 3000 >= 0
    assert ours["allocated_bytes.large_pool.current"] >= 2 << 20
    assert ours["allocated_bytes.all.current"] == (ours["allocated_bytes.small_pool.current"]
                                                   + ours["allocated_bytes.large_pool.current"])
    assert ours["reserved_bytes.all.current"] == ours["allocated_bytes.all.current"]  # no cache
    assert torch.hybrid.memory_allocated(3) == torch.accelerator.memory_allocated(3)
    assert ours["capacity"] == torch.hybrid.get_device_properties(3).total_memory
    del x, y


def test_the_slot_limit_is_one_constant_from_the_runtime():
    assert interop._C.MAX_SLOTS == 127  # torch's DeviceIndex is 8-bit
    assert torch._C._get_privateuse1_backend_name() == "hybrid"
    with pytest.raises(ValueError, match=f"at most {interop._C.MAX_SLOTS}"):
        interop.Rack.from_spec("h100:128")
    assert len(interop.Rack.from_spec("h100:127")) == 127


def test_three_racks_in_a_loop_build_and_train_without_del_or_gc():
    # The loop every comparison of racks writes; nothing is deleted by hand.
    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))

    torch.manual_seed(1)
    data, target = torch.randn(8, 16), torch.randn(8, 4)

    def train(model, device):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(data.to(device)), target.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    reference = train(build(), "cpu")
    outer = interop.current_rack()
    outer_bytes = [outer.memory_allocated(i) for i in range(len(outer))]
    racks, results = [], {}
    for spec in ("trn3:2+h100:2", "h100:4", "trn2:2+b200:2"):
        with interop.Rack.from_spec(spec) as rack:
            model = build().to("hybrid:1")
            results[spec] = train(model, "hybrid:1")
            racks.append(rack)
    assert interop.current_rack() is outer
    assert results == {spec: reference for spec in results}, "each rack computes the CPU's exact numbers"
    # Rebinding `model` freed the earlier racks' tensors; the last model still lives on its own rack.
    assert [rack.memory_allocated(1) for rack in racks[:2]] == [0, 0]
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert racks[2].memory_allocated(1) == 2 * params  # weights and their grads
    assert [outer.memory_allocated(i) for i in range(len(outer))] == outer_bytes
    assert all(len(rack.timeline.records) > 0 for rack in racks)


def test_the_readme_tour_runs_and_leaves_its_rack_retired():
    from tests.support.readme_blocks import blocks_of

    tour = next(b for b in blocks_of("README.md") if b.heading == "A tour")
    namespace: dict = {}
    outer = interop.current_rack()
    torch.manual_seed(0)
    exec(compile(tour.code, "README.md (A tour)", "exec"), namespace)
    rack, model, loss = namespace["rack"], namespace["model"], namespace["loss"]
    assert interop.current_rack() is outer
    # The CPU's exact numbers: the same Linear (CPU init, seed 0) on the same input (hybrid:2's
    # generator, seeded 0 by torch.manual_seed, draws what a CPU generator seeded 0 draws).
    torch.manual_seed(0)
    reference = torch.nn.Linear(512, 512)
    ref_loss = reference(torch.randn(8, 512, generator=torch.Generator().manual_seed(0))).sum()
    ref_loss.backward()
    assert torch.equal(loss.cpu(), ref_loss.detach())
    assert torch.equal(model.weight.grad.cpu(), reference.weight.grad)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert rack.memory_allocated(2) >= 2 * params  # weights and grads stay counted on the tour's rack
    with pytest.raises(RuntimeError, match="of rack 'trn3:2\\+h100:2'"):
        loss + 1
    namespace.clear()
    del model, loss
    assert rack.memory_allocated(2) == 0


def test_freeing_a_retired_racks_tensors_from_threads_keeps_both_racks_exact():
    rack = interop.Rack.from_spec("h100:2")
    with rack:
        chunks = [torch.empty(1000 + i, dtype=torch.uint8, device="hybrid:0") for i in range(400)]
    current = interop.current_rack()
    base = current.memory_stats(0)["allocated_bytes.all.current"]
    errors = []

    def free(part):
        try:
            while part:
                part.pop()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    parts = [chunks[i::4] for i in range(4)]
    chunks.clear()
    threads = [threading.Thread(target=free, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    made = [torch.empty(100, dtype=torch.uint8, device="hybrid:0") for _ in range(200)]
    for t in threads:
        t.join()
    del parts
    assert not errors
    assert held(rack, 0) == (0, 0)
    assert current.memory_stats(0)["allocated_bytes.all.current"] == base + 200 * 100
    del made


def test_retired_racks_release_their_accounting():
    import gc

    gc.collect()
    baseline = interop._C._live_slot_tables()
    for i in range(20):
        rack = interop.Rack.from_spec(f"h100:{1 + i % 3}")
        with rack:
            x = torch.ones(10, device="hybrid:0")
        x = x.cpu()  # the hybrid tensor dies; its rack's table may go
    del rack
    gc.collect()
    # Each thread keeps a reference to the table it last used, so a handful may
    # remain; twenty racks' worth may not.
    assert interop._C._live_slot_tables() <= baseline + 2


def test_backing_is_parsed_once_into_a_value():
    b = devices.Backing.parse("cuda:3")
    assert b == "cuda:3" and b.is_cuda and b.cuda_index == 3 and not b.is_auto
    assert devices.Backing.parse("emulated").is_emulated and devices.Backing.parse("auto").is_auto
    import pickle

    assert pickle.loads(pickle.dumps(b)).cuda_index == 3
    for bad in ("tpu", "cuda:", "cuda:-1", "cuda:01", "CUDA:0", 3, None):
        with pytest.raises(ValueError, match="slots\\[0\\].backing: unknown backing .*auto, emulated, cuda:N"):
            devices.Backing.parse(bad, "slots[0].backing")
    rack = interop.Rack.from_spec("trn3:1+h100:2", cuda_count=2)
    assert [d.backing.cuda_index for d in rack.devices] == [None, 0, 1]
    assert all(isinstance(d.backing, devices.Backing) for d in rack.devices)
    forced = interop.Rack.from_spec("h100:2", backing="emulated", cuda_count=2)
    assert [d.backing for d in forced.devices] == ["emulated", "emulated"]


def test_the_current_slot_is_valid_on_a_smaller_rack_and_restored_when_it_retires():
    # set_device(5) on an 8-slot rack, then a 2-slot rack: "hybrid" (no index) named slot 5 there and every
    # factory failed with "hybrid:5 is not a slot of the current rack".
    outer = interop.Rack.from_spec("trn3:4+h100:4")
    with outer:
        torch.hybrid.set_device(5)
        with interop.Rack.from_spec("h100:2"):
            assert torch.hybrid.current_device() == 0
            assert torch.ones(2, device="hybrid").device == torch.device("hybrid", 0)
            torch.hybrid.set_device(1)
        assert torch.hybrid.current_device() == 5  # the outer rack's current slot, as it was
        assert torch.ones(2, device="hybrid").device == torch.device("hybrid", 5)
        torch.hybrid.set_device(0)
