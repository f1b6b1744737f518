"""A validated rack spec: slot groups, domains covering every slot exactly once, a network, replicas.

A whole rack can be repeated ``replicas`` times and its domains are held as
runs (:mod:`devices.rack.domain_table`), so a million-chip what-if, flat
(``"trn3:1048608"``) or replicated (``"trn3-ultraserver*7282"``), is a few
small objects: nothing is stored per slot or per domain, and :meth:`RackSpec.slot`
builds a :class:`~devices.rack.parts.Slot` only when asked.

Specs come from strings, presets and rack files through :func:`devices.parse_rack`
(:mod:`devices.rack.parse` for the grammar, :mod:`devices.rack.layout` for the
default domains, :mod:`devices.rack.toml_file` for the file format).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

from devices.chip import chip
from devices.rack.domain_table import DomainRun, DomainTable, split_name
from devices.fabrics import fabric
from devices.figure import Figure
from devices.rack.parts import DomainSpec, NetworkSpec, Slot, SlotGroup, _positive_int, check_int64
from devices.rack.numerics import NumericsSpec

KINDS_LIMIT = 100_000
"""Largest rack :meth:`RackSpec.kinds` will list; bigger racks are meant to be read with :meth:`RackSpec.counts`."""

_MEMBERS = {"nvidia": "NVIDIA GPUs", "trainium": "Trainium chips", "fusion": "Trainium4 and NVIDIA GPUs",
            "any": "any chip"}


def _span(domain: DomainSpec) -> str:
    return f"{domain.name!r} (slots {domain.first}-{domain.stop - 1})"


@dataclass(frozen=True, slots=True)
class RackSpec:
    """A validated rack: slot groups, domains covering every slot exactly once, a network, replicas."""

    name: str
    """Display name (the preset or file's name, or the spec string)."""
    groups: tuple[SlotGroup, ...]
    """Slot runs in index order, contiguous from slot 0."""
    domains: DomainTable
    """Domains in index order, covering every slot exactly once: a sequence of :class:`~devices.rack.parts.DomainSpec`
    (any iterable of DomainSpec or :class:`~devices.rack.domain_table.DomainRun` is accepted and stored as a table)."""
    network: NetworkSpec | None
    """What joins the domains and the replicas (None only for a single-domain, single-replica rack)."""
    source: str
    """Where the spec came from: ``"spec 'trn3:2+h100:2'"``, ``"preset fusion-default"``, ``"file rack.toml"``."""
    replicas: int = 1
    """The whole rack repeated this many times, joined by :attr:`network`."""
    numerics: NumericsSpec | None = None
    """Each slot's numerics mode and stochastic rounding (None: every slot ``exact``); see devices.rack.numerics."""
    _group_firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _width: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name: a rack needs a non-empty name, got {self.name!r}")
        groups = tuple(self.groups)
        if not groups:
            raise ValueError("slots: a rack needs at least one slot group")
        expected = 0
        for i, group in enumerate(groups):
            if not isinstance(group, SlotGroup):
                raise ValueError(f"groups[{i}]: expected a SlotGroup, got {group!r}")
            if group.first != expected:
                raise ValueError(f"groups[{i}].first: slot groups must be contiguous from slot 0; "
                                 f"expected first={expected}, got {group.first}")
            expected = group.stop
        width = expected
        if not isinstance(self.domains, DomainTable):
            entries = list(self.domains) if isinstance(self.domains, Iterable) else [self.domains]
            for entry in entries:
                if not isinstance(entry, (DomainSpec, DomainRun)):
                    raise ValueError(f"domains: expected DomainSpec entries, got {entry!r}")
            object.__setattr__(self, "domains", DomainTable(entries))
        table: DomainTable = self.domains
        self._check_names(table)
        self._check_cover(table, width)
        self._check_members(groups, table)
        if self.network is not None and not isinstance(self.network, NetworkSpec):
            raise ValueError(f"network: expected a NetworkSpec or None, got {self.network!r}")
        _positive_int(self.replicas, "replicas")
        check_int64(width * self.replicas, "replicas", f"the slot count ({width} x {self.replicas} replicas)")
        if self.network is None and (self.replicas > 1 or len(table) > 1):
            raise ValueError("network: a rack with several domains or replicas needs a network to join them")
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "_group_firsts", tuple(g.first for g in groups))
        object.__setattr__(self, "_width", width)

    @staticmethod
    def _check_cover(table: DomainTable, width: int) -> None:
        if not table.runs:
            raise ValueError("domains: a rack needs at least one domain")
        covered = 0
        previous: DomainRun | None = None
        for run in table.runs:
            if run.first < covered:
                raise ValueError(f"domains: domain {_span(run.domain)} overlaps domain {_span(previous.last())}")
            if run.first > covered:
                raise ValueError(f"domains: slots {covered}-{run.first - 1} are in no domain; every slot "
                                 f"0-{width - 1} must be in exactly one")
            covered = run.stop
            previous = run
        if covered != width:
            if covered > width:
                raise ValueError(f"domains: domain {previous.last().name!r} reaches slot {covered - 1} but the rack "
                                 f"has only {width} slots (0-{width - 1})")
            raise ValueError(f"domains: slots {covered}-{width - 1} are in no domain; every slot "
                             f"0-{width - 1} must be in exactly one")

    @staticmethod
    def _check_names(table: DomainTable) -> None:
        # Names are unique when no two runs' numbered ranges under one stem meet.
        ranges: dict[str, list[tuple[int, int]]] = {}
        for run in table.runs:
            stem, number = split_name(run.domain.name)
            low = -1 if number is None else number  # an unnumbered name is its own one-element range
            ranges.setdefault(stem, []).append((low, low + run.repeat))
        for stem, spans in ranges.items():
            spans.sort()
            for (a, b), (c, _) in zip(spans, spans[1:]):
                if c < b:
                    name = stem if c == -1 else f"{stem}{c}"
                    raise ValueError(f"domains: domain name {name!r} is used twice; names must be unique")

    @staticmethod
    def _check_members(groups: tuple[SlotGroup, ...], table: DomainTable) -> None:
        # An H100 cannot sit on a NeuronSwitch: catch such layouts here rather
        # than as nonsense costs later.
        firsts = [g.first for g in groups]
        for run in table.runs:
            spec = fabric(run.domain.fabric)
            for group in groups[max(0, bisect_right(firsts, run.first) - 1):]:
                if group.first >= run.stop:
                    break
                if not spec.accepts(chip(group.kind)):
                    holder = table.holding(max(group.first, run.first))
                    raise ValueError(f"domains: domain {holder.name!r} is {holder.fabric} but holds {group.kind} "
                                     f"slots; {holder.fabric} accepts {_MEMBERS[spec.members]}")

    # -- size and lookup --------------------------------------------------

    def __len__(self) -> int:
        """Total slots, replicas included."""
        return self._width * self.replicas

    @property
    def slots_per_replica(self) -> int:
        """Slots in one copy of the rack."""
        return self._width

    def _locate(self, index: int) -> tuple[int, int]:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"slot index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(self):
            raise IndexError(f"slot {index} out of range: the rack has {len(self)} slots (0-{len(self) - 1})")
        return divmod(index, self._width)

    def group_of(self, index: int) -> SlotGroup:
        """The slot group (within its replica) holding slot ``index``."""
        _, local = self._locate(index)
        return self.groups[bisect_right(self._group_firsts, local) - 1]

    def domain_of(self, index: int) -> DomainSpec:
        """The domain (within its replica) holding slot ``index``."""
        _, local = self._locate(index)
        return self.domains.holding(local)

    def slot(self, index: int) -> Slot:
        """Slot ``index``, built on demand (IndexError outside ``0 .. len(self) - 1``)."""
        replica, local = self._locate(index)
        group = self.groups[bisect_right(self._group_firsts, local) - 1]
        domain = self.domains.holding(local)
        capacity = group.capacity if group.capacity is not None else int(chip(group.kind).hbm_capacity.value)
        name = domain.name if self.replicas == 1 else f"{domain.name}@{replica}"
        return Slot(index, group.kind, capacity, group.backing, name, replica)

    def iter_slots(self, start: int = 0, stop: int | None = None) -> Iterator[Slot]:
        """Slots ``start .. stop - 1``, one at a time (never a list of a million)."""
        stop = len(self) if stop is None else min(stop, len(self))
        for index in range(start, stop):
            yield self.slot(index)

    def kinds(self) -> list[str]:
        """The kind of every slot, in order; ValueError above :data:`KINDS_LIMIT` slots (use :meth:`counts`)."""
        if len(self) > KINDS_LIMIT:
            raise ValueError(f"kinds: the rack has {len(self)} slots, more than the {KINDS_LIMIT} this lists; "
                             f"use counts() or slot(i)")
        one = [g.kind for g in self.groups for _ in range(g.count)]
        return one * self.replicas

    def counts(self) -> dict[str, int]:
        """Slots per kind, replicas included, in first-appearance order."""
        out: dict[str, int] = {}
        for group in self.groups:
            out[group.kind] = out.get(group.kind, 0) + group.count * self.replicas
        return out

    # -- effective link figures ---------------------------------------------

    def link_bandwidth_figure(self, domain: DomainSpec) -> Figure:
        """Bytes/s per direction per slot inside ``domain``, as a sourced figure.

        The domain's own value when set (with the figure it was given as, if
        any), else the fabric's (PCIe), else the slowest member chip's
        scale-up bandwidth: a collective inside the domain moves at the pace
        of its slowest port.
        """
        if domain.link_bandwidth is not None:
            if domain.link_source is not None:
                return domain.link_source
            return Figure(domain.link_bandwidth, "B/s", f"rack spec ({self.source}), domain {domain.name!r}",
                          "secondary", "set by the rack spec")
        spec = fabric(domain.fabric)
        if spec.bandwidth is not None:
            return spec.bandwidth
        lo = bisect_right(self._group_firsts, domain.first) - 1
        members = {g.kind for g in self.groups[lo:] if g.first < domain.stop and g.stop > domain.first}
        return min((chip(k).scale_up_bandwidth for k in members), key=lambda f: f.value)

    def link_bandwidth(self, domain: DomainSpec) -> float:
        """Bytes/s per direction per slot inside ``domain`` (see :meth:`link_bandwidth_figure`)."""
        return self.link_bandwidth_figure(domain).value

    def latency_figure(self, domain: DomainSpec) -> Figure:
        """Seconds per hop inside ``domain``: its own value (and figure), else the fabric's sourced default."""
        if domain.latency is None:
            return fabric(domain.fabric).latency
        if domain.latency_source is not None:
            return domain.latency_source
        return Figure(domain.latency, "s", f"rack spec ({self.source}), domain {domain.name!r}", "secondary",
                      "set by the rack spec")

    def latency(self, domain: DomainSpec) -> float:
        """Seconds per hop inside ``domain`` (see :meth:`latency_figure`)."""
        return self.latency_figure(domain).value

    def network_figures(self) -> dict[str, Figure]:
        """The network's bandwidth and latency as sourced figures (empty without a network)."""
        if self.network is None:
            return {}
        net = self.network
        spec = f"rack spec ({self.source})"
        bandwidth = net.bandwidth_source or Figure(net.bandwidth, "B/s", spec, "secondary", "set by the rack spec")
        latency = net.latency_source or Figure(net.latency, "s", spec, "secondary", "set by the rack spec")
        return {"bandwidth": bandwidth, "latency": latency}

    # -- construction -------------------------------------------------------

    def with_replicas(self, replicas: int) -> RackSpec:
        """This rack repeated ``replicas`` times (the count multiplies any existing replicas)."""
        _positive_int(replicas, "replicas")
        check_int64(len(self) * replicas, "replicas", f"the slot count ({len(self)} x {replicas} replicas)")
        return replace(self, name=f"{self.name}*{replicas}", replicas=self.replicas * replicas,
                       source=f"{self.source}, replicated x{replicas}")

    def describe(self) -> str:
        """One line: size, kinds, domains and network."""
        kinds = ", ".join(f"{n} {k}" for k, n in self.counts().items())
        fabrics_used = sorted({run.domain.fabric for run in self.domains.runs})
        count = len(self.domains)
        per = f"{count} domain{'s' if count != 1 else ''} ({', '.join(fabrics_used)})"
        if self.replicas > 1:
            per += f" per replica x{self.replicas}"
        net = f", network {self.network.fabric}" if self.network else ""
        return f"{self.name}: {len(self)} slots ({kinds}), {per}{net}"


__all__ = ["KINDS_LIMIT", "RackSpec"]
