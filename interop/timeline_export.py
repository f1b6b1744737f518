"""Exports of the modelled timeline: Chrome trace JSON (Trace Event Format,
opens in Perfetto and chrome://tracing) and a PNG Gantt chart."""

from __future__ import annotations

import itertools
import json
import os

from devices.output_files import atomic_path
from interop import session
from interop.timeline_totals import TimelineTotals
from interop.timelines import TimelineRecord

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


def folded_events(folded: TimelineTotals, rack) -> list[dict]:
    """What left the timeline's window, as one complete event per slot and stream spanning it, whose
    arguments give per op the record count, modelled busy time, FLOPs and bytes."""
    groups: dict[tuple[int, int], dict] = {}
    for (slot, stream, kind, op), stats in folded.per_op.items():
        if slot < 0:
            continue  # a copy from the host: on its destination's summary
        group = groups.setdefault((slot, stream), {"records": 0, "start": stats.first_start_ps, "end": 0, "ops": {}})
        group["records"] += stats.count
        group["start"] = min(group["start"], stats.first_start_ps)
        group["end"] = max(group["end"], stats.last_end_ps)
        group["ops"][f"{kind}: {op}"] = {"count": stats.count, "busy_ms": stats.duration_ps / 1e9,
                                          "flops": stats.flops, "bytes": stats.bytes,
                                          "estimated_by_default": stats.estimated_by_default}
    events = []
    for (slot, stream), group in sorted(groups.items()):
        events.append({"ph": "X", "name": f"{group['records']} earlier records (folded)", "cat": "folded",
                       "pid": slot, "tid": stream, "ts": group["start"] / 1e6,
                       "dur": (group["end"] - group["start"]) / 1e6,
                       "args": {"modelled": True, "note": "records that left the timeline's window, added up "
                                "per op (interop.set_timeline_window)", "ops": group["ops"]}})
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
    spilled = t.window.spill is not None and t.folded.records
    records = itertools.chain(t.spilled(), t.records) if spilled else t.records
    folded = [] if spilled else folded_events(t.folded, t.rack)
    ranks = None
    if all_ranks:
        import torch.distributed as dist

        from interop.merged import gather

        gathered = gather()
        if gathered is None:
            return None
        records, ranks, folded = gathered[0], dist.get_world_size(), []
    doc = {
        "traceEvents": trace_events(records, t.rack) + folded + range_events(ranges(t)),
        "displayTimeUnit": "ns",
        "otherData": {"rack": t.rack.name, "source": t.rack.spec.source,
                      "numerics": {f"hybrid:{d.index}": slot_label(t.rack, d.index) for d in t.rack.devices},
                      "note": "every duration is modelled by hybrid-interop's cost model, not measured"},
    }
    if t.folded.records and ranks is None:
        doc["otherData"]["folded"] = {
            "records": t.folded.records, "window": t.window.records, "spill": t.window.spill,
            "note": "every record is in the trace (read back from the spill file)" if spilled else
                    "records that left the timeline's window are one summary event per slot and stream"}
    if ranks is not None:
        doc["otherData"]["ranks"] = ranks
        doc["otherData"]["merged"] = "every rank's timeline on one modelled clock; each collective once"
    path = os.fspath(path)
    with atomic_path(path, "path") as tmp, open(tmp, "w") as f:  # a whole trace or none
        json.dump(doc, f)
    return path


def gantt(path: str | os.PathLike, *, title: str | None = None) -> str:
    """A PNG Gantt chart of the current timeline: a row per slot and stream, and per link; bars coloured by
    op class, dense rows drawn as time bins (see :mod:`interop.charts`)."""
    from interop.charts import timeline_gantt

    t = session.current_timeline()
    return timeline_gantt(t.records, t.rack, path, title=title)
