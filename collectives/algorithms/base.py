"""The one small interface every algorithm implements, and the registry that finds them by file name.

An algorithm turns a :class:`~collectives.schedule.CollectiveSpec` into a
:class:`~collectives.schedule.Schedule` (:meth:`Algorithm.build`) and prices
the same schedule in closed form on uniform alpha-beta levels
(:meth:`Algorithm.closed_form`), so a million-participant estimate needs no
step list.  Tests check the two agree on ideal topologies.

The base class handles what is common: op support, one participant (a local
copy), zero counts (nothing to do), and validation errors that list the
accepted values.  Subclasses fill ``_build`` and ``_closed``, and where they
need them the planner's hooks (:meth:`Algorithm.variants`,
:meth:`Algorithm.bind`, :meth:`Algorithm.label`, :meth:`Algorithm.detail`): the
planner never asks which algorithm it prices, so adding one stays adding a file.
"""

from __future__ import annotations

import math
from typing import ClassVar

from collectives.cost import AlphaBeta, Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, local_copy, make
from collectives.topology import Placement, Topology


class Algorithm:
    """Base of every algorithm; subclasses set the class attributes and fill the hooks."""

    name: ClassVar[str] = ""
    """Registry name (the module's file name)."""
    ops: ClassVar[frozenset[str]] = frozenset()
    """Collectives it implements."""
    pipelined: ClassVar[frozenset[str]] = frozenset()
    """Ops whose schedule cuts the data into ``spec.pipeline`` chunks."""
    latency_class: ClassVar[str] = "ring"
    """Base-latency row (``collectives.tuning.LATENCY_CLASSES``)."""

    def unsupported(self, spec: CollectiveSpec, placement: Placement | None = None) -> str | None:
        """Why this algorithm cannot run ``spec`` on ``placement`` (None: it can)."""
        if spec.op not in self.ops:
            return f"{self.name} does not implement {spec.op} (it implements {', '.join(sorted(self.ops))})"
        return None

    # -- the planner's hooks ------------------------------------------------------------------

    def variants(self, op: str) -> list[dict]:
        """Spec fields to price as separate candidates (each a dict for ``dataclasses.replace``).

        The planner prices every variant and keeps the fastest; the default is
        one candidate, the spec as asked.
        """
        return [{}]

    def bind(self, spec: CollectiveSpec, topo: Topology, slots, placement: Placement, *, schedule: bool) -> CollectiveSpec:
        """``spec`` completed with what this algorithm needs to know about where the participants sit.

        ``slots``: participant i's slot; ``placement``: ``topo.placement(slots)``;
        ``schedule``: True when a step schedule will be built from the result
        (False: only the closed form is priced, which must stay cheap for a
        million participants).  The default needs nothing.
        """
        return spec

    def label(self, spec: CollectiveSpec) -> str:
        """The candidate's name among an estimate's alternatives."""
        return self.name

    def detail(self, spec: CollectiveSpec) -> str:
        """Extra words about the candidate for ``CollectiveEstimate.detail`` ("" when none)."""
        return ""

    # -- schedules ------------------------------------------------------------------------------

    def build(self, spec: CollectiveSpec) -> Schedule:
        """The schedule of ``spec``; ValueError when :meth:`unsupported` says why not."""
        reason = self.unsupported(spec)
        if reason:
            raise ValueError(reason)
        if spec.participants == 1:
            return local_copy(spec, self.name)
        if self.is_empty(spec):
            return make(spec, self.name, Rounds(), latency_class=self.latency_class)
        return self._build(spec)

    def closed_form(self, spec: CollectiveSpec, levels: Levels) -> float:
        """Seconds the schedule's rounds take on uniform levels (base latency excluded)."""
        if spec.participants == 1 or self.is_empty(spec):
            return 0.0
        return self._closed(spec, levels)

    def transfers(self, spec: CollectiveSpec) -> int:
        """About how many transfers :meth:`build` makes (decides step list vs closed form)."""
        p = spec.participants
        return p * p * max(1, spec.pipeline)

    @staticmethod
    def is_empty(spec: CollectiveSpec) -> bool:
        """True when there is nothing to move (a barrier always moves its messages)."""
        if spec.op == "barrier":
            return False
        if spec.op == "all_to_all" and spec.splits is not None:
            return not any(any(row) for row in spec.splits)
        return spec.count == 0

    def best_pipeline(self, spec: CollectiveSpec, levels: Levels, limit: int = 128) -> int:
        """The pipeline depth (chunks) with the lowest closed-form time, powers of two up to ``limit``."""
        if spec.op not in self.pipelined or spec.count <= 1:
            return 1
        best, best_k, k = math.inf, 1, 1
        top = min(limit, spec.count)
        while k <= top:
            t = self.closed_form(spec.derive(pipeline=k), levels)
            if t < best:
                best, best_k = t, k
            k *= 2
        return best_k

    def _build(self, spec: CollectiveSpec) -> Schedule:
        raise NotImplementedError

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        raise NotImplementedError


def ceil_div(a: int, b: int) -> int:
    """Ceiling of a / b for non-negative integers."""
    return -(-a // b)


def pipeline_profile(count: int, chunks: int, depth: int) -> list[tuple[int, int]]:
    """(rounds, largest chunk in elements) of a pipeline pushing ``count`` in ``chunks`` through ``depth`` hops.

    Chunk x crosses hop h in round x + h; :func:`collectives.schedule.split`
    makes the first ``count % chunks`` chunks one larger, so the early rounds
    carry a larger chunk than the late ones.
    """
    q, r = divmod(count, chunks)
    active = min(chunks, count)
    rounds = active + depth - 1
    big = min(rounds, r + depth - 1) if r else 0
    return [(big, q + 1), (rounds - big, q)]


__all__ = ["Algorithm", "AlphaBeta", "Levels", "ceil_div", "pipeline_profile"]
