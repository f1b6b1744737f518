"""Every rank's modelled timeline as one: the records of a torch.distributed job's processes, gathered.

Under torchrun on the ``hybrid`` backend each process runs its own slot and keeps its own
timeline of the rack; collectives and transfers carry modelled clocks between processes
(:mod:`collectives.distributed`), so the timelines share one clock and merge into one
picture. A collective every participant placed appears once in the merge, a transfer
both ends placed once. :func:`interop.report` and :func:`interop.export_trace` take
``all_ranks=True`` to report or write the merge on rank 0 (every rank calls them).
"""

from __future__ import annotations

from collections import Counter

from interop import session
from interop.timeline_totals import TimelineTotals
from interop.timelines import TimelineRecord


def _key(r: TimelineRecord) -> tuple:
    # A collective (or a transfer) placed by each of its participants has the same name, participants, start and
    # duration on every rank: the ranks agreed on its start.
    if r.kind == "collective":
        return ("collective", r.op, r.participants, r.start_ps, r.duration_ps, r.link)
    return ("own", r.slot, r.stream, r.kind, r.op, r.start_ps, r.duration_ps, r.peer)


def merge(parts: list[list[TimelineRecord]]) -> list[TimelineRecord]:
    """One list of the records of every rank's timeline (``parts``: one list per rank), each collective and
    transfer once, sorted by start."""
    most: dict[tuple, int] = {}
    first: dict[tuple, list[TimelineRecord]] = {}
    for part in parts:
        counts = Counter()
        for r in part:
            k = _key(r)
            counts[k] += 1
            first.setdefault(k, [])
            if len(first[k]) < counts[k]:
                first[k].append(r)
        for k, n in counts.items():
            most[k] = max(most.get(k, 0), n)
    merged = [r for k, rs in first.items() for r in rs[:most[k]]]
    merged.sort(key=lambda r: (r.start_ps, r.slot, r.stream))
    return merged


def gather(group=None, dst: int = 0) -> tuple[list[TimelineRecord], dict[int, int], TimelineTotals] | None:
    """Gather every rank's timeline and each slot's allocator peak on rank ``dst`` of ``group`` (default: the
    whole job); a collective call: every rank calls it. Returns, on ``dst``, the merged records of the ranks'
    windows, the peak bytes per slot and the merged totals of every record placed (folded ones included:
    :meth:`TimelineTotals.merged`); None elsewhere."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("all_ranks=True: torch.distributed is not initialized (call "
                           "torch.distributed.init_process_group('hybrid') on every rank first)")
    t = session.current_timeline()
    rack = t.rack
    peaks = {d.index: rack.max_memory_allocated(d.index) for d in rack.devices}
    mine = (list(t.records), {s: b for s, b in peaks.items() if b}, t.totals())
    rank = dist.get_rank(group)
    parts = [None] * dist.get_world_size(group) if rank == dst else None
    dist.gather_object(mine, parts, dst=dist.get_global_rank(group, dst) if group is not None else dst,
                       group=group)
    if rank != dst:
        return None
    peak: dict[int, int] = {}
    for _, p, _ in parts:
        for s, b in p.items():
            peak[s] = max(peak.get(s, 0), b)
    totals = TimelineTotals.merged([(totals, set(p)) for _, p, totals in parts])
    return merge([records for records, _, _ in parts]), peak, totals


__all__ = ["gather", "merge"]
