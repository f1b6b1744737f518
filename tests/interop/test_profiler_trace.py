"""torch.profiler on a hybrid workload: the exported trace holds the slots' ops with their modelled durations,
the named ranges and the slots' memory, beside the profiler's own host events; export_trace shows the ranges."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import interop
from interop.profiling import PID_BASE


def test_profiler_trace_gets_the_modelled_device_ops_ranges_and_memory(tmp_path, use_rack):
    use_rack("trn3:1+h100:1")
    torch.hybrid.set_device(1)
    model = torch.nn.Linear(64, 64).to("hybrid:1")
    x = torch.randn(32, 64, device="hybrid:1")
    interop.reset_timeline()
    before = len(interop.timeline())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(2):
            with torch.hybrid.nvtx.range(f"step {i}"):
                model(x).sum().backward()
            prof.step()
    window = interop.timeline()[before:]
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    modelled = [e for e in events if isinstance(e.get("pid"), int) and e["pid"] >= PID_BASE]
    host = [e for e in events if e.get("ph") == "X" and e not in modelled]
    assert host, "the profiler's own host events are kept"
    ops = [e for e in modelled if e["ph"] == "X" and e.get("cat") == "op"]
    assert {e["pid"] for e in ops} == {PID_BASE + 1}
    assert len(ops) == sum(1 for r in window if r.kind == "op")
    assert sum(e["dur"] for e in ops) == pytest.approx(sum(r.duration_ps for r in window if r.kind == "op") / 1e6)
    assert all(e["args"]["modelled"] for e in ops)
    first_host = min(e["ts"] for e in host)
    assert min(e["ts"] for e in ops) == first_host  # the modelled tracks start with the profiler's first event
    ranges = [e["name"] for e in modelled if e.get("cat") == "range"]
    assert ranges == ["step 0", "step 1"]
    memory = [e for e in modelled if e["ph"] == "C"]
    assert memory and all(e["name"] == "hybrid:1 memory (allocated, bytes)" for e in memory)
    assert max(e["args"]["allocated"] for e in memory) >= x.numel() * 4
    names = [e["args"]["name"] for e in modelled if e.get("name") == "process_name"]
    torch.hybrid.set_device(0)
    del model, x
    assert len(names) == 1 and names[0].startswith("hybrid:1 h100 (emulated) [modelled by hybrid-interop]")


def test_export_trace_shows_named_ranges(tmp_path, use_rack):
    use_rack("h100:1")
    interop.reset_timeline()
    torch.hybrid.nvtx.range_push("outer")
    a = torch.randn(128, 128, device="hybrid:0")
    torch.hybrid.nvtx.range_push("inner")
    b = a @ a
    assert torch.hybrid.nvtx.range_pop() == 1
    assert torch.hybrid.nvtx.range_pop() == 0
    assert torch.hybrid.nvtx.range_pop() == -1  # nothing open: torch.cuda.nvtx's answer
    doc = json.loads(open(interop.export_trace(tmp_path / "t.json")).read())
    ranges = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "range"}
    assert set(ranges) == {"outer", "inner"}
    mm = next(e for e in doc["traceEvents"] if e.get("name", "").startswith("aten::mm"))
    assert ranges["inner"]["ts"] <= mm["ts"] and mm["ts"] + mm["dur"] <= ranges["inner"]["ts"] + ranges["inner"]["dur"]
    assert ranges["outer"]["dur"] >= ranges["inner"]["dur"]
    del a, b


def test_profiler_window_stays_on_its_rack_after_a_switch(tmp_path, use_rack):
    """A profile started on one rack traces that rack's timeline and accounts, even when it is stopped and
    exported after another rack became current and the user dropped the first Rack object."""
    use_rack("h100:1")
    first = interop.Rack.from_spec("trn3:2")
    with first:
        a = torch.randn(16, 16, device="hybrid:1")
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.start()
        torch.hybrid.nvtx.range_push("on trn3", device=1)
        b = a @ a
        torch.hybrid.nvtx.range_pop()
    c = torch.randn(16, 16, device="hybrid:0")  # the h100 rack is current: its own timeline, not this window
    c = c @ c
    prof.stop()
    del first
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    modelled = [e for e in json.loads(path.read_text())["traceEvents"]
                if isinstance(e.get("pid"), int) and e["pid"] >= PID_BASE]
    ops = [e["name"].split(" ")[0] for e in modelled if e.get("cat") == "op"]
    assert ops == ["aten::mm"] and {e["pid"] for e in modelled if e["ph"] == "X"} == {PID_BASE + 1}
    names = [e["args"]["name"] for e in modelled if e.get("name") == "process_name"]
    assert len(names) == 1 and names[0].startswith("hybrid:1 trn3")
    assert [e["name"] for e in modelled if e.get("cat") == "range"] == ["on trn3"]
    memory = [e["args"]["allocated"] for e in modelled if e["ph"] == "C" and e["pid"] == PID_BASE + 1]
    assert memory and min(memory) >= a.numel() * 4 and max(memory) >= 2 * a.numel() * 4  # trn3's own account
    del a, b, c, prof
