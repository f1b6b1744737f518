"""Collective times for the step model: ``collectives.estimate`` on the rack's topology, tabulated.

A step asks for the same few collectives (a stage's TP all-gather, its DP
reduce-scatter, a pipeline send) at many sizes while a search walks its
configurations. :class:`CommPricer` prices each (op, group) at sizes on a
geometric grid (``2 ** (k / GRID_STEPS)`` bytes, exact at the grid points) and
interpolates linearly in between, where alpha-beta costs are affine in the
size for a given algorithm. Groups are slot sequences: a ``range`` (strided
groups of a million-chip rack stay symbolic) or a tuple.

Groups that sit alike on the rack cost the same, so each table is keyed by
the group's shape (:meth:`CommPricer.group_key`), priced once by the first
group of that shape: a what-if's strided groups and a live plan's search over
thousands of stage groups (which differ only by the slots they hold) price
each shape once.

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

GRID_STEPS = 1
"""Grid points per doubling of the size; within one algorithm a collective's time is affine in its size,
so interpolation errs only near an algorithm switch (under 5 %; tests bound it)."""

_PRICERS: dict[object, "CommPricer"] = {}


def pricer_for(spec) -> "CommPricer":
    """The shared :class:`CommPricer` of a rack spec (tables survive between what-ifs on equal racks: a spec
    string parsed twice is one rack)."""
    hit = _PRICERS.get(spec)
    if hit is None:
        if len(_PRICERS) > 32:
            _PRICERS.clear()
        hit = _PRICERS[spec] = CommPricer(spec)
    return hit


def _members(slots: Sequence[int]) -> Sequence[int]:
    return slots if isinstance(slots, range) else tuple(slots)


class CommPricer:
    """Modelled seconds of collectives on one rack (see the module doc). Not thread-safe."""

    def __init__(self, rack) -> None:
        import devices

        self.spec = devices.parse_rack(rack)
        self.topology = collectives.topology(self.spec)
        self._points: dict[tuple, float] = {}
        self._keys: dict[tuple, tuple] = {}
        self._calls: dict[tuple, float] = {}
        self.algorithms: dict[tuple, str] = {}
        """(op, group key) -> the algorithm chosen at the last priced point (for reports)."""

    def group_key(self, slots: Sequence[int]) -> tuple:
        """What a collective's cost depends on: how the group's members, in rank order, fall on the rack.

        Every domain of one model has the same links, every member of a switch domain the same port, and
        the network joins any two domains alike; so two groups cost the same when, rank by rank, their
        members sit in the same order of domains (the first domain met, the second...), of the same model,
        on slots of the same kind, at the same position where the domain is a torus. A tuple is keyed so,
        member by member; a ``range`` (a strided group of a million-chip rack) by its size, stride and
        placement (:meth:`collectives.topology.Topology.placement`, counted without walking its members).
        """
        raw = ("r", slots.start, slots.stop, slots.step) if isinstance(slots, range) else ("t",) + tuple(slots)
        key = self._keys.get(raw)
        if key is None:
            key = self._keys[raw] = self._range_key(slots) if isinstance(slots, range) else self._tuple_key(slots)
        return key

    def _range_key(self, slots: range) -> tuple:
        topo = self.topology
        placement = topo.placement(slots)
        first = topo.domain_of(slots[0])[1]
        last = topo.domain_of(slots[-1])[1]
        return ("r", len(slots), slots.step, placement.groups, placement.group_size,
                tuple(d.name for d in placement.domains), first.name, last.name, placement.switch is not None,
                placement.torus)

    def _tuple_key(self, slots: Sequence[int]) -> tuple:
        topo, spec = self.topology, self.spec
        ordinal: dict[int, int] = {}
        members = []
        for s in slots:
            first, dom = topo.domain_of(s)
            members.append((ordinal.setdefault(first, len(ordinal)), dom.name, spec.group_of(s).kind,
                            s - first if dom.is_torus else -1))
        return ("t", tuple(members))

    def _exact(self, op: str, nbytes: int, slots: Sequence[int], key: tuple) -> float:
        # The first group of a shape prices the shape (see group_key).
        point = (op, key, nbytes)
        hit = self._points.get(point)
        if hit is None:
            est = collectives.estimate(self.topology, op, nbytes, slots=_members(slots))
            hit = self._points[point] = est.seconds
            self.algorithms[(op, key)] = est.algorithm + (f"/{est.detail}" if est.detail else "")
        return hit

    def seconds(self, op: str, nbytes: float, slots: Sequence[int]) -> float:
        """Modelled seconds of ``op`` of S = ``nbytes`` over ``slots`` (0 for one participant or no bytes)."""
        if len(slots) < 2 or nbytes <= 0:
            return 0.0
        call = (op, nbytes, slots if isinstance(slots, (range, tuple)) else tuple(slots))
        hit = self._calls.get(call)
        if hit is None:
            if op in HALF_ALL_REDUCE:
                hit = min(self._table(op, nbytes, slots), 0.5 * self._table("all_reduce", nbytes, slots))
            else:
                hit = self._table(op, nbytes, slots)
            if len(self._calls) > 1 << 16:
                self._calls.clear()
            self._calls[call] = hit
        return hit

    def _table(self, op: str, nbytes: float, slots: Sequence[int]) -> float:
        key = self.group_key(slots)
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

    def to_host(self, nbytes: float, slot: int) -> float:
        """Seconds to read ``nbytes`` from ``slot`` to the host over its host link (``collectives.transfer``, as a
        slot's timeline prices the copy)."""
        call = ("to_host", nbytes, slot)
        hit = self._calls.get(call)
        if hit is None:
            hit = self._calls[call] = collectives.transfer(self.spec, slot, collectives.HOST, int(nbytes)).seconds
        return hit


STEPS = {"all_reduce": lambda n: 2 * (n - 1), "send_recv": lambda n: 1}
"""Steps of a collective over n members as a ring runs it (any other op: n - 1), for a stack's per-step latency."""


class ScaledPricer:
    """A :class:`CommPricer` with a stack's own collective costs per chip kind: ``factors[kind] = (times, latency)``
    multiplies the modelled time and adds ``latency`` seconds per ring step (:data:`STEPS`) over the group's chips
    (:attr:`planner.fitted_efficiency.StepEfficiency.collectives` and ``collective_latency``). A group takes the
    larger of its first and last slots' costs."""

    def __init__(self, pricer: CommPricer, rack, factors: dict[str, tuple[float, float]]) -> None:
        self.pricer = pricer
        self.rack = rack
        self.factors = factors
        self.topology = pricer.topology
        self.algorithms = pricer.algorithms

    def group_key(self, slots: Sequence[int]) -> tuple:
        return self.pricer.group_key(slots)

    def seconds(self, op: str, nbytes: float, slots: Sequence[int]) -> float:
        """As :meth:`CommPricer.seconds`, with the group's kinds' factor and per-step latency."""
        seconds = self.pricer.seconds(op, nbytes, slots)
        if not seconds:
            return seconds
        steps = STEPS.get(op, lambda n: n - 1)(len(slots))
        return max(times * seconds + steps * latency
                   for times, latency in (self.factors.get(self.rack.slot(slots[0]).kind, (1.0, 0.0)),
                                          self.factors.get(self.rack.slot(slots[-1]).kind, (1.0, 0.0))))

    def send(self, nbytes: float, src: int, dst: int) -> float:
        """As :meth:`CommPricer.send`, with the two slots' kinds' costs."""
        if src == dst:
            return 0.0
        return self.seconds("send_recv", nbytes, (src, dst))

    def to_host(self, nbytes: float, slot: int) -> float:
        """As :meth:`CommPricer.to_host` (a copy, not a collective: no stack factor)."""
        return self.pricer.to_host(nbytes, slot)


def scaled_pricer(pricer: CommPricer, rack, factors: dict[str, tuple[float, float]]) -> CommPricer | ScaledPricer:
    """``pricer`` itself when no kind has its own collective costs, else a :class:`ScaledPricer` over it."""
    factors = {k: v for k, v in factors.items() if v != (1.0, 0.0)}
    return ScaledPricer(pricer, rack, factors) if factors else pricer


__all__ = ["GRID_STEPS", "HALF_ALL_REDUCE", "STEPS", "CommPricer", "ScaledPricer", "pricer_for", "scaled_pricer"]
