"""torch.profiler on a hybrid workload: the exported trace gets the slots' device ops with their modelled
durations, their named ranges, and the slots' memory.

torch's profiler sees the host side only (the CPU ops, their shapes, the
Python stack).  While a ``torch.profiler.profile`` is active this module notes
which part of the modelled timeline it covers; ``export_chrome_trace`` (and so
``tensorboard_trace_handler``) then appends that part to the file: a process
per slot (``hybrid:4 b200 [modelled]``, a thread per stream and per range
depth) starting at the profiler's first event, and a counter track of each
slot's allocated bytes (sampled at ``start``, every ``step()`` and ``stop``, at
the slot's modelled time).  Every added duration is modelled, and says so.

The window belongs to the rack that was current at ``start``: its timeline and
its accounts, read even if another rack is current by the time of ``step``,
``stop`` or the export (the profiler keeps that rack alive until it is
discarded).  Work done meanwhile on another rack is on that rack's timeline,
not in this trace.

Installed by ``import interop`` (one wrap of four profiler methods; nothing on the per-op path).
"""

from __future__ import annotations

import functools
import gzip
import json
import os

PID_BASE = 10_000_000
"""Process ids of the modelled tracks (well above the host's real pids)."""

_installed = False


def _timeline():
    from interop import session

    return session.current_timeline()


def _sample(window: dict) -> None:
    # The window's rack, current or not: its own accounts and clocks.
    t = window["timeline"]
    t.ingest()
    rack = t.rack
    for d in rack.devices:
        window["memory"].append((d.index, t.now_ps(d.index), rack.memory_allocated(d.index)))


def _window(prof) -> dict:
    window = getattr(prof, "_hybrid_window", None)
    if window is None:
        window = prof._hybrid_window = {"first": None, "last": None, "timeline": None, "rack": None, "memory": []}
    return window


def modelled_events(window: dict, base_us: float) -> list[dict]:
    """The modelled part of a profiler's window as trace events starting at ``base_us``."""
    from interop.hybrid.nvtx import ranges
    from interop.timeline_export import range_events, trace_events

    t = window["timeline"]
    if t is None:
        return []
    t.ingest()
    records = t.since(window["first"])  # what is still in the timeline's window of it
    if window["last"] is not None and t.placed > window["last"]:
        records = records[:max(0, len(records) - (t.placed - window["last"]))]
    origin = min((r.start_ps for r in records), default=0)
    lo, hi = origin, max((r.end_ps for r in records), default=origin)
    events = trace_events(records, t.rack)
    events += range_events([r for r in ranges(t) if r.start_ps >= lo and r.end_ps <= hi])
    slots_with_work = {e["pid"] for e in events if e["ph"] == "X"}
    events = [e for e in events if e["ph"] != "M" or e["pid"] in slots_with_work]
    for e in events:
        e["pid"] = PID_BASE + e["pid"]
        if e["ph"] == "X":
            e["ts"] = base_us + e["ts"] - origin / 1e6
        if e.get("name") == "process_name":
            e["args"]["name"] = e["args"]["name"].replace("[modelled]", "[modelled by hybrid-interop]")
    involved = {e["pid"] - PID_BASE for e in events if e["ph"] == "X"}
    for slot, now_ps, allocated in window["memory"]:
        if slot not in involved and allocated == 0:
            continue
        events.append({"ph": "C", "name": f"hybrid:{slot} memory (allocated, bytes)", "pid": PID_BASE + slot,
                       "ts": base_us + max(0, now_ps - origin) / 1e6, "args": {"allocated": allocated}})
    return events


def _open(path: str, mode: str):
    # tensorboard_trace_handler(use_gzip=True) writes `.json.gz`.
    return gzip.open(path, mode + "t") if path.endswith(".gz") else open(path, mode)


def merge_into(path: str, window: dict) -> None:
    """Append the window's modelled events to a Chrome trace JSON (``.json`` or ``.json.gz``) written by the
    profiler."""
    with _open(path, "r") as f:
        doc = json.load(f)
    trace = doc["traceEvents"] if isinstance(doc, dict) else doc
    stamps = [e["ts"] for e in trace if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    base = min(stamps, default=0.0)
    trace.extend(modelled_events(window, float(base)))
    if isinstance(doc, dict):
        doc.setdefault("otherData", {})["hybrid-interop"] = (
            "processes named '[modelled by hybrid-interop]' hold the slots' device ops with modelled durations "
            "(cost model, not measured), starting at the profiler's first event")
    tmp = f"{path}.tmp.gz" if path.endswith(".gz") else f"{path}.tmp"
    with _open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def install() -> None:
    """Wrap torch.profiler.profile's start/step/stop/export_chrome_trace (once), each keeping torch's signature:
    every argument reaches torch's method as it was given (tensorboard_trace_handler passes
    ``use_python_export=``)."""
    global _installed
    if _installed:
        return
    import torch.profiler

    cls = torch.profiler.profile
    start, stop, step, export = cls.start, cls.stop, cls.step, cls.export_chrome_trace

    @functools.wraps(start)
    def wrapped_start(self, *args, **kwargs):
        window = _window(self)
        t = _timeline()
        # The rack is held: its Timeline refers to it weakly, and the export may come after it is dropped.
        window.update(timeline=t, rack=t.rack, first=t.placed, last=None, memory=[])
        _sample(window)
        return start(self, *args, **kwargs)

    @functools.wraps(step)
    def wrapped_step(self, *args, **kwargs):
        window = _window(self)
        if window["timeline"] is not None:
            _sample(window)
        return step(self, *args, **kwargs)

    @functools.wraps(stop)
    def wrapped_stop(self, *args, **kwargs):
        result = stop(self, *args, **kwargs)
        window = _window(self)
        if window["timeline"] is not None:
            _sample(window)
            window["last"] = window["timeline"].placed
        return result

    @functools.wraps(export)
    def wrapped_export(self, path, *args, **kwargs):
        result = export(self, path, *args, **kwargs)
        window = _window(self)
        if window["timeline"] is not None and str(path).endswith((".json", ".json.gz")):
            merge_into(str(path), window)
        return result

    cls.start, cls.stop, cls.step, cls.export_chrome_trace = wrapped_start, wrapped_stop, wrapped_step, wrapped_export
    _installed = True


__all__ = ["PID_BASE", "install", "merge_into", "modelled_events"]
