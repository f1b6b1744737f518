"""Compiled graphs and Triton launches on racks that switch (issue 7's racks, issue 9's kernels).

A compiled graph or a Triton kernel runs on the current rack's slots like an eager op: it draws from and is
charged to that rack's slot table, its kernel records land on that rack's timeline, and a tensor of a rack that
is not current is refused with the runtime's rack error before anything runs or is counted, on either rack.
"""

from __future__ import annotations

import re
import threading

import pytest
import torch

import interop
from interop.session import record_kernel
from interop.timelines import KernelLaunch

triton = pytest.importorskip("triton", reason="Triton is not installed")

from tests.support import triton_kernels as K  # noqa: E402  (needs triton)

SPEC = "trn3:2+h100:2"  # hybrid:2 is an H100; the default rack's hybrid:2 is a trn4
RETIRED = (r"hybrid:2 \(h100, emulated\) of rack 'trn3:2\+h100:2' cannot be used while another rack is current .*"
           r"Re-enter its rack .* or move it to the CPU first")


def _allocated(rack, slot):
    stats = rack.memory_stats(slot)
    return stats["allocated_bytes.all.current"], stats["allocation.all.allocated"]


def _kernels(rack):
    rack.timeline.ingest()
    return [r for r in rack.timeline.records if r.kind == "kernel"]


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)

    def forward(self, x):
        return torch.nn.functional.gelu(self.up(x)).sum(-1)


def test_a_compiled_model_runs_on_its_rack_and_is_refused_once_that_rack_is_retired():
    torch.manual_seed(0)
    rack, outer = interop.Rack.from_spec(SPEC), interop.current_rack()
    model, x_cpu = Mlp(), torch.randn(8, 16)
    expected = model(x_cpu).detach()
    with rack, torch.no_grad():
        model.to("hybrid:2")
        x = x_cpu.to("hybrid:2")
        compiled = torch.compile(model)
        compiled(x)  # compiles
        interop.reset_timeline()
        outer_before = _allocated(outer, 2)
        held, _ = _allocated(rack, 2)
        out = compiled(x)
        torch.testing.assert_close(out.cpu(), expected)
        # The output (8 floats) is drawn from and charged to this rack's hybrid:2; the buffers are freed.
        assert _allocated(rack, 2)[0] == held + 8 * 4
        assert _allocated(outer, 2) == outer_before
        kernels = _kernels(rack)
        assert kernels and {r.slot for r in kernels} == {2}
        assert {r.op for r in kernels} >= {"inductor:aten::addmm.out"}
        assert all(r.op.startswith("inductor:") for r in kernels)

    interop.reset_timeline()
    outer_before, rack_before = _allocated(outer, 2), _allocated(rack, 2)
    with torch.no_grad(), pytest.raises(RuntimeError, match=RETIRED + r".*\(a graph compiled by torch\.compile\)"):
        compiled(x)
    assert interop.timeline() == []
    assert _allocated(outer, 2) == outer_before and _allocated(rack, 2) == rack_before  # nothing drawn anywhere
    assert len(_kernels(rack)) == len(kernels)

    with rack, torch.no_grad():  # current again: usable, and its timeline continues
        end = rack.timeline.now_ps(2)
        torch.testing.assert_close(compiled(x).cpu(), expected)
        later = _kernels(rack)[len(kernels):]
        assert [r.op for r in later] == [r.op for r in kernels] and later[0].start_ps >= end


def _add_inputs(n=300):
    x, y = torch.randn(n, device="hybrid:2"), torch.randn(n, device="hybrid:2")
    return x, y, torch.zeros(n, device="hybrid:2")


def test_a_triton_kernel_on_a_retired_rack_is_refused_before_it_runs():
    rack, outer = interop.Rack.from_spec(SPEC), interop.current_rack()
    with rack:
        x, y, out = _add_inputs()
    current_x = torch.randn(300, device="hybrid:2")  # the default rack's hybrid:2
    interop.reset_timeline()
    outer_before, rack_before = _allocated(outer, 2), _allocated(rack, 2)
    launch = K.add_kernel[(2,)]
    for args in [(x, y, out), (current_x, y, out), (current_x, current_x, out)]:
        with pytest.raises(RuntimeError, match=RETIRED + r".*\(the Triton kernel add_kernel\)"):
            launch(*args, 300, BLOCK_SIZE=256)
    assert interop.timeline() == [] and _kernels(rack) == []
    assert _allocated(outer, 2) == outer_before and _allocated(rack, 2) == rack_before
    assert torch.equal(out.cpu(), torch.zeros(300))  # nothing was written
    with rack:
        launch(x, y, out, 300, BLOCK_SIZE=256)
        assert torch.equal(out.cpu(), x.cpu() + y.cpu())
        (record,) = _kernels(rack)
        assert record.op == "triton:add_kernel" and record.slot == 2 and record.grid == (2, 1, 1)


def test_a_triton_kernel_on_a_bigger_retired_rack_gets_the_rack_error_not_a_slot_error():
    big = interop.Rack.from_spec("h100:6")
    with big:
        x = torch.ones(64, device="hybrid:5")
    with interop.Rack.from_spec("trn2:2"):
        with pytest.raises(RuntimeError, match=r"hybrid:5 \(h100, emulated\) of rack 'h100:6' cannot be used"):
            K.add_kernel[(1,)](x, x, x, 64, BLOCK_SIZE=64)
    assert torch.equal(x.cpu(), torch.ones(64))


def test_kernel_records_land_on_the_rack_that_ran_them():
    a, b = interop.Rack.from_spec(SPEC), interop.Rack.from_spec("b200:4")
    with a:
        interop.reset_timeline()
        x, y, out = _add_inputs()
        K.add(x, y)
        with b:
            interop.reset_timeline()
            p, q, _ = _add_inputs(100)
            K.add(p, q)
            K.add(p, q)
            on_b = [(r.op, r.slot) for r in interop.timeline() if r.kind == "kernel"]
        on_a = [(r.op, r.slot) for r in interop.timeline() if r.kind == "kernel"]
    assert on_a == [("triton:add_kernel", 2)]
    assert on_b == [("triton:add_kernel", 2)] * 2
    # Priced for the chip that ran them: an H100 on a, a B200 on b.
    assert "h100" in _kernels(a)[0].source.lower() and "b200" in _kernels(b)[0].source.lower()


def test_a_rack_installed_by_another_thread_during_a_launch_does_not_take_its_record():
    """The record names the rack the launch's tensors were checked against, not whichever rack is current
    when the launch ends (a pre-run hook installs another rack from another thread mid-launch)."""
    a, b = interop.Rack.from_spec(SPEC), interop.Rack.from_spec("b200:4")
    outer = interop.current_rack()
    hook_ran = []

    def install_b(*args, **kwargs):
        thread = threading.Thread(target=interop.set_rack, args=(b,))
        thread.start()
        thread.join()
        # This thread's runtime now sees b as current too: only the launch's own rack keeps the record on a.
        hook_ran.append(interop.current_rack() is b and interop._C._current_generation() == b._table.generation)

    kernel = K.scale_kernel
    kernel.add_pre_run_hook(install_b)
    try:
        interop.set_rack(a)
        interop.reset_timeline()
        x = torch.randn(64, device="hybrid:2")
        out = torch.empty_like(x)
        kernel[(1,)](x, out, 64, BLOCK=64)
    finally:
        kernel.pre_run_hooks.remove(install_b)
        interop.set_rack(outer)
    assert hook_ran == [True]
    assert torch.equal(out.cpu(), 2 * x.cpu())
    assert [r.op for r in _kernels(a)] == ["triton:scale_kernel"]
    assert _kernels(b) == []


def test_a_kernel_record_outside_a_call_on_a_slot_is_refused():
    interop.reset_timeline()
    with pytest.raises(RuntimeError, match=re.escape("recorded outside a call on its slot")):
        record_kernel(2, KernelLaunch("triton:orphan", "float32", 4.0))
    assert interop.timeline() == []
    from interop import session

    assert session._launches == {}
