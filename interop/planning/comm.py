"""Collective times for the step model: ``collectives.estimate`` on the rack's topology, tabulated.

A step asks for the same few collectives (a stage's TP all-gather, its DP
reduce-scatter, a pipeline send) at many sizes while a search walks its
configurations. :class:`CommPricer` prices each (op, group) at sizes on a
geometric grid (``2 ** (k / GRID_STEPS)`` bytes, exact at the grid points) and
interpolates linearly in between, where alpha-beta costs are affine in the
size for a given algorithm. Groups are slot sequences: a ``range`` (strided
groups of a million-chip rack stay symbolic) or a tuple.

An all-gather or reduce-scatter is priced at no more than half the all-reduce
of the same size over the same group: an all-reduce is a reduce-scatter and an
all-gather, and ``collectives`` has a two-level (domain, then network)
all-reduce but no two-level all-gather or reduce-scatter yet, so a flat
algorithm across domains would otherwise push every byte through the network.
"""

from __future__ import annotations

import math
from typing import Sequence

import collectives

HALF_ALL_REDUCE = ("all_gather", "reduce_scatter")
"""Ops bounded by half the all-reduce of the same size (see the module doc)."""

GRID_STEPS = 8
"""Grid points per doubling of the size (12 % apart): interpolation error stays near 1 %."""


def _group_key(slots: Sequence[int]) -> tuple:
    if isinstance(slots, range):
        return ("r", slots.start, slots.stop, slots.step)
    return ("t",) + tuple(slots)


class CommPricer:
    """Modelled seconds of collectives on one rack (see the module doc). Not thread-safe."""

    def __init__(self, rack) -> None:
        self.topology = collectives.topology(rack)
        self._points: dict[tuple, float] = {}
        self.algorithms: dict[tuple, str] = {}
        """(op, group key) -> the algorithm chosen at the last priced point (for reports)."""

    def _exact(self, op: str, nbytes: int, slots: Sequence[int], key: tuple) -> float:
        point = (op, key, nbytes)
        hit = self._points.get(point)
        if hit is None:
            est = collectives.estimate(self.topology, op, nbytes, slots=slots)
            hit = self._points[point] = est.seconds
            self.algorithms[(op, key)] = est.algorithm + (f"/{est.detail}" if est.detail else "")
        return hit

    def seconds(self, op: str, nbytes: float, slots: Sequence[int]) -> float:
        """Modelled seconds of ``op`` of S = ``nbytes`` over ``slots`` (0 for one participant or no bytes)."""
        if len(slots) < 2 or nbytes <= 0:
            return 0.0
        if op in HALF_ALL_REDUCE:
            return min(self._table(op, nbytes, slots), 0.5 * self._table("all_reduce", nbytes, slots))
        return self._table(op, nbytes, slots)

    def _table(self, op: str, nbytes: float, slots: Sequence[int]) -> float:
        key = _group_key(slots)
        k = math.log2(nbytes) * GRID_STEPS
        lo_k, hi_k = math.floor(k), math.ceil(k)
        lo = max(1, round(2 ** (lo_k / GRID_STEPS)))
        hi = max(1, round(2 ** (hi_k / GRID_STEPS)))
        t_lo = self._exact(op, lo, slots, key)
        if hi == lo:
            return t_lo
        t_hi = self._exact(op, hi, slots, key)
        return t_lo + (t_hi - t_lo) * (nbytes - lo) / (hi - lo)

    def send(self, nbytes: float, src: int, dst: int) -> float:
        """Seconds to move ``nbytes`` from slot ``src`` to slot ``dst`` (0 on the same slot)."""
        if src == dst:
            return 0.0
        return self.seconds("send_recv", nbytes, (src, dst))


__all__ = ["GRID_STEPS", "HALF_ALL_REDUCE", "CommPricer"]
