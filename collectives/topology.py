"""The fabric of a rack: domains, links, routes, per-direction bandwidths and hop latencies.

Built from a :class:`devices.RackSpec` without an object per slot: a domain is
one :class:`DomainModel` shared by every replica of the rack, links are small
tuples made on demand, and a route is computed from two slot numbers.  A
million-chip rack (``"trn3-ultraserver*7282"``) is a handful of objects.

Links (one direction each; ``bandwidth(link)`` gives bytes/s):

* ``("tx", s)`` / ``("rx", s)``: slot s's port into / out of its domain's switch
  (NVLink, NVLink Fusion, NeuronSwitch, PCIe).  Every member reaches every
  other through the switch: route ``tx(a), rx(b)``, one hop.  Trainium4 and
  NVIDIA GPUs sit in one NVLink Fusion domain like any other members.
* ``("t", s, dim, dir)``: slot s's torus link along ``dim`` towards ``dir`` (+1/-1);
  dimension-ordered shortest-path routing, one hop per link.
* ``("ntx", s)`` / ``("nrx", s)``: slot s's share of the scale-out network (EFA,
  InfiniBand), a full-bisection network: route ``ntx(a), nrx(b)``, one hop.

Concurrent transfers crossing one link share its bandwidth (``collectives.cost``).
Bandwidths already include the fabric efficiency of ``collectives.tuning``;
hop latencies are the LL-protocol figures devices gives, which the protocols scale.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from collectives import tuning
from devices.figure import Figure


@dataclass(frozen=True, slots=True)
class DomainModel:
    """One switch or torus domain of a rack (the same object serves every replica)."""

    name: str
    """The rack spec's domain name."""
    fabric: str
    """``nvlink-fusion``, ``nvlink``, ``neuronlink-torus``, ``neuronswitch``, ``pcie`` or ``ideal``."""
    first: int
    """First slot within a replica."""
    count: int
    """Slots in the domain."""
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
class Route:
    """The links a transfer crosses, and its latency at LL (scaled per protocol by ``hw``)."""

    links: tuple[tuple, ...]
    hops: int
    latency: float
    hw: str


_LOCAL = Route((), 0, 0.0, "nvlink")


@dataclass(frozen=True, slots=True)
class Layout:
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
    """Links, switches, domains and routes of a rack (build with :meth:`from_rack` or :meth:`ideal`)."""

    def __init__(self, name: str, width: int, replicas: int, domains: tuple[DomainModel, ...],
                 network: NetworkModel | None, protocols: tuple[tuning.Protocol, ...], overlap_reduce: bool,
                 source: str) -> None:
        self.name = name
        self.width = width
        self.replicas = replicas
        self.domains = domains
        self.network = network
        self.protocols = protocols
        self.overlap_reduce = overlap_reduce
        """True: a reduce overlaps the transfer feeding it (NCCL fuses them); False: alpha-beta's additive g."""
        self.source = source
        self._firsts = tuple(d.first for d in domains)

    def __len__(self) -> int:
        return self.width * self.replicas

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {len(self)} slots, {len(self.domains)} domains x {self.replicas})"

    # -- construction --------------------------------------------------------

    @classmethod
    def from_rack(cls, rack) -> Topology:
        """The topology of a rack: a :class:`devices.RackSpec`, a preset name or a spec string."""
        if not hasattr(rack, "domains"):
            import devices

            rack = devices.parse_rack(rack)
        return _from_rack(rack)

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
        src = "ideal alpha-beta topology (reference/collectives.md)"
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
        """(replica, domain model) of a slot."""
        if not 0 <= slot < len(self):
            raise IndexError(f"slot {slot} out of range: the rack has {len(self)} slots")
        replica, local = divmod(slot, self.width)
        return replica, self.domains[bisect_right(self._firsts, local) - 1]

    def route(self, a: int, b: int) -> Route:
        """The links from slot ``a`` to slot ``b`` (empty for a == b)."""
        if a == b:
            return _LOCAL
        ra, da = self.domain_of(a)
        rb, db = self.domain_of(b)
        if ra == rb and da is db:
            if da.is_torus:
                base = ra * self.width + da.first
                links = tuple(da.torus_links(a - base, b - base, base))
                return Route(links, len(links), len(links) * da.hop_latency.value, da.hw)
            return Route((("tx", a), ("rx", b)), 1, da.hop_latency.value, da.hw)
        if self.network is None:
            raise ValueError(f"slots {a} and {b} are in different domains and the rack has no network")
        return Route((("ntx", a), ("nrx", b)), 1, self.network.hop_latency.value, "net")

    def bandwidth(self, link: tuple) -> float:
        """Bytes/s of one directed link (efficiency applied, protocol not)."""
        kind = link[0]
        if kind in ("ntx", "nrx"):
            return self.network.bandwidth
        _, dom = self.domain_of(link[1])
        return dom.link_bandwidth if kind == "t" else dom.bandwidth

    def reduce_g(self, slot: int) -> float:
        """Seconds per byte slot ``slot`` takes to reduce."""
        return self.domain_of(slot)[1].reduce_g

    def switch_domain(self, slots: Sequence[int]) -> DomainModel | None:
        """The in-switch-reduction domain holding every slot in ``slots``, or None."""
        if not len(slots):
            return None
        replica, dom = self.domain_of(slots[0])
        if not dom.in_switch or dom.is_torus:
            return None
        return dom if _all_in(self, slots, (replica, dom)) else None

    def group_ranks(self, slots: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """Participant indices grouped by (replica, domain), in order of first appearance."""
        groups: dict[tuple[int, str], list[int]] = {}
        for rank, s in enumerate(slots):
            r, d = self.domain_of(s)
            groups.setdefault((r, d.name), []).append(rank)
        return tuple(tuple(g) for g in groups.values())

    def layout(self, slots: Sequence[int] | None = None) -> Layout:
        """Where ``slots`` (None: every slot) sit; symbolic when they cover the whole rack."""
        if slots is None or (isinstance(slots, range) and slots == range(len(self))):
            sizes = {d.count for d in self.domains}
            one = len(self.domains) == 1 and self.replicas == 1
            switch = self.domains[0] if one and self.domains[0].in_switch and not self.domains[0].is_torus else None
            return Layout(len(self), len(self.domains) * self.replicas, sizes.pop() if len(sizes) == 1 else None,
                          self.domains, switch, self.domains[0].shape if one else None)
        groups = self.group_ranks(slots)
        sizes = {len(g) for g in groups}
        doms = {id(self.domain_of(s)[1]): self.domain_of(s)[1] for s in (slots[g[0]] for g in groups)}
        return Layout(len(slots), len(groups), sizes.pop() if len(sizes) == 1 else None, tuple(doms.values()),
                      self.switch_domain(slots), self.torus_shape(slots), groups)

    def torus_shape(self, slots: Sequence[int]) -> tuple[int, ...] | None:
        """The torus shape when ``slots`` are exactly one torus domain's members in order, else None."""
        if not len(slots):
            return None
        replica, dom = self.domain_of(slots[0])
        first = replica * self.width + dom.first
        if not dom.is_torus or len(slots) != dom.count or slots[0] != first:
            return None
        if isinstance(slots, range):
            return dom.shape if slots.step == 1 else None
        return dom.shape if all(s == first + i for i, s in enumerate(slots)) else None

    def sources(self) -> list[str]:
        """Citations of every figure the topology uses."""
        out = []
        for d in self.domains:
            out += [f"{d.name} bandwidth: {d.raw_bandwidth.source}",
                    f"{d.name} efficiency {d.efficiency.value:.3f}: {d.efficiency.source}",
                    f"{d.name} hop latency: {d.hop_latency.source}",
                    f"{d.name} reduce rate: {d.reduce_source}"]
            if d.switch_efficiency is not None:
                out.append(f"{d.name} in-switch efficiency {d.switch_efficiency.value}: {d.switch_efficiency.source}")
        if self.network is not None:
            n = self.network
            out += [f"network bandwidth: {n.raw_bandwidth.source}",
                    f"network efficiency {n.efficiency.value:.3f}: {n.efficiency.source}",
                    f"network hop latency: {n.hop_latency.source}"]
        if self.protocols != (tuning.IDEAL,):
            out.append(f"protocols and base latencies: {tuning.HOP_LATENCY_SOURCE}")
        return out


def _all_in(topo: Topology, slots: Sequence[int], where: tuple[int, DomainModel]) -> bool:
    replica, dom = where
    lo = replica * topo.width + dom.first
    if isinstance(slots, range):
        return all(lo <= s < lo + dom.count for s in (slots[0], slots[-1]))
    return all(lo <= s < lo + dom.count for s in slots)


@lru_cache(maxsize=64)
def _from_rack(rack) -> Topology:
    from devices import chip

    models = []
    for d in rack.domains:
        kinds = sorted({g.kind for g in rack.groups if g.first < d.stop and g.stop > d.first})
        chips = [chip(k) for k in kinds]
        if d.fabric == "pcie":
            eff = tuning.link_efficiency("pcie")
            hw = "pci"
        else:
            eff = min((tuning.link_efficiency(c.scale_up_fabric) for c in chips), key=lambda f: f.value)
            hw = "nvlink"
        raw = rack.link_bandwidth_figure(d)
        slow = min(chips, key=lambda c: c.hbm_bandwidth.value)
        g = tuning.REDUCE_PASSES / slow.hbm_bandwidth.value
        switch_eff = None
        if d.in_switch_reduction:
            switch_eff = min((tuning.nvls_efficiency(c.scale_up_fabric) for c in chips), key=lambda f: f.value)
        models.append(DomainModel(
            d.name, d.fabric, d.first, d.count, d.shape, raw.value * eff.value, raw, eff, rack.latency_figure(d), hw,
            d.in_switch_reduction, switch_eff, g,
            f"{tuning.REDUCE_PASSES:g} HBM passes per reduced byte at {slow.kind} HBM bandwidth: "
            f"{slow.hbm_bandwidth.source}"))
    network = None
    if rack.network is not None:
        figs = rack.network_figures()
        eff = tuning.NETWORK_EFFICIENCY
        network = NetworkModel(rack.network.fabric, figs["bandwidth"].value * eff.value, figs["bandwidth"], eff,
                               figs["latency"])
    return Topology(rack.name, rack.slots_per_replica, rack.replicas, tuple(models), network,
                    tuning.NCCL_PROTOCOLS, True, rack.source)
