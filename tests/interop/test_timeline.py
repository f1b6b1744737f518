"""The modelled timeline: records, clocks, events, copies, the report."""

from __future__ import annotations

import gc

import pytest
import torch

import devices
import interop
from interop.timelines import PS


pytestmark = pytest.mark.usefixtures("fresh_timeline")


def test_every_op_is_placed_with_its_estimate():
    a = torch.randn(64, 128, device="hybrid:4")
    b = torch.randn(128, 32, device="hybrid:4")
    interop.reset_timeline()
    (a @ b).relu()
    recs = interop.timeline()
    mm = next(r for r in recs if r.op == "aten::mm")
    expected = devices.estimate("b200", "aten::mm", [(64, 128), (128, 32)], "float32")
    assert mm.slot == 4 and mm.kind == "op" and mm.in_shapes == ((64, 128), (128, 32))
    assert mm.out_shapes == ((64, 32),)
    assert mm.duration_ps == round(expected.seconds * PS)
    assert mm.flops == expected.flops == 2 * 64 * 128 * 32
    assert mm.source and not mm.estimated_by_default
    assert any(r.op.startswith("aten::relu") for r in recs)


def test_ops_on_a_stream_run_back_to_back_and_busy_time_is_their_sum():
    x = torch.randn(256, 256, device="hybrid:1")
    interop.reset_timeline()
    for _ in range(5):
        x = torch.tanh(x @ x)
    recs = [r for r in interop.timeline() if r.slot == 1]
    for prev, nxt in zip(recs, recs[1:]):
        assert nxt.start_ps == prev.end_ps
    rep = interop.report()
    assert rep.slot(1).busy_s == pytest.approx(sum(r.duration_ps for r in recs) / PS, rel=0, abs=0)
    assert rep.makespan_s == recs[-1].end_ps / PS
    assert rep.slot(1).projected  # trn4
    assert all(r.projected for r in recs)


def test_views_cost_nothing():
    x = torch.randn(8, 8, device="hybrid:5")
    interop.reset_timeline()
    t = x.t()
    x.view(64)
    x[2:5]
    x.unsqueeze(0).expand(3, 8, 8)
    # A view is metadata: nothing runs on the slot, nothing is placed, no clock moves.
    assert interop.timeline() == []
    assert interop.current_rack().timeline.now_ps(5) == 0
    # Recording is on: materialising the transposed view is a copy on the slot, placed with its cost.
    t.contiguous()
    (copy,) = interop.timeline()
    assert (copy.kind, copy.slot, copy.bytes) == ("copy", 5, 8 * 8 * 4) and copy.duration_ps > 0


def test_event_elapsed_time_is_exactly_the_ops_between():
    x = torch.randn(128, 128, device="hybrid:6")
    with torch.hybrid.device(6):
        start, end = torch.hybrid.Event(enable_timing=True), torch.hybrid.Event(enable_timing=True)
        y = x @ x
        start.record()
        for _ in range(3):
            y = (y @ x).sigmoid()
        end.record()
    recs = interop.timeline()
    mark = next(i for i, r in enumerate(recs) if r.op == "aten::mm")  # the op before `start`
    between = recs[mark + 1:]
    assert start.elapsed_time(end) == sum(r.duration_ps for r in between) / 1e9
    assert start.elapsed_time(end) > 0


def test_stream_wait_event_orders_modelled_time():
    x = torch.randn(512, 512, device="hybrid:2")
    s1, s2 = torch.hybrid.Stream(device=2), torch.hybrid.Stream(device=2)
    with torch.hybrid.device(2):
        with torch.hybrid.stream(s1):
            y = x @ x
            done = torch.hybrid.Event()
            done.record(s1)
        with torch.hybrid.stream(s2):
            done.wait(s2)
            z = x + 1
    recs = interop.timeline()
    producer = next(r for r in recs if r.op == "aten::mm")
    consumer = next(r for r in recs if r.op.startswith("aten::add"))
    assert producer.stream == s1.stream_id and consumer.stream == s2.stream_id
    assert consumer.start_ps >= producer.end_ps
    del y, z


def test_copy_between_slots_orders_both_timelines_and_uses_the_link():
    a = torch.randn(1 << 16, device="hybrid:0")
    interop.reset_timeline()
    b = a.to("hybrid:5")
    b.mul_(2)
    recs = interop.timeline()
    copy = next(r for r in recs if r.kind == "copy")
    after = next(r for r in recs if r.kind == "op" and r.slot == 5)
    assert copy.slot == 0 and copy.peer == 5 and copy.bytes == a.numel() * 4
    assert "hybrid:0->hybrid:5" in copy.link
    assert after.start_ps >= copy.end_ps
    rep = interop.report()
    assert rep.slot(0).busy_s == pytest.approx(rep.slot(5).busy_s - after.duration_ps / PS, rel=1e-12)
    assert any(link.link == copy.link and link.bytes == copy.bytes for link in rep.links)


def test_host_copies_cross_pcie():
    interop.reset_timeline()
    x = torch.ones(1000).to("hybrid:3")
    (rec,) = [r for r in interop.timeline() if r.kind == "copy"]
    assert rec.slot == -1 and rec.peer == 3 and "pcie" in rec.link
    del x


def test_report_energy_and_cost(use_rack):
    use_rack("trn1:2")
    interop.reset_timeline()
    x = torch.randn(256, 256, device="hybrid:1")
    (x @ x).sum()
    rep = interop.report()
    chip = devices.chip("trn1")
    s = rep.slot(1)
    assert s.energy_j is None if chip.power is None else s.energy_j == pytest.approx(chip.power.value * s.busy_s)
    if chip.price_per_hour is None:
        assert s.cost_usd is None
    else:
        assert s.cost_usd == pytest.approx(chip.price_per_hour.value * rep.makespan_s / 3600)
    assert s.achieved_flops <= s.peak_flops
    assert "makespan" in rep.table()
    # One price basis for every slot, named in the table; per-token figures when the tokens are given.
    reserved = interop.report(price_basis="reserved-effective", tokens=1000)
    per_chip = chip.prices["reserved-effective"].value
    assert reserved.cost_usd == pytest.approx(2 * per_chip * reserved.makespan_s / 3600)
    assert reserved.usd_per_million_tokens == pytest.approx(reserved.cost_usd / 1000 * 1e6)
    assert reserved.energy_j is None and reserved.joules_per_token is None
    assert "no Trainium (Trn1) board power" in reserved.energy_unset
    text = reserved.table()
    assert "cost USD (reserved-effective)" in text and "per M tokens" in text and "energy unset: trn1:" in text
    with pytest.raises(ValueError, match="price_basis: unknown basis 'spot'"):
        interop.report(price_basis="spot")
    del x
    gc.collect()


def test_report_cost_unset_on_a_basis_a_kind_lacks(use_rack):
    use_rack("h100:1+trn1:1")
    interop.reset_timeline()
    x = torch.randn(64, 64, device="hybrid:0")
    (x @ x).sum()
    rep = interop.report(price_basis="reserved-effective", tokens=10)
    assert rep.slot(0).cost_usd is None and rep.slot(1).cost_usd is not None and rep.cost_usd is None
    assert rep.cost_unset.startswith("h100: ") and "cost unset on reserved-effective: h100:" in rep.totals()
    h100 = devices.chip("h100").power.value
    assert rep.slot(0).energy_j == pytest.approx(h100 * rep.slot(0).busy_s)
    del x
    gc.collect()


def test_unknown_ops_are_counted_not_hidden():
    x = torch.randn(16, device="hybrid:4")
    interop.reset_timeline()
    torch.special.bessel_j0(x)
    rep = interop.report()
    recs = interop.timeline()
    flagged = [r for r in recs if r.estimated_by_default]
    assert flagged and all(r.op == "aten::special_bessel_j0" for r in flagged)
    assert rep.slot(4).estimated_by_default == len(flagged)


def test_recording_off_places_nothing():
    interop.set_recording(False)
    x = torch.randn(32, 32, device="hybrid:1")
    x @ x
    assert interop.timeline() == []


def test_export_trace_and_gantt(tmp_path):
    import json

    x = torch.randn(64, 64, device="hybrid:0")
    y = (x @ x).to("hybrid:4")
    torch.relu(y)
    path = interop.export_trace(tmp_path / "trace.json")
    doc = json.load(open(path))
    events = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert all(any(n.startswith(f"hybrid:{d.index} ") for n in procs.values()) for d in interop.current_rack().devices)
    assert any(n.startswith("link hybrid:0->hybrid:4") for n in procs.values())
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert "modelled" in doc["otherData"]["note"]
    png = interop.gantt(tmp_path / "gantt.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_records_carry_torchs_own_dtype_names(monkeypatch):
    # One vocabulary: the runtime hands the cost model torch's names, not c10's ("BFloat16").
    interop.timeline()  # everything earlier is placed
    devices.cost.cache_clear()  # the runtime's cost table too: every record below is priced afresh
    seen = []
    price = interop.session.price
    monkeypatch.setattr(interop.session, "price", lambda *a: seen.append(a[6]) or price(*a))
    a = torch.ones(8, 8, dtype=torch.bfloat16, device="hybrid:4")
    (a @ a).to(torch.float8_e4m3fn).to("hybrid:5")
    interop.reset_timeline()
    names = set(seen)
    assert {"bfloat16", "float8_e4m3fn"} <= names
    assert names <= {devices.dtype_name(t) for t in (torch.bfloat16, torch.float8_e4m3fn, torch.float32)}
    for name in names:  # the cost model's vocabulary, as is
        assert devices.estimate("b200", "aten::add.Tensor", [(8,), (8,)], name).dtype == name


def test_a_host_read_holds_back_every_slot_under_one_host_and_only_its_own_under_hosts_per_slot():
    """A synchronous copy to the host (``tolist()``) blocks the host that issued it: under one host (this
    process), work issued afterwards on any slot starts after the copy ends; with a host per slot (a plan's
    stages, each deployed as its own process), only its own slot's work waits."""
    from interop.session import current_timeline

    big = torch.randn(512, 512, device="hybrid:0")
    offs = torch.arange(4, device="hybrid:0")
    other = torch.randn(64, device="hybrid:1")

    def issue():
        big @ big  # keeps slot 0 busy, so the read ends late
        offs.tolist()
        (other + 1, big + 1)  # issued after the read: one op on the other slot, one on the reading slot
        torch.hybrid.synchronize()
        recs = interop.timeline()
        read = next(r for r in recs if r.kind == "copy" and r.peer == -1)
        elsewhere = next(r for r in recs if r.kind == "op" and r.slot == 1)
        own = [r for r in recs if r.kind == "op" and r.slot == 0][-1]
        return read, elsewhere, own

    interop.reset_timeline()
    read, elsewhere, own = issue()
    assert elsewhere.start_ps == read.end_ps and own.start_ps == read.end_ps

    interop.reset_timeline()
    with current_timeline().hosts_per_slot():
        read, elsewhere, own = issue()
    assert elsewhere.start_ps == 0 < read.end_ps  # slot 1's host did not wait
    assert own.start_ps == read.end_ps
    (other * 2).sum()  # after the block: one host again, which waited for the read
    torch.hybrid.synchronize()
    after = [r for r in interop.timeline() if r.kind == "op" and r.slot == 1][-1]
    assert after.start_ps >= read.end_ps


def test_an_interrupt_while_records_are_placed_reaches_the_script(monkeypatch, tmp_path):
    """Ops place their records in batches, from inside the op that fills one (session.drain). A Ctrl-C that
    landed while a batch was placed was discarded as an 'unraisable' error, and the script ran on: `hybrid run`
    then never stopped on SIGINT (its signal test hung, at random, on a loaded machine). An interrupt, or any
    exception that is not an Exception, reaches the script from that op; a placing error is still reported
    and left behind."""
    from interop import session

    from interop.timelines import Timeline

    placed = []

    def interrupted(*args):
        placed.append(args)
        raise KeyboardInterrupt

    # With a spill file every record waits in the log and is placed by the drain, in batches.
    interop.set_timeline_window(spill=tmp_path / "spill.jsonl")
    monkeypatch.setattr(Timeline, "fold_spilled", interrupted)
    x = torch.ones(4, device="hybrid:1")
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in range(2 * session.DRAIN_BATCH + 1):
                x = x * 1.0
        assert len(placed) == 1
    finally:
        monkeypatch.undo()
        interop.set_timeline_window()
