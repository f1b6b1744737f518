"""Two-level all_reduce: inside each domain, then across domains, then inside again.

With L ranks per domain and G domains: a ring reduce_scatter inside every
domain leaves local rank j with chunk j+1 (of L) summed over its domain; the
G ranks holding the same chunk all_reduce it across domains with the ``outer``
algorithm (ring, rabenseifner, tree, direct) on n/L bytes; a ring all_gather
inside every domain spreads the result:

    2 (L-1)(a_in + n/L b_in) + (L-1) n/L g  +  outer all_reduce(G, n/L)

This is how NCCL and the large-scale stacks cross a slow network: only 1/L of
the data leaves each domain, over every rank's own network port at once.
``spec.groups`` lists each domain's ranks (equal sizes).
"""

from __future__ import annotations

from dataclasses import replace

from collectives import algorithms
from collectives.algorithms.base import Algorithm, ceil_div
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, embed, make, split
from collectives.topology import Placement, Topology

OUTER = ("ring", "rabenseifner", "tree", "direct")
"""Algorithms accepted across domains."""


class Hierarchical(Algorithm):
    """Two-level all_reduce (see the module docstring)."""

    name = "hierarchical"
    ops = frozenset({"all_reduce"})
    pipelined = frozenset({"all_reduce"})
    latency_class = "ring"

    def unsupported(self, spec: CollectiveSpec, placement: Placement | None = None) -> str | None:
        reason = super().unsupported(spec, placement)
        if reason:
            return reason
        if spec.outer not in OUTER:
            return f"hierarchical: outer algorithm {spec.outer!r} not accepted; accepted: {', '.join(OUTER)}"
        if placement is not None:
            if placement.groups < 2:
                return "hierarchical needs participants in at least two domains"
            if placement.group_size is None:
                return "hierarchical needs the same number of participants in every domain"
        if spec.groups is not None:
            flat = sorted(r for g in spec.groups for r in g)
            if flat != list(range(spec.participants)) or len({len(g) for g in spec.groups}) != 1:
                return "hierarchical: groups must list every rank once, in groups of equal size"
        elif placement is None and spec.participants > 1:
            return "hierarchical needs spec.groups (the ranks of each domain)"
        return None

    def variants(self, op: str) -> list[dict]:
        """One candidate per outer algorithm that implements ``op``."""
        return [{"outer": outer} for outer in OUTER if op in algorithms.get(outer).ops]

    def bind(self, spec: CollectiveSpec, topo: Topology, slots, placement: Placement, *, schedule: bool) -> CollectiveSpec:
        """A schedule needs each domain's ranks (``spec.groups``); the closed form only the placement's sizes."""
        if not schedule or spec.groups is not None or spec.participants < 2:
            return spec
        groups = placement.ranks if placement.ranks is not None else topo.group_ranks(slots)
        return replace(spec, groups=groups)

    def best_pipeline(self, spec: CollectiveSpec, levels: Levels, limit: int = 128) -> int:
        """Only the outer algorithm's pipeline depth changes anything (the inner rings are not pipelined)."""
        if spec.op not in algorithms.get(spec.outer).pipelined:
            return 1
        return super().best_pipeline(spec, levels, limit)

    def label(self, spec: CollectiveSpec) -> str:
        return f"{self.name}({spec.outer})"

    def detail(self, spec: CollectiveSpec) -> str:
        return f"{spec.outer} across domains"

    def _build(self, spec: CollectiveSpec) -> Schedule:
        groups = spec.groups
        size, c = len(groups[0]), spec.count
        chunks = split(c, size)
        rd = Rounds()
        for s in range(size - 1):  # reduce_scatter inside each domain (ring)
            for g in groups:
                for i in range(size):
                    off, n = chunks[(i - s) % size]
                    rd.send(s, g[i], g[(i + 1) % size], "in" if s == 0 else "out", off, "out", off, n,
                            reduce=True, acc_buf="in", acc_off=off)
        start = size - 1
        outer = algorithms.get(spec.outer)
        built: dict[int, Schedule] = {}
        longest = 0
        for j in range(size):  # all_reduce across domains, in place on the chunk local rank j holds
            off, n = chunks[(j + 1) % size]
            if n == 0:
                continue
            if n not in built:
                built[n] = outer.build(replace(spec, participants=len(groups), count=n, groups=None))
            sub = built[n]
            ranks = [g[j] for g in groups]
            # The domain's partial sum is already in "out" (one rank per domain: the input still is "in").
            source = ("out", off) if size > 1 else ("in", off)
            rd.extend(embed(sub.rounds, ranks, {"in": source, "out": ("out", off), "tmp": ("tmp", 0)}), start)
            longest = max(longest, len(sub.rounds))
        start += longest
        for s in range(size - 1):  # all_gather inside each domain (ring)
            for g in groups:
                for i in range(size):
                    off, n = chunks[(i + 1 - s) % size]
                    rd.send(start + s, g[i], g[(i + 1) % size], "out", off, "out", off, n)
        tmp = max((max(b.buffers.get("tmp", (0,))) for b in built.values()), default=0)
        return make(spec, self.name, rd, {"tmp": [tmp] * spec.participants}, self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        inner, outer = levels.inner, levels.outer
        size, groups = levels.local, levels.groups
        if spec.groups is not None:
            size, groups = len(spec.groups[0]), len(spec.groups)
        if inner is None or outer is None or not size or groups < 2:
            raise ValueError("hierarchical: the levels need an inner and an outer level and equal domains")
        chunk = ceil_div(spec.count, size)
        w = spec.itemsize
        sub = spec.derive(participants=groups, count=chunk, groups=None)
        across = algorithms.get(spec.outer).closed_form(sub, Levels(outer))
        return (size - 1) * (inner.round(chunk * w, chunk * w) + inner.round(chunk * w)) + across

    def transfers(self, spec: CollectiveSpec) -> int:
        p = spec.participants
        return 2 * p * p + p * max(1, spec.pipeline) * 4


ALGORITHM = Hierarchical()
