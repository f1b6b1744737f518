"""The fabric of a rack: domains, links, routes, per-direction bandwidths and hop latencies.

Built from a :class:`devices.RackSpec` without an object per slot or per
domain: a :class:`DomainModel` stands for a run of identical consecutive
domains and serves every replica of the rack, links are small tuples made on
demand, and a route is computed from two slot numbers.  A million-chip rack is
a handful of objects whether it is written as replicas
(``"trn3-ultraserver*7282"``) or flat (``"trn3:1048608"``, 7,282 identical
switch domains: one model).

Links (one direction each; ``bandwidth(link)`` gives bytes/s):

* ``("tx", s)`` / ``("rx", s)``: slot s's port into / out of its domain's switch
  (NVLink, NVLink Fusion, NeuronSwitch, PCIe).  Every member reaches every
  other through the switch: route ``tx(a), rx(b)``, one hop.  Trainium4 and
  NVIDIA GPUs sit in one NVLink Fusion domain like any other members.
* ``("t", s, dim, dir)``: slot s's torus link along ``dim`` towards ``dir`` (+1/-1);
  dimension-ordered shortest-path routing, one hop per link.
* ``("ntx", s)`` / ``("nrx", s)``: slot s's share of the scale-out network (EFA,
  InfiniBand), a full-bisection network: route ``ntx(a), nrx(b)``, one hop.
* ``("h2d", s)`` / ``("d2h", s)``: slot s's own PCIe link to the host, into and
  out of the slot.  The host is the endpoint :data:`HOST`: ``route(HOST, s)`` is
  ``h2d(s)``, one hop, so a host copy is priced on the topology like any other
  transfer (:mod:`collectives.transfer`).

Concurrent transfers crossing one link share its bandwidth (``collectives.cost``).
Bandwidths already include the fabric efficiency of ``collectives.tuning``;
hop latencies are the LL-protocol figures devices gives, which the protocols scale.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from math import gcd
from typing import Sequence

from collectives import tuning
from devices.figure import Figure
from devices.sources import THAKUR_2005


@dataclass(frozen=True, slots=True)
class DomainModel:
    """One switch or torus domain of a rack (the same object serves every replica)."""

    name: str
    """The rack spec's domain name (of the run's first domain when :attr:`repeat` > 1)."""
    fabric: str
    """``nvlink-fusion``, ``nvlink``, ``neuronlink-torus``, ``neuronswitch``, ``pcie`` or ``ideal``."""
    first: int
    """First slot within a replica (of the run's first domain)."""
    count: int
    """Slots in the domain (in each domain of the run)."""
    shape: tuple[int, ...] | None
    """Torus dimensions (None: a switch)."""
    bandwidth: float
    """Bytes/s per direction per slot into the fabric, efficiency applied."""
    raw_bandwidth: Figure
    """The devices figure the bandwidth comes from."""
    efficiency: Figure
    """Fraction of the raw bandwidth a collective gets (slowest member)."""
    hop_latency: Figure
    """Seconds per hop, LL protocol (devices' figure)."""
    hw: str
    """Hop-latency class (``nvlink`` or ``pci``)."""
    in_switch: bool
    """The switch reduces in the network (NVLS-like)."""
    switch_efficiency: Figure | None
    """Efficiency of in-switch reduction and multicast (None without it)."""
    reduce_g: float
    """Seconds per byte a member takes to reduce (slowest member)."""
    reduce_source: str
    """Where :attr:`reduce_g` comes from."""
    repeat: int = 1
    """Identical domains side by side: domain k of the run holds slots ``first + k * count ..`` (a flat
    million-chip spec is thousands of equal switch domains, one model)."""
    numbering: tuple[str, int] | None = None
    """(prefix, number of the first) when the run's domain names are ``prefix0, prefix1, ...``."""

    @property
    def stop(self) -> int:
        """One past the run's last slot within a replica."""
        return self.first + self.count * self.repeat

    def instance_name(self, k: int) -> str:
        """The name of domain ``k`` of the run."""
        if self.numbering is None:
            return self.name
        prefix, start = self.numbering
        return f"{prefix}{start + k}"

    @property
    def label(self) -> str:
        """The run's name for listings: ``switch0`` or ``switch0..switch7281``."""
        return self.name if self.repeat == 1 else f"{self.name}..{self.instance_name(self.repeat - 1)}"

    @property
    def is_torus(self) -> bool:
        """True for a torus (routes hop from neighbour to neighbour)."""
        return self.shape is not None

    @property
    def links_per_slot(self) -> int:
        """Torus links leaving each slot (a dimension of size 2 has one, larger ones two)."""
        if self.shape is None:
            return 1
        return sum(2 if d > 2 else 1 if d == 2 else 0 for d in self.shape) or 1

    @property
    def link_bandwidth(self) -> float:
        """Bytes/s of one link: the slot's bandwidth split over its torus links (a switch port: all of it)."""
        return self.bandwidth / self.links_per_slot

    @property
    def diameter(self) -> int:
        """Most hops between two members."""
        if self.shape is None:
            return 1
        return max(1, sum(d // 2 for d in self.shape))

    def torus_links(self, a: int, b: int, base: int) -> list[tuple]:
        """Links from local member ``a`` to ``b`` (dimension order, shortest way round, ties go +1)."""
        assert self.shape is not None
        coords_a, coords_b = _coords(a, self.shape), _coords(b, self.shape)
        links, cur = [], list(coords_a)
        for dim, size in enumerate(self.shape):
            delta = (coords_b[dim] - cur[dim]) % size
            if delta == 0:
                continue
            step, hops = (1, delta) if delta <= size - delta else (-1, size - delta)
            if size == 2:
                step = 1
            for _ in range(hops):
                links.append(("t", base + _index(cur, self.shape), dim, step))
                cur[dim] = (cur[dim] + step) % size
        return links


def _coords(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        index, r = divmod(index, size)
        out.append(r)
    return tuple(reversed(out))


def _index(coords: Sequence[int], shape: tuple[int, ...]) -> int:
    index = 0
    for c, size in zip(coords, shape):
        index = index * size + c
    return index


@dataclass(frozen=True, slots=True)
class NetworkModel:
    """The scale-out network joining domains and replicas."""

    fabric: str
    """``efa`` or ``infiniband``."""
    bandwidth: float
    """Bytes/s per direction per slot, efficiency applied."""
    raw_bandwidth: Figure
    """The devices figure."""
    efficiency: Figure
    """Fraction of the nominal rate delivered."""
    hop_latency: Figure
    """Seconds per hop, LL protocol."""


@dataclass(frozen=True, slots=True)
class HostLinkModel:
    """Each slot's own link to the host (PCIe): what a copy to or from CPU memory crosses."""

    fabric: str
    """``pcie``."""
    bandwidth: float
    """Bytes/s per direction per slot, efficiency applied."""
    raw_bandwidth: Figure
    """The devices figure (the ``pcie`` fabric's bandwidth)."""
    efficiency: Figure
    """Fraction of the signalled rate delivered (NCCL's PCIe figure, as for PCIe domains)."""
    hop_latency: Figure
    """Seconds per hop, LL protocol (the ``pcie`` fabric's latency)."""


HOST = -1
"""The host (CPU memory) as a transfer endpoint: every slot reaches it over its own PCIe link."""

RANGE_WALK_LIMIT = 256
"""A ``range`` of participants longer than this is laid out by counting (:meth:`Topology.placement`), not member by
member; its :attr:`Placement.ranks` is then None (computed by :meth:`Topology.group_ranks` when a schedule needs it)."""


@dataclass(frozen=True, slots=True)
class Route:
    """The links a transfer crosses, and its latency at LL (scaled per protocol by ``hw``)."""

    links: tuple[tuple, ...]
    hops: int
    latency: float
    hw: str
    """Hop-latency class (``nvlink``, ``pci``, ``net``)."""
    fabric: str = ""
    """The fabric crossed: a domain's (``nvlink-fusion``...), the network's (``efa``...) or ``pcie`` (host)."""


_LOCAL = Route((), 0, 0.0, "nvlink", "local")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a set of participants sits: what the closed-form costs need to know."""

    participants: int
    """Number of ranks."""
    groups: int
    """Distinct (replica, domain) groups the ranks fall in."""
    group_size: int | None
    """Ranks per group when every group holds the same number, else None."""
    domains: tuple[DomainModel, ...]
    """The distinct domain models involved."""
    switch: DomainModel | None
    """The in-switch-reduction domain holding every rank, if there is one."""
    torus: tuple[int, ...] | None = None
    """The shape when the ranks are exactly one torus domain, rank i at its i-th member."""
    ranks: tuple[tuple[int, ...], ...] | None = None
    """Participant indices grouped by (replica, domain) (:meth:`Topology.group_ranks`); None for a whole
    rack, which is described symbolically."""


class Topology:
    """Links, switches, domains and routes of a rack (build with :func:`collectives.rack_topology.from_rack` or :meth:`ideal`)."""

    def __init__(self, name: str, width: int, replicas: int, domains: tuple[DomainModel, ...],
                 network: NetworkModel | None, protocols: tuple[tuning.Protocol, ...], overlap_reduce: bool,
                 source: str, host: HostLinkModel | None = None) -> None:
        self.name = name
        self.width = width
        self.replicas = replicas
        self.domains = domains
        """Runs of identical domains (:class:`DomainModel`), in slot order within a replica."""
        self.network = network
        self.host = host
        """Each slot's link to the host (None: the topology has no host, e.g. an ideal one)."""
        self.protocols = protocols
        self.overlap_reduce = overlap_reduce
        """True: a reduce overlaps the transfer feeding it (NCCL fuses them); False: alpha-beta's additive g."""
        self.source = source
        self._firsts = tuple(d.first for d in domains)

    def __len__(self) -> int:
        return self.width * self.replicas

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {len(self)} slots, {self.domain_count} domains x {self.replicas})"

    @property
    def domain_count(self) -> int:
        """Domains in one replica (a run counts each of its domains)."""
        return sum(d.repeat for d in self.domains)

    # -- construction --------------------------------------------------------

    @classmethod
    def ideal(cls, participants: int, alpha: float, beta: float, gamma: float = 0.0,
              shape: tuple[int, ...] | None = None) -> Topology:
        """One switch (or a torus of ``shape``) joining ``participants`` slots with uniform alpha, beta, gamma.

        alpha: seconds per message (per hop on a torus); beta: seconds per byte
        of one port (one link on a torus); gamma: reduce seconds per byte.
        Priced with the plain alpha-beta model: no protocols, no base latency, no
        efficiency, reduce time added (not overlapped); the switch can reduce
        in-network at full efficiency, so in-switch schedules can be checked too.
        """
        src = THAKUR_2005.cite("ideal alpha-beta topology")
        one = Figure(1.0, "", src, "published", "ideal")
        links = 1
        if shape is not None:
            links = sum(2 if d > 2 else 1 if d == 2 else 0 for d in shape) or 1
        bw = Figure(links / beta if beta > 0 else 1e30, "B/s", src, "published", "1/beta per link")
        dom = DomainModel("ideal", "ideal", 0, participants, shape, bw.value, bw, one,
                          Figure(alpha, "s", src, "published", "alpha"), "nvlink", shape is None, one, gamma, src)
        return cls(f"ideal({participants})", participants, 1, (dom,), None, (tuning.IDEAL,), False, src)

    # -- lookup --------------------------------------------------------------

    def domain_of(self, slot: int) -> tuple[int, DomainModel]:
        """(first slot of the domain holding ``slot``, its model): the first slot names the domain uniquely."""
        if not 0 <= slot < len(self):
            raise IndexError(f"slot {slot} out of range: the rack has {len(self)} slots")
        replica, local = divmod(slot, self.width)
        dom = self.domains[bisect_right(self._firsts, local) - 1]
        k = (local - dom.first) // dom.count
        return replica * self.width + dom.first + k * dom.count, dom

    def domain_name(self, slot: int) -> str:
        """The rack spec's name of the domain holding ``slot`` (``@replica`` appended when replicated)."""
        first, dom = self.domain_of(slot)
        replica, local = divmod(first, self.width)
        name = dom.instance_name((local - dom.first) // dom.count)
        return name if self.replicas == 1 else f"{name}@{replica}"

    def route(self, a: int, b: int) -> Route:
        """The links from slot ``a`` to slot ``b`` (empty for a == b); either may be :data:`HOST`."""
        if a == b:
            return _LOCAL
        if a == HOST or b == HOST:
            if self.host is None:
                raise ValueError(f"{self.name}: this topology has no host link")
            h = self.host
            link = ("h2d", b) if a == HOST else ("d2h", a)
            self.domain_of(link[1])  # range check
            return Route((link,), 1, h.hop_latency.value, "pci", h.fabric)
        fa, da = self.domain_of(a)
        fb, db = self.domain_of(b)
        if fa == fb:
            if da.is_torus:
                links = tuple(da.torus_links(a - fa, b - fa, fa))
                return Route(links, len(links), len(links) * da.hop_latency.value, da.hw, da.fabric)
            return Route((("tx", a), ("rx", b)), 1, da.hop_latency.value, da.hw, da.fabric)
        if self.network is None:
            raise ValueError(f"slots {a} and {b} are in different domains and the rack has no network")
        return Route((("ntx", a), ("nrx", b)), 1, self.network.hop_latency.value, "net", self.network.fabric)

    def bandwidth(self, link: tuple) -> float:
        """Bytes/s of one directed link (efficiency applied, protocol not)."""
        kind = link[0]
        if kind in ("ntx", "nrx"):
            return self.network.bandwidth
        if kind in ("h2d", "d2h"):
            return self.host.bandwidth
        _, dom = self.domain_of(link[1])
        return dom.link_bandwidth if kind == "t" else dom.bandwidth

    def reduce_g(self, slot: int) -> float:
        """Seconds per byte slot ``slot`` takes to reduce."""
        return self.domain_of(slot)[1].reduce_g

    def switch_domain(self, slots: Sequence[int]) -> DomainModel | None:
        """The in-switch-reduction domain holding every slot in ``slots``, or None."""
        if not len(slots) or HOST in _ends(slots):
            return None
        first, dom = self.domain_of(slots[0])
        if not dom.in_switch or dom.is_torus:
            return None
        return dom if _all_in(slots, first, dom.count) else None

    def group_ranks(self, slots: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """Participant indices grouped by domain (replicas apart), in order of first appearance.

        The host (:data:`HOST`) is in no domain: a participant there is a group of its own.
        """
        groups: dict[int, list[int]] = {}
        for rank, s in enumerate(slots):
            key = HOST if s == HOST else self.domain_of(s)[0]
            groups.setdefault(key, []).append(rank)
        return tuple(tuple(g) for g in groups.values())

    def placement(self, slots: Sequence[int] | None = None) -> Placement:
        """Where ``slots`` (None: every slot) sit; symbolic when they cover the whole rack, and counted without
        walking the members for a strided ``range`` of more than :data:`RANGE_WALK_LIMIT` slots (a data-parallel
        group of ten million chips costs what one of ten does)."""
        if slots is None or (isinstance(slots, range) and slots == range(len(self))):
            sizes = {d.count for d in self.domains}
            first = self.domains[0]
            one = len(self.domains) == 1 and first.repeat == 1 and self.replicas == 1
            switch = first if one and first.in_switch and not first.is_torus else None
            return Placement(len(self), self.domain_count * self.replicas, sizes.pop() if len(sizes) == 1 else None,
                          self.domains, switch, first.shape if one else None)
        if isinstance(slots, range) and slots.step > 0 and slots.start >= 0 and len(slots) > RANGE_WALK_LIMIT:
            count, sizes, doms = self._range_groups(slots.start, slots.step, len(slots))
            return Placement(len(slots), count, sizes.pop() if len(sizes) == 1 else None, tuple(doms.values()),
                          self.switch_domain(slots), self.torus_shape(slots), None)
        groups = self.group_ranks(slots)
        sizes = {len(g) for g in groups}
        heads = [slots[g[0]] for g in groups if slots[g[0]] != HOST]
        doms = {id(d): d for d in (self.domain_of(s)[1] for s in heads)}
        return Placement(len(slots), len(groups), sizes.pop() if len(sizes) == 1 else None, tuple(doms.values()),
                      self.switch_domain(slots), self.torus_shape(slots), groups)

    # -- strided groups, counted ------------------------------------------------

    def _range_groups(self, a: int, s: int, n: int) -> tuple[int, set[int], dict[int, DomainModel]]:
        """(domains hit, the set of members per domain hit, the domain models hit in order of first member) of
        slots ``a + j * s`` for ``j < n`` (``s > 0``), without a step per member.

        Replicas are ``width`` slots apart, so a replica wholly inside the group holds the members that start
        at ``(a - q * width) mod s``: its pattern repeats every ``s / gcd(s, width)`` replicas and only one
        period of them is counted (times how often it repeats). A stride of a replica or more puts every member
        in a replica of its own."""
        w = self.width
        count, sizes, doms = 0, set(), {}
        if s >= w:
            for j in range(min(n, w // gcd(s, w))):
                dom = self.domain_of(a + j * s)[1]
                doms.setdefault(id(dom), dom)
            return n, {1}, doms
        last = a + (n - 1) * s
        q0, q1 = a // w, last // w
        memo: dict[tuple[int, int], tuple[int, set[int], list[DomainModel]]] = {}

        def replica(q: int, times: int = 1) -> None:
            nonlocal count
            lo = max(a, q * w)
            first = lo + (-(lo - a)) % s  # the first member at or after lo
            stop = min(last, (q + 1) * w - 1)
            k = (stop - first) // s + 1 if first <= stop else 0
            if not k:
                return
            key = (first - q * w, k)
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = self._local_groups(first - q * w, s, k)
            count += hit[0] * times
            sizes.update(hit[1])
            for dom in hit[2]:
                doms.setdefault(id(dom), dom)

        replica(q0)
        middle = q1 - q0 - 1
        period = s // gcd(s, w)
        if middle > 2 * period:
            full, extra = divmod(middle, period)
            for t in range(period):
                replica(q0 + 1 + t, full + (1 if t < extra else 0))
        else:
            for q in range(q0 + 1, q1):
                replica(q)
        if q1 > q0:
            replica(q1)
        return count, sizes, doms

    def _local_groups(self, o: int, s: int, k: int) -> tuple[int, set[int], list[DomainModel]]:
        """:meth:`_range_groups` within one replica: local slots ``o + i * s`` for ``i < k``."""
        count, sizes, models = 0, set(), []
        for dom in self.domains:
            c, lo, hi = dom.count, dom.first, dom.stop
            i_lo, i_hi = max(0, -(-(lo - o) // s)), min(k, -(-(hi - o) // s))
            if i_lo >= i_hi:
                continue
            models.append(dom)
            x0, m = o + i_lo * s, i_hi - i_lo
            if s >= c:  # at most one member per domain
                count += m
                sizes.add(1)
                continue
            b0, b1 = (x0 - lo) // c, (x0 + (m - 1) * s - lo) // c
            count += b1 - b0 + 1  # a stride under the domain size leaves no domain between out

            def members(b: int) -> int:
                start, stop = lo + b * c, lo + (b + 1) * c
                return max(0, min(m, -(-(stop - x0) // s)) - max(0, -(-(start - x0) // s)))

            sizes.add(members(b0))
            sizes.add(members(b1))
            inner = b1 - b0 - 1
            if inner > 0:
                if c % s == 0:
                    sizes.add(c // s)
                else:  # the count per whole domain repeats every s / gcd(s, c) domains
                    for b in range(b0 + 1, b0 + 1 + min(inner, s // gcd(s, c))):
                        sizes.add(members(b))
        return count, sizes, models

    def torus_shape(self, slots: Sequence[int]) -> tuple[int, ...] | None:
        """The torus shape when ``slots`` are exactly one torus domain's members in order, else None."""
        if not len(slots) or HOST in _ends(slots):
            return None
        first, dom = self.domain_of(slots[0])
        if not dom.is_torus or len(slots) != dom.count or slots[0] != first:
            return None
        if isinstance(slots, range):
            return dom.shape if slots.step == 1 else None
        return dom.shape if all(s == first + i for i, s in enumerate(slots)) else None

    def sources(self) -> list[str]:
        """Citations of every figure the topology uses."""
        out = []
        for d in self.domains:
            out += _domain_sources(d)
        if self.network is not None:
            out += _network_sources(self.network)
        if self.host is not None:
            out += _host_sources(self.host)
        if self.protocols != (tuning.IDEAL,):
            out.append(f"protocols and base latencies: {tuning.HOP_LATENCY_SOURCE}")
        return out

    def route_sources(self, a: int, b: int) -> list[str]:
        """Citations of the figures a transfer from ``a`` to ``b`` uses (its route's links, the protocols)."""
        route = self.route(a, b)
        if not route.links:
            return []
        kind = route.links[0][0]
        if kind in ("h2d", "d2h"):
            out = _host_sources(self.host)
        elif kind in ("ntx", "nrx"):
            out = _network_sources(self.network)
        else:
            out = _domain_sources(self.domain_of(a)[1], reduce=False)
        if self.protocols != (tuning.IDEAL,):
            out.append(f"protocols and base latencies: {tuning.HOP_LATENCY_SOURCE}")
        return out


def _domain_sources(d: DomainModel, reduce: bool = True) -> list[str]:
    name = d.label
    out = [f"{name} bandwidth: {d.raw_bandwidth.source}",
           f"{name} efficiency {d.efficiency.value:.3f}: {d.efficiency.source}",
           f"{name} hop latency: {d.hop_latency.source}"]
    if reduce:
        out.append(f"{name} reduce rate: {d.reduce_source}")
        if d.switch_efficiency is not None:
            out.append(f"{name} in-switch efficiency {d.switch_efficiency.value}: {d.switch_efficiency.source}")
    return out


def _network_sources(n: NetworkModel) -> list[str]:
    return [f"network bandwidth: {n.raw_bandwidth.source}",
            f"network efficiency {n.efficiency.value:.3f}: {n.efficiency.source}",
            f"network hop latency: {n.hop_latency.source}"]


def _host_sources(h: HostLinkModel) -> list[str]:
    return [f"host link ({h.fabric}) bandwidth: {h.raw_bandwidth.source}",
            f"host link efficiency {h.efficiency.value:.3f}: {h.efficiency.source}",
            f"host link hop latency: {h.hop_latency.source}"]


def _ends(slots: Sequence[int]) -> tuple[int, ...]:
    return (slots[0], slots[-1]) if isinstance(slots, range) else tuple(slots)


def _all_in(slots: Sequence[int], lo: int, count: int) -> bool:
    return all(lo <= s < lo + count for s in _ends(slots))
