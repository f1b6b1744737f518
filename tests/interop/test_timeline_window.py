"""The timeline's window: a long run keeps its newest records in full and adds up the older ones, and every
figure read from the timeline (report, events, ledger, clocks, trace) equals the run that kept everything."""

from __future__ import annotations

import gc
import json
import tracemalloc
import weakref

import pytest
import torch

import collectives
import interop
from interop.timelines import fold_slack
from interop import _C, session
from interop.hybrid import nvtx

pytestmark = pytest.mark.usefixtures("fresh_timeline")


@pytest.fixture(autouse=True)
def default_window():
    yield
    interop.set_timeline_window()


def _workload(steps: int = 8) -> list[float]:
    """A small training loop on hybrid:4 with a copy to hybrid:5, an all_reduce over both, a named range
    and events around each step; returns the events' modelled times."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to("hybrid:4")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32, device="hybrid:4")
    times = []
    for _ in range(steps):
        start, end = torch.hybrid.Event(enable_timing=True), torch.hybrid.Event(enable_timing=True)
        start.record()
        with nvtx.range("step"):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            y = loss.detach().reshape(1).to("hybrid:5")
            collectives.all_reduce([loss.detach().reshape(1).clone(), y])
        end.record()
        times.append(start.elapsed_time(end))
    return times


def _run(window):
    # the ledger is the process's: other tests on this worker leave keys in it (some without an estimate yet)
    interop.reset_ledger()
    interop.set_timeline_window(window)
    interop.reset_timeline()
    times = _workload()
    t = session.current_timeline()
    ledger = sorted((r.op, r.slot, r.count, r.default_estimate) for r in interop.ledger())
    clocks = dict(t.clocks)
    return {"report": interop.report(), "times": times, "ledger": ledger, "clocks": clocks,
            "records": interop.timeline(), "placed": t.placed, "folded": t.folded.records, "held": len(t.records)}


def test_report_events_ledger_and_clocks_equal_the_run_that_kept_every_record():
    full = _run(None)
    small = _run(7)
    assert full["folded"] == 0 and small["folded"] + small["held"] == small["placed"] and small["folded"] > 40
    assert small["report"] == full["report"]  # every float bit for bit: the same sums in the same order
    assert small["times"] == full["times"]
    assert small["ledger"] == full["ledger"]
    assert small["clocks"] == full["clocks"]
    assert small["records"] == full["records"][-7:]


def test_a_window_of_zero_keeps_no_record_and_still_reports():
    full = _run(None)
    none = _run(0)
    assert none["records"] == [] and none["folded"] + none["held"] == none["placed"] and none["folded"] > 40
    assert none["report"] == full["report"]


def test_the_trace_summarises_folded_records_per_slot_and_stream(tmp_path):
    _run(5)
    t = session.current_timeline()
    doc = json.loads(open(interop.export_trace(tmp_path / "t.json")).read())
    folded = [e for e in doc["traceEvents"] if e.get("cat") == "folded"]
    assert {(e["pid"], e["tid"]) for e in folded} == {(k[0], k[1]) for k in t.folded.per_op if k[0] >= 0}
    host_copies = sum(s.count for k, s in t.folded.per_op.items() if k[0] < 0)
    assert sum(op["count"] for e in folded for op in e["args"]["ops"].values()) + host_copies == t.folded.records
    assert doc["otherData"]["folded"]["records"] == t.folded.records
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") not in ("folded", "range")]) >= 5


def test_with_a_spill_file_the_trace_holds_every_record(tmp_path):
    _run(None)
    full = json.loads(open(interop.export_trace(tmp_path / "full.json")).read())["traceEvents"]
    interop.set_timeline_window(6, spill=tmp_path / "spill.jsonl")
    interop.reset_timeline()
    _workload()
    assert session.current_timeline().folded.records > 40
    spilled = json.loads(open(interop.export_trace(tmp_path / "spilled.json")).read())["traceEvents"]
    ops = lambda events: [e for e in events if e["ph"] == "X" and e["cat"] != "range"]  # noqa: E731
    assert ops(spilled) == ops(full)


def test_a_spill_file_that_cannot_be_written_is_refused_when_set(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(ValueError, match="spill: cannot write"):
        interop.set_timeline_window(10, spill=tmp_path / "dir")
    assert interop.timeline_window().spill is None


@pytest.mark.parametrize("bad", [-1, 2.5, "10", True])
def test_bad_window_sizes_name_the_argument(bad):
    with pytest.raises(ValueError, match="records: expected a number of records >= 0, or None"):
        interop.set_timeline_window(bad)


def test_events_and_ranges_are_forgotten_when_they_cannot_be_read_again():
    interop.set_timeline_window(20)
    t = session.current_timeline()
    x = torch.ones(4, device="hybrid:4")
    for _ in range(200):
        e = torch.hybrid.Event(enable_timing=True)
        e.record()
        e.record()  # recorded anew: the first marker is released
        x += 1
        del e
        nvtx.range_push("r")
        nvtx.range_pop()
    t.ingest()
    assert len(t.markers) <= 2 * 20 + 2  # the newest 20 ranges' two markers each
    assert len(nvtx.ranges()) == 20


def test_a_run_that_never_reads_a_clock_places_its_records_in_bounded_batches():
    interop.set_timeline_window(50)
    _C._set_drain_hook(session.drain, 64)
    try:
        x = torch.ones(8, device="hybrid:4")
        for _ in range(1000):
            x.mul_(1.0)
        assert _C._pending_records() < 64
        t = interop.current_rack().timeline
        # Placed as recorded (their cost known) or in batches: the held records stay within the window's slack.
        assert 50 <= len(t.records) <= 50 + fold_slack(50) and t.placed >= 1000 - 64
    finally:
        _C._set_drain_hook(session.drain, session.DRAIN_BATCH)


def test_reset_timeline_frees_the_records():
    interop.set_timeline_window(None)
    x = torch.ones(8, device="hybrid:4")
    for _ in range(50):
        x.mul_(1.0)
    old = weakref.ref(session.current_timeline())
    tracemalloc.start()
    try:
        for _ in range(3000):
            x.mul_(1.0)
        interop.timeline()
        held = tracemalloc.get_traced_memory()[0]
        interop.reset_timeline()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert old() is None
    assert held > 3000 * 200 and after < held / 10


def test_memory_stays_flat_past_the_window():
    interop.set_timeline_window(100)
    x = torch.ones(8, device="hybrid:4")

    def run(n):
        for _ in range(n):
            x.mul_(1.0)
        interop.timeline()

    run(500)  # warm-up: the per-op totals made
    tracemalloc.start()
    try:
        run(2000)  # the window turned over under tracing: what it holds is traced
        before = tracemalloc.get_traced_memory()[0]
        run(4000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4000 * 20  # an unbounded timeline grows by ~600 B a record


def test_a_spill_that_is_not_a_path_names_itself():
    with pytest.raises(TypeError, match="spill: expected a file path or None, got int"):
        interop.set_timeline_window(10, spill=5)
