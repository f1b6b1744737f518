"""Exports of the modelled timeline: Chrome trace JSON (Trace Event Format,
opens in Perfetto and chrome://tracing) and a PNG Gantt chart."""

from __future__ import annotations

import json
import os

from interop import session
from interop.timelines import PS, TimelineRecord

# Process ids: one per slot (its index), links after them.
LINK_PID_BASE = 1000


def _slot_process_name(device, rack) -> str:
    from interop.numerics.slots.settings import slot_label

    projected = ", projected" if device.spec.projected else ""
    return (f"hybrid:{device.index} {device.kind} ({device.backing}{projected}) [modelled] "
            f"[numerics {slot_label(rack, device.index)}]")


def trace_events(records: list[TimelineRecord], rack) -> list[dict]:
    """Trace Event Format events: one process per slot (a thread per stream),
    one process per link; complete ('X') events in microseconds."""
    events: list[dict] = []
    for d in rack.devices:
        events.append({"ph": "M", "name": "process_name", "pid": d.index, "tid": 0,
                       "args": {"name": _slot_process_name(d, rack)}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": d.index, "tid": 0,
                       "args": {"sort_index": d.index}})
    threads: set[tuple[int, int]] = set()
    link_pids: dict[str, int] = {}

    def thread(pid: int, tid: int, name: str) -> None:
        if (pid, tid) not in threads:
            threads.add((pid, tid))
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})

    for r in records:
        args = {"modelled": True, "flops": r.flops, "bytes": r.bytes, "bound": r.bound, "dtype": r.dtype,
                "in_shapes": [list(s) for s in r.in_shapes], "out_shapes": [list(s) for s in r.out_shapes],
                "projected": r.projected, "estimated_by_default": r.estimated_by_default, "source": r.source}
        if r.grid:
            args["grid"] = list(r.grid)
        ts, dur = r.start_ps / 1e6, r.duration_ps / 1e6
        slots = r.participants or tuple(s for s in (r.slot, r.peer) if s is not None and s >= 0)
        for s in slots:
            thread(s, r.stream, f"stream {r.stream}")
            events.append({"ph": "X", "name": r.op, "cat": r.kind, "pid": s, "tid": r.stream, "ts": ts,
                           "dur": dur, "args": args})
        if r.link:
            pid = link_pids.get(r.link)
            if pid is None:
                pid = link_pids[r.link] = LINK_PID_BASE + len(link_pids)
                events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                               "args": {"name": f"link {r.link} [modelled]"}})
                events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                               "args": {"sort_index": pid}})
                thread(pid, 0, "transfers")
            events.append({"ph": "X", "name": r.op, "cat": "link", "pid": pid, "tid": 0, "ts": ts, "dur": dur,
                           "args": args})
    return events


RANGE_TID_BASE = 100_000  # named-range tracks sit below a slot's stream tracks


def range_events(ranges) -> list[dict]:
    """Named ranges (torch.cuda.nvtx / torch.hybrid.nvtx) as complete events, a track per nesting depth."""
    events: list[dict] = []
    tracks: set[tuple[int, int]] = set()
    for r in ranges:
        tid = RANGE_TID_BASE + r.depth
        if (r.slot, tid) not in tracks:
            tracks.add((r.slot, tid))
            events.append({"ph": "M", "name": "thread_name", "pid": r.slot, "tid": tid,
                           "args": {"name": f"ranges (depth {r.depth})"}})
        events.append({"ph": "X", "name": r.name, "cat": "range", "pid": r.slot, "tid": tid,
                       "ts": r.start_ps / 1e6, "dur": (r.end_ps - r.start_ps) / 1e6,
                       "args": {"modelled": True, "stream": r.stream}})
    return events


def export_trace(path: str | os.PathLike, *, all_ranks: bool = False) -> str | None:
    """Write the current modelled timeline as Chrome trace JSON; returns the path.

    ``all_ranks=True`` (under torch.distributed, every rank calls it): rank 0 writes every rank's timeline
    merged into one trace (:mod:`interop.merged`: one modelled clock, each collective once) and returns the
    path; the other ranks write nothing and return None."""
    from interop.hybrid.nvtx import ranges
    from interop.numerics.slots.settings import slot_label

    t = session.current_timeline()
    records = t.records
    ranks = None
    if all_ranks:
        import torch.distributed as dist

        from interop.merged import gather

        gathered = gather()
        if gathered is None:
            return None
        records, ranks = gathered[0], dist.get_world_size()
    doc = {
        "traceEvents": trace_events(records, t.rack) + range_events(ranges(t)),
        "displayTimeUnit": "ns",
        "otherData": {"rack": t.rack.name, "source": t.rack.spec.source,
                      "numerics": {f"hybrid:{d.index}": slot_label(t.rack, d.index) for d in t.rack.devices},
                      "note": "every duration is modelled by hybrid-interop's cost model, not measured"},
    }
    if ranks is not None:
        doc["otherData"]["ranks"] = ranks
        doc["otherData"]["merged"] = "every rank's timeline on one modelled clock; each collective once"
    path = os.fspath(path)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def gantt(path: str | os.PathLike, *, title: str | None = None) -> str:
    """A PNG Gantt chart of the current timeline: a row per slot and stream, and per link; bars coloured by
    op class, dense rows drawn as time bins (see :mod:`interop.charts`)."""
    from interop.charts import timeline_gantt

    t = session.current_timeline()
    return timeline_gantt(t.records, t.rack, path, title=title)
