"""torch.hybrid mirrors torch.cuda: names, shapes of results, device arguments."""

from __future__ import annotations

import pytest
import torch

import devices
import interop


def test_registration():
    assert torch._C._get_privateuse1_backend_name() == "hybrid"
    assert torch.hybrid is interop.hybrid
    assert torch.hybrid.is_available()
    x = torch.ones(2, device="hybrid:1")
    assert x.is_hybrid and x.device == torch.device("hybrid", 1)
    assert torch.ones(2).hybrid(3).device == torch.device("hybrid", 3)
    assert torch.nn.Linear(2, 2).hybrid(2).weight.device == torch.device("hybrid", 2)


def test_default_rack_is_fusion_default():
    rack = interop.current_rack()
    assert rack.name == "fusion-default"
    assert torch.hybrid.device_count() == len(rack) == 8
    assert [d.kind for d in rack.devices] == ["trn4"] * 4 + ["b200"] * 4


def test_current_device_and_context():
    assert torch.hybrid.current_device() == 0
    with torch.hybrid.device(5):
        assert torch.hybrid.current_device() == 5
        assert torch.empty(1, device="hybrid").device.index == 5
    assert torch.hybrid.current_device() == 0
    torch.hybrid.set_device("hybrid:2")
    try:
        assert torch.hybrid.current_device() == 2
    finally:
        torch.hybrid.set_device(0)


def test_bad_device_arguments():
    with pytest.raises(ValueError, match="valid indices are 0..7"):
        torch.hybrid.memory_allocated(8)
    with pytest.raises(ValueError, match="expected a hybrid device"):
        torch.hybrid.memory_allocated("cpu")
    with pytest.raises(RuntimeError, match="not a slot of the current rack"):
        torch.empty(1, device="hybrid:9")


def test_device_name_and_properties_come_from_the_catalogue():
    props = torch.hybrid.get_device_properties(4)
    b200 = devices.chip("b200")
    assert props.kind == "b200" and props.backing == "emulated"
    assert props.total_memory == int(b200.hbm_capacity.value)
    assert props.peak_flops["bfloat16"] == b200.peak["bfloat16"].value
    assert "B200" in torch.hybrid.get_device_name(4)
    trn4 = torch.hybrid.get_device_properties(0)
    assert trn4.projected and "projected" in torch.hybrid.get_device_name(0)


def test_mem_get_info_tracks_allocations():
    free0, total = torch.hybrid.mem_get_info(6)
    x = torch.empty(1024, dtype=torch.float32, device="hybrid:6")
    free1, total1 = torch.hybrid.mem_get_info(6)
    assert total1 == total == int(devices.chip("b200").hbm_capacity.value)
    assert free0 - free1 == 4096
    del x


def test_accelerator_api_sees_the_slots():
    assert torch.accelerator.current_accelerator().type == "hybrid"
    assert torch.accelerator.device_count() == 8
    x = torch.empty(256, dtype=torch.uint8, device="hybrid:3")
    assert torch.accelerator.memory_allocated(3) == torch.hybrid.memory_allocated(3) >= 256
    del x


def test_synchronize_places_the_slots_work_and_empty_cache_keeps_memory():
    x = torch.randn(64, 64, device="hybrid:3")
    interop.reset_timeline()
    placed = interop.current_rack().timeline  # its records are what has been costed and placed so far
    y = x @ x  # placed as recorded when its cost is known, else when a clock is read
    torch.hybrid.synchronize(3)
    assert [(r.op, r.slot) for r in placed.records] == [("aten::mm", 3)]
    assert interop._C._pending_records() == 0
    torch.hybrid.synchronize()  # the current slot: nothing left to place, nothing added
    assert len(placed.records) == 1
    with pytest.raises(ValueError, match=r"hybrid:99 is not a slot of the current rack"):
        torch.hybrid.synchronize(99)
    # The allocator caches nothing: emptying its cache frees nothing a tensor holds and changes no counter.
    before = (torch.hybrid.memory_allocated(3), torch.hybrid.memory_reserved(3))
    torch.hybrid.empty_cache()
    assert (torch.hybrid.memory_allocated(3), torch.hybrid.memory_reserved(3)) == before
    assert before[0] == before[1] >= 2 * 64 * 64 * 4
    assert torch.equal(y.cpu(), x.cpu() @ x.cpu())


def test_streams_and_events():
    s = torch.hybrid.Stream(device=1)
    assert s.device == torch.device("hybrid", 1) and s.stream_id != 0
    assert torch.hybrid.current_stream(1).stream_id == 0
    with torch.hybrid.stream(s):
        assert torch.hybrid.current_stream(1).stream_id == s.stream_id
    assert torch.hybrid.current_stream(1).stream_id == 0
    e = torch.hybrid.Event(enable_timing=True)
    e.record()
    assert e.query()
    e.synchronize()


def test_a_slots_backward_runs_on_the_calling_thread():
    """torch stashes the caller's contextvars Context in each backward's thread-local state; a device thread
    that dropped it after the interpreter began finalizing took the GIL, and CPython ended that thread with a
    forced unwind through a noexcept destructor: std::terminate (exit status 134) at random after a script's
    last backward. `import interop` runs a slot's backward on the thread that calls it, as the CPU's runs."""
    import threading

    x = torch.randn(4, device="hybrid:1", requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(threading.get_ident()))
    (x * 2).sum().backward()
    assert seen == [threading.get_ident()]
    assert torch.equal(x.grad.cpu(), torch.full((4,), 2.0))
