"""The per-op path stays in C++: a warm op on a slot enters no Python function at all, and its record is
placed where it is recorded, by the runtime's cost table, with the figures the Python cost model gives.

Counting Python calls is deterministic where a time is not (issue 29: the per-op cost had risen from 0.5 to
8 us, all of it Python placing each record)."""

from __future__ import annotations

import sys

import torch

import devices.cost
import interop
from interop import _C
from interop.record_costs import PS


def _python_calls(fn) -> list[str]:
    """The Python functions entered while ``fn`` runs (not counting ``fn`` itself)."""
    entered = []

    def profile(frame, event, arg):
        if event == "call":
            entered.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entered[1:]  # fn's own frame first


def test_a_warm_op_enters_no_python(fresh_timeline):
    a = torch.ones(16, device="hybrid:4")
    b = torch.ones(4, 4, device="hybrid:5")

    def ops():
        for _ in range(50):
            a.add_(1)
            a.mul(2).sum()
            b @ b
            a.to("hybrid:5")  # a copy between slots: its link cost from the same table

    ops()  # the first of each op is priced by Python, once
    interop.timeline()
    assert _python_calls(ops) == []
    assert _C._pending_records() == 0  # placed where recorded, nothing left for a drain


def test_records_placed_in_cpp_carry_the_cost_models_figures(fresh_timeline):
    x = torch.randn(32, 64, device="hybrid:4")
    w = torch.randn(64, 16, device="hybrid:4")
    for _ in range(3):
        (x @ w).relu_().sum()
    records = interop.timeline()
    assert len(records) == 2 + 9  # the two randn, then mm, relu_, sum three times
    clock = 0
    kind = interop.current_rack().devices[4].kind
    for r in records:
        est = devices.cost.estimate(kind, r.op, r.in_shapes, r.dtype, out_shapes=r.out_shapes)
        assert (r.duration_ps, r.flops, r.bytes, r.bound, r.sources) == (
            round(est.seconds * PS), est.flops, est.bytes, est.bound, est.sources)
        assert r.start_ps == clock  # one stream: each starts when the one before it ends
        clock = r.end_ps
    assert interop.report().makespan_s * PS == clock


def test_editing_the_catalogue_reaches_the_table(fresh_timeline, monkeypatch):
    """The table caches the cost model; devices.cost.cache_clear (a catalogue edited) empties it too."""
    import dataclasses

    import devices.cost.efficiency as eff

    x = torch.ones(1024, device="hybrid:4")
    x.add_(1)
    before = interop.timeline()[-1].duration_ps
    params_for = eff.params_for

    def slower(*args):
        p = params_for(*args)
        return dataclasses.replace(p, launch_overhead=dataclasses.replace(p.launch_overhead,
                                                                          value=p.launch_overhead.value * 10))

    devices.cost.cache_clear()
    monkeypatch.setattr(eff, "params_for", slower)
    try:
        x.add_(1)
        after = interop.timeline()[-1].duration_ps
    finally:
        monkeypatch.undo()
        devices.cost.cache_clear()
    assert after > before
    x.add_(1)
    assert interop.timeline()[-1].duration_ps == before
