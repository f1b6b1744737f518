"""What a timeline's records add up to: per slot, per link and per op, the figures the report, the
op ledger and the trace's summary of folded records are made of.

A timeline keeps its newest records in full (its window, :func:`interop.set_timeline_window`) and
adds each older one to a :class:`TimelineTotals` as it leaves the window. The report is that total
plus the records still in the window, added in the order they were placed: the same additions in the
same order as one pass over every record, so an integer figure is the same integer and a sum of
floats the same float, bit for bit, whatever the window.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass


@dataclass(slots=True)
class OpStats:
    """One op (or kernel, copy, collective) on one slot and stream, over the records added."""

    count: int = 0
    duration_ps: int = 0
    """Sum of their modelled durations."""
    flops: float = 0.0
    bytes: float = 0.0
    estimated_by_default: int = 0
    """How many of them the cost model priced by bytes only (it did not know the op)."""
    first_start_ps: int = -1
    """Modelled start of the first of them (-1: none yet)."""
    last_end_ps: int = 0
    """Modelled end of the last of them."""


def involved_slots(r) -> tuple[int, ...]:
    """The slots a record kept busy: a collective's participants, else its slot and peer (not the host)."""
    if r.participants:
        return tuple(dict.fromkeys(r.participants))
    if r.peer is None or r.peer < 0 or r.peer == r.slot:
        return (r.slot,) if r.slot >= 0 else ()
    return (r.slot, r.peer) if r.slot >= 0 else (r.peer,)


class TimelineTotals:
    """Running sums over timeline records (:class:`interop.timelines.TimelineRecord`), added with
    :meth:`add` in placement order. Plain dicts only, so a copy is cheap and it pickles (ranks send
    theirs to rank 0 for a merged report)."""

    __slots__ = ("records", "makespan_ps", "busy_ps", "flops", "flops_by_dtype", "ops", "kernels",
                 "kernel_ps", "by_default", "own", "links", "link_groups", "per_op")

    def __init__(self):
        self.records = 0
        """Records added."""
        self.makespan_ps = 0
        """The latest modelled end among them."""
        self.busy_ps: dict[int, int] = {}
        """Per slot: modelled picoseconds of the records it took part in."""
        self.flops: dict[int, float] = {}
        self.flops_by_dtype: dict[int, dict[str, float]] = {}
        self.ops: dict[int, int] = {}
        """Per slot: eager ATen op records."""
        self.kernels: dict[int, int] = {}
        """Per slot: compiled-graph and Triton kernel records."""
        self.kernel_ps: dict[int, int] = {}
        self.by_default: dict[int, int] = {}
        """Per slot: op and kernel records the cost model priced by bytes only."""
        self.own: dict[int, int] = {}
        """Per slot: records of its own work (ops, kernels, copies from it): which rank ran the slot."""
        self.links: dict[str, list[float]] = {}
        """Per link: [bytes, busy seconds]."""
        self.link_groups: dict[tuple, list[float]] = {}
        """Per (link, the slots on it): [bytes, busy seconds]; every participant of a collective adds the
        same figures under the same key, which is how a merge counts it once."""
        self.per_op: dict[tuple[int, int, str, str], OpStats] = {}
        """Per (slot, stream, kind, op name): :class:`OpStats`."""

    def add(self, r) -> None:
        """Add one record."""
        self.records += 1
        end = r.start_ps + r.duration_ps
        if end > self.makespan_ps:
            self.makespan_ps = end
        busy = self.busy_ps
        for s in involved_slots(r):
            busy[s] = busy.get(s, 0) + r.duration_ps
        slot = r.slot
        if r.kind in ("op", "kernel"):
            self.flops[slot] = self.flops.get(slot, 0.0) + r.flops
            by_dtype = self.flops_by_dtype.setdefault(slot, {})
            by_dtype[r.dtype] = by_dtype.get(r.dtype, 0.0) + r.flops
            self.by_default[slot] = self.by_default.get(slot, 0) + int(r.estimated_by_default)
            if r.kind == "op":
                self.ops[slot] = self.ops.get(slot, 0) + 1
            else:
                self.kernels[slot] = self.kernels.get(slot, 0) + 1
                self.kernel_ps[slot] = self.kernel_ps.get(slot, 0) + r.duration_ps
        if r.kind != "collective" and slot >= 0:
            self.own[slot] = self.own.get(slot, 0) + 1
        if r.link:
            link = self.links.get(r.link)
            if link is None:
                link = self.links[r.link] = [0.0, 0.0]
            link[0] += r.bytes
            link[1] += r.duration
            group = (r.link, r.participants or (r.slot, r.peer))
            figures = self.link_groups.get(group)
            if figures is None:
                figures = self.link_groups[group] = [0.0, 0.0]
            figures[0] += r.bytes
            figures[1] += r.duration
        key = (slot, r.stream, r.kind, r.op)
        stats = self.per_op.get(key)
        if stats is None:
            stats = self.per_op[key] = OpStats(first_start_ps=r.start_ps)
        stats.count += 1
        stats.duration_ps += r.duration_ps
        stats.flops += r.flops
        stats.bytes += r.bytes
        stats.estimated_by_default += int(r.estimated_by_default)
        if end > stats.last_end_ps:
            stats.last_end_ps = end

    @classmethod
    def from_runtime(cls, d: dict) -> TimelineTotals:
        """The totals the runtime added up (``_C._TimelinePlacer.totals``, csrc/model/HybridTotals.h): the
        same additions in the same order as :meth:`add`."""
        out = cls()
        out.records, out.makespan_ps = d["records"], d["makespan_ps"]
        for name in ("busy_ps", "flops", "flops_by_dtype", "ops", "kernels", "kernel_ps", "by_default", "own"):
            setattr(out, name, d[name])
        out.links = {k: list(v) for k, v in d["links"].items()}
        out.link_groups = {k: list(v) for k, v in d["link_groups"].items()}
        out.per_op = {k: OpStats(*v) for k, v in d["per_op"].items()}
        return out

    def plus(self, records) -> TimelineTotals:
        """A copy of these totals with ``records`` added after them (self is unchanged)."""
        out = copy.deepcopy(self)
        for r in records:
            out.add(r)
        return out

    @classmethod
    def merged(cls, parts: list[tuple[TimelineTotals, set[int]]]) -> TimelineTotals:
        """Every rank's totals as one (``parts``: per rank, its totals and the slots it allocated on).

        Each rank placed its own slot's work and every collective its slot took part in, so a slot's
        figures come whole from the rank that ran it, and a collective's link figures from any one of
        its participants."""
        out = cls()
        slots: dict[int, TimelineTotals] = {}
        for s in {s for totals, ran in parts for s in (*ran, *totals.own, *totals.busy_ps)}:
            # The rank that ran the slot: the most of its own work on it, then its allocations, then its time.
            slots[s] = max(parts, key=lambda part: (part[0].own.get(s, 0), s in part[1],
                                                    part[0].busy_ps.get(s, 0)))[0]
        for s, totals in slots.items():
            for name in ("busy_ps", "flops", "ops", "kernels", "kernel_ps", "by_default", "own"):
                value = getattr(totals, name).get(s)
                if value is not None:
                    getattr(out, name)[s] = value
            if s in totals.flops_by_dtype:
                out.flops_by_dtype[s] = dict(totals.flops_by_dtype[s])
            for key, stats in totals.per_op.items():
                if key[0] == s:
                    out.per_op[key] = copy.copy(stats)
        for totals, _ in parts:
            out.records += totals.records
            out.makespan_ps = max(out.makespan_ps, totals.makespan_ps)
            for group, figures in totals.link_groups.items():
                if group not in out.link_groups:
                    out.link_groups[group] = list(figures)
                    link = out.links.setdefault(group[0], [0.0, 0.0])
                    link[0] += figures[0]
                    link[1] += figures[1]
        return out


__all__ = ["OpStats", "TimelineTotals", "involved_slots"]
