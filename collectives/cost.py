"""What a schedule costs on a topology: by its step list, or in closed form on alpha-beta levels.

Step list (:func:`schedule_time`).  Rounds run one after another; transfers in
a round run concurrently.  A link carries the bytes of every transfer of the
round that crosses it and serves them in proportion to their size (so they all
drain together); a transfer takes

    hops x hop latency  +  busiest link's bytes / its bandwidth  +  exposed reduce time

and a round takes as long as its slowest transfer.  The reduce time is the
bytes the destination reduces in that round times its seconds per byte; on a
real rack the reduce overlaps the arriving data (NCCL fuses the two), so only
the part slower than the transfer shows; on an ideal topology it is added, as
in the alpha-beta formulas.  In-switch transfers (``via_switch``) move their
bytes at the switch's reduction efficiency and reduce nothing on the chips.
A per-collective base latency (the protocol's) comes on top once.

Closed form (:class:`Levels`).  The same rounds priced on uniform alpha-beta
levels, so a million-participant estimate needs no step list; the algorithms
implement it and tests check it against the step list on ideal topologies.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from collectives.tuning import Protocol
from collectives.topology import Placement, Topology


@dataclass(frozen=True, slots=True)
class AlphaBeta:
    """One uniform level: a seconds per message, b seconds per byte, g reduce seconds per byte."""

    a: float
    b: float
    g: float = 0.0
    overlap: bool = False
    """True: the reduce overlaps the transfer and only its excess shows (real racks)."""

    def round(self, load: float, reduce: float = 0.0) -> float:
        """One round whose busiest link carries ``load`` bytes and whose busiest reducer reduces ``reduce``.

        A round that moves nothing does not happen (schedules drop empty transfers): 0.
        """
        if load <= 0 and reduce <= 0:
            return 0.0
        t = load * self.b
        r = reduce * self.g
        if self.overlap:
            r = max(0.0, r - t)
        return self.a + t + r

    def message(self) -> float:
        """One round of zero-byte messages (a barrier's): the latency alone."""
        return self.a


@dataclass(frozen=True, slots=True)
class Levels:
    """The alpha-beta levels a closed form may use."""

    flat: AlphaBeta
    """Between any two participants (the slowest level they span)."""
    inner: AlphaBeta | None = None
    """Inside a domain (hierarchical)."""
    outer: AlphaBeta | None = None
    """Across domains (hierarchical)."""
    local: int = 0
    """Participants per domain (hierarchical; equal in every domain)."""
    groups: int = 0
    """Number of domains (hierarchical)."""
    switch: AlphaBeta | None = None
    """In-switch reduction and multicast (b already divided by the switch efficiency)."""
    neighbour: AlphaBeta | None = None
    """One hop to a neighbour over one link (torus schedules)."""

    @classmethod
    def uniform(cls, a: float, b: float, g: float = 0.0) -> Levels:
        """Every level the same (an ideal single switch, or an ideal torus with per-link b and per-hop a)."""
        ab = AlphaBeta(a, b, g)
        return cls(ab, ab, ab, switch=AlphaBeta(a, b, 0.0), neighbour=ab)


def levels(topo: Topology, placement: Placement, protocol: Protocol) -> Levels:
    """The levels of ``placement`` on ``topo`` under ``protocol``.

    A domain's a is its hop latency times its diameter (one hop through a
    switch); its b the inverse of one link's bandwidth.  A set of participants
    spread over several domains is bounded by the network between them.
    """
    pf = protocol.bandwidth.value
    doms = placement.domains
    g = max(d.reduce_g for d in doms)
    ov = topo.overlap_reduce
    inner = AlphaBeta(max(d.hop_latency.value * d.diameter * protocol.hop_scale[d.hw] for d in doms),
                      max(1.0 / (d.link_bandwidth * pf) for d in doms), g, ov)
    outer = None
    if topo.network is not None and (placement.groups > 1):
        net = topo.network
        outer = AlphaBeta(net.hop_latency.value * protocol.hop_scale["net"], 1.0 / (net.bandwidth * pf), g, ov)
    flat = inner if placement.groups == 1 or outer is None else outer
    switch = None
    if placement.switch is not None:
        switch = AlphaBeta(inner.a, inner.b / placement.switch.switch_efficiency.value, 0.0, ov)
    neighbour = AlphaBeta(max(d.hop_latency.value * protocol.hop_scale[d.hw] for d in doms), inner.b, g, ov)
    return Levels(flat, inner, outer, placement.group_size or 0, placement.groups, switch, neighbour)


def base_latency(protocol: Protocol, latency_class: str) -> float | None:
    """Seconds added once per collective, or None when the protocol cannot carry this class."""
    fig = protocol.base.get(latency_class)
    return None if fig is None else fig.value


def compile_rounds(schedule, topo: Topology, slots: Sequence[int]) -> list[tuple[tuple[float, str, float, float], ...]]:
    """The schedule's rounds reduced to what pricing needs, once for every protocol.

    Per round, the distinct (LL latency, hop class, seconds its busiest link
    needs at full bandwidth, seconds its destination spends reducing) of its
    transfers.  A protocol only rescales latency and bandwidth, so
    :func:`price` turns this into seconds for any protocol cheaply.
    """
    itemsize = schedule.spec.itemsize
    routes: dict[tuple[int, int], object] = {}
    bw_cache: dict[tuple, float] = {}
    g_cache: dict[int, float] = {}
    switch = None
    out = []
    for rnd in schedule.rounds:
        loads: dict[tuple, float] = {}
        reduced: dict[int, float] = {}
        items = []
        for t in rnd:
            nbytes = t.count * itemsize
            if t.via_switch:
                if switch is None:
                    switch = topo.switch_domain([slots[i] for i in range(len(slots))])
                    if switch is None:
                        raise ValueError(f"{schedule.algorithm}: in-switch transfers need every participant in one "
                                         f"domain with in-switch reduction")
                eb = nbytes / switch.switch_efficiency.value
                links = [("tx", slots[s]) for s in t.srcs] + [("rx", slots[d]) for d in t.dsts]
                for link in links:
                    loads[link] = loads.get(link, 0.0) + eb
                items.append((links, switch.hop_latency.value, switch.hw, None))
                continue
            if len(t.srcs) != 1 or len(t.dsts) != 1:
                raise ValueError(f"{schedule.algorithm}: a transfer with several ends must go through the switch")
            a, b = slots[t.srcs[0]], slots[t.dsts[0]]
            route = routes.get((a, b))
            if route is None:
                route = routes[(a, b)] = topo.route(a, b)
            for link in route.links:
                loads[link] = loads.get(link, 0.0) + nbytes
            dst = t.dsts[0] if t.reduce else None
            if dst is not None:
                reduced[dst] = reduced.get(dst, 0.0) + nbytes
            items.append((route.links, route.latency, route.hw, dst))
        distinct = set()
        for links, latency, hw, dst in items:
            busy = 0.0
            for link in links:
                bw = bw_cache.get(link)
                if bw is None:
                    bw = bw_cache[link] = topo.bandwidth(link)
                busy = max(busy, loads[link] / bw)
            red = 0.0
            if dst is not None:
                g = g_cache.get(dst)
                if g is None:
                    g = g_cache[dst] = topo.reduce_g(slots[dst])
                red = reduced[dst] * g
            distinct.add((latency, hw, busy, red))
        out.append(tuple(distinct))
    return out


def price(compiled, protocol: Protocol, overlap: bool) -> float:
    """Seconds of compiled rounds (:func:`compile_rounds`) under ``protocol``, base latency excluded."""
    pf = protocol.bandwidth.value
    scale = protocol.hop_scale
    total = 0.0
    for items in compiled:
        worst = 0.0
        for latency, hw, busy, red in items:
            busy = busy / pf
            if overlap:
                red = max(0.0, red - busy)
            worst = max(worst, latency * scale[hw] + busy + red)
        total += worst
    return total


def schedule_time(schedule, topo: Topology, slots: Sequence[int], protocol: Protocol) -> float:
    """Seconds the schedule's rounds take on ``topo`` (participant i on slot ``slots[i]``), base latency excluded."""
    return price(compile_rounds(schedule, topo, slots), protocol, topo.overlap_reduce)
