"""Rack specs: which chips sit in which slots, how they are grouped into domains, what joins the domains.

A rack is described by runs of identical slots (:class:`SlotGroup`) and
contiguous slot ranges under one switch or torus (:class:`DomainSpec`), joined
by a scale-out :class:`NetworkSpec`.  A whole rack can be repeated
``replicas`` times, so a million-chip what-if (``"trn3-ultraserver*7282"``)
is a few small objects: nothing is stored per slot, and :meth:`RackSpec.slot`
builds a :class:`Slot` only when asked.

Specs come from strings, presets and TOML files through :meth:`RackSpec.parse`
(see :mod:`devices.rack_parse` for the grammar and the default-domain rules,
:mod:`devices.rack_toml` for the file format).
"""

from __future__ import annotations

import math
import os
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Iterator

from devices.backing import AUTO, Backing
from devices.chip import chip
from devices.fabrics import (DOMAIN_FABRICS, NETWORK_FABRICS, PCIE_GEN5_X16, TRN2_INSTANCE_LINK, fabric,
                             network_bandwidth)
from devices.figure import Figure

KINDS_LIMIT = 100_000
"""Largest rack :meth:`RackSpec.kinds` will list; bigger racks are meant to be read with :meth:`RackSpec.counts`."""

def _positive_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return value


def _non_negative_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def _positive_number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: expected a positive number, got {value!r}")
    return float(value)


def _non_negative_number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: expected a non-negative number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class SlotGroup:
    """A run of identical slots ``[first, first + count)``."""

    kind: str
    """Chip kind (a catalogue key; normalised to lower case)."""
    count: int
    """Number of slots, positive."""
    first: int
    """Index of the first slot."""
    capacity: int | None = None
    """Bytes of device memory per slot, overriding the chip's HBM (None: the chip's HBM)."""
    backing: Backing = AUTO
    """Where the slot's bytes live: ``auto``, ``emulated`` or ``cuda:N`` (a string is parsed)."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise ValueError(f"kind: expected a chip kind string, got {self.kind!r}")
        object.__setattr__(self, "kind", chip(self.kind).kind)
        _positive_int(self.count, "count")
        _non_negative_int(self.first, "first")
        if self.capacity is not None:
            _positive_int(self.capacity, "capacity")
        object.__setattr__(self, "backing", Backing.parse(self.backing))

    @property
    def stop(self) -> int:
        """One past the last slot index."""
        return self.first + self.count


@dataclass(frozen=True, slots=True)
class DomainSpec:
    """Slots ``[first, first + count)`` under one switch or torus."""

    name: str
    """Unique within the rack (``"nvlink0"``, ``"torus1"``)."""
    fabric: str
    """One of :data:`devices.fabrics.DOMAIN_FABRICS`."""
    first: int
    """Index of the first slot."""
    count: int
    """Number of slots, positive."""
    shape: tuple[int, ...] | None = None
    """Torus dimensions for ``neuronlink-torus`` (product == count), e.g. (4, 4); None elsewhere."""
    link_bandwidth: float | None = None
    """Bytes/s per direction per slot; None: the fabric's or the chips' figure (see :meth:`RackSpec.link_bandwidth`)."""
    latency: float | None = None
    """Seconds per hop; None: the fabric's sourced default."""
    in_switch_reduction: bool = False
    """True when the switch reduces in the network (NVLS / NVLink SHARP)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name: a domain needs a non-empty name, got {self.name!r}")
        fabric_name = self.fabric.strip().lower() if isinstance(self.fabric, str) else self.fabric
        if fabric_name not in DOMAIN_FABRICS:
            raise ValueError(f"fabric: unknown domain fabric {self.fabric!r} (domain {self.name!r}); "
                             f"accepted: {', '.join(DOMAIN_FABRICS)}")
        object.__setattr__(self, "fabric", fabric_name)
        _non_negative_int(self.first, "first")
        _positive_int(self.count, "count")
        if self.shape is not None:
            if fabric_name != "neuronlink-torus":
                raise ValueError(f"shape: only a neuronlink-torus domain has a shape (domain {self.name!r} is "
                                 f"{fabric_name}); accepted: omit shape")
            shape = tuple(self.shape) if isinstance(self.shape, (list, tuple)) else None
            if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
                raise ValueError(f"shape: expected a list of positive integers, got {self.shape!r}")
            if math.prod(shape) != self.count:
                raise ValueError(f"shape: torus shape {list(shape)} holds {math.prod(shape)} slots but domain "
                                 f"{self.name!r} has {self.count}")
            object.__setattr__(self, "shape", shape)
        if self.link_bandwidth is not None:
            object.__setattr__(self, "link_bandwidth", _positive_number(self.link_bandwidth, "link_bandwidth"))
        if self.latency is not None:
            object.__setattr__(self, "latency", _non_negative_number(self.latency, "latency"))
        if not isinstance(self.in_switch_reduction, bool):
            raise ValueError(f"in_switch_reduction: expected true or false, got {self.in_switch_reduction!r}")

    @property
    def stop(self) -> int:
        """One past the last slot index."""
        return self.first + self.count


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """The scale-out network joining domains (and replicas)."""

    fabric: str
    """One of :data:`devices.fabrics.NETWORK_FABRICS`."""
    bandwidth: float
    """Bytes/s per direction per slot."""
    latency: float
    """Seconds per hop."""

    def __post_init__(self) -> None:
        fabric_name = self.fabric.strip().lower() if isinstance(self.fabric, str) else self.fabric
        if fabric_name not in NETWORK_FABRICS:
            raise ValueError(f"fabric: unknown network fabric {self.fabric!r}; accepted: {', '.join(NETWORK_FABRICS)}")
        object.__setattr__(self, "fabric", fabric_name)
        object.__setattr__(self, "bandwidth", _positive_number(self.bandwidth, "bandwidth"))
        object.__setattr__(self, "latency", _non_negative_number(self.latency, "latency"))


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot, built on demand by :meth:`RackSpec.slot`."""

    index: int
    """Global slot (device) index."""
    kind: str
    """Chip kind."""
    capacity: int
    """Bytes of device memory (the override, else the chip's HBM)."""
    backing: Backing
    """``auto``, ``emulated`` or ``cuda:N``, parsed."""
    domain: str
    """Domain name; with replicas > 1 it is ``"<name>@<replica>"`` so names stay unique across replicas."""
    replica: int = 0
    """Which copy of the rack the slot is in."""


@dataclass(frozen=True, slots=True)
class RackSpec:
    """A validated rack: slot groups, domains covering every slot exactly once, a network, replicas."""

    name: str
    """Display name (the preset or file's name, or the spec string)."""
    groups: tuple[SlotGroup, ...]
    """Slot runs in index order, contiguous from slot 0."""
    domains: tuple[DomainSpec, ...]
    """Domains in index order; together they cover every slot exactly once."""
    network: NetworkSpec | None
    """What joins the domains and the replicas (None only for a single-domain, single-replica rack)."""
    source: str
    """Where the spec came from: ``"spec 'trn3:2+h100:2'"``, ``"preset fusion-default"``, ``"file rack.toml"``."""
    replicas: int = 1
    """The whole rack repeated this many times, joined by :attr:`network`."""
    _group_firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _domain_firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)
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
        domains = tuple(sorted(self.domains, key=lambda d: d.first))
        if not domains:
            raise ValueError("domains: a rack needs at least one domain")
        names: set[str] = set()
        covered = 0
        previous: DomainSpec | None = None
        for domain in domains:
            if not isinstance(domain, DomainSpec):
                raise ValueError(f"domains: expected DomainSpec entries, got {domain!r}")
            if domain.name in names:
                raise ValueError(f"domains: domain name {domain.name!r} is used twice; names must be unique")
            names.add(domain.name)
            if domain.first < covered:
                raise ValueError(f"domains: domain {domain.name!r} (slots {domain.first}-{domain.stop - 1}) overlaps "
                                 f"domain {previous.name!r} (slots {previous.first}-{previous.stop - 1})")
            if domain.first > covered:
                raise ValueError(f"domains: slots {covered}-{domain.first - 1} are in no domain; every slot "
                                 f"0-{width - 1} must be in exactly one")
            covered = domain.stop
            previous = domain
        if covered != width:
            if covered > width:
                raise ValueError(f"domains: domain {previous.name!r} reaches slot {covered - 1} but the rack has "
                                 f"only {width} slots (0-{width - 1})")
            raise ValueError(f"domains: slots {covered}-{width - 1} are in no domain; every slot "
                             f"0-{width - 1} must be in exactly one")
        self._check_members(groups, domains)
        if self.network is not None and not isinstance(self.network, NetworkSpec):
            raise ValueError(f"network: expected a NetworkSpec or None, got {self.network!r}")
        _positive_int(self.replicas, "replicas")
        if self.network is None and (self.replicas > 1 or len(domains) > 1):
            raise ValueError("network: a rack with several domains or replicas needs a network to join them")
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "domains", domains)
        object.__setattr__(self, "_group_firsts", tuple(g.first for g in groups))
        object.__setattr__(self, "_domain_firsts", tuple(d.first for d in domains))
        object.__setattr__(self, "_width", width)

    @staticmethod
    def _check_members(groups: tuple[SlotGroup, ...], domains: tuple[DomainSpec, ...]) -> None:
        # An H100 cannot sit on a NeuronSwitch: catch such layouts here rather
        # than as nonsense costs later.
        for domain in domains:
            spec = fabric(domain.fabric)
            for group in groups:
                if group.stop <= domain.first or group.first >= domain.stop:
                    continue
                if not spec.accepts(chip(group.kind)):
                    allowed = {"nvidia": "NVIDIA GPUs", "trainium": "Trainium chips",
                               "fusion": "Trainium4 and NVIDIA GPUs", "any": "any chip"}[spec.members]
                    raise ValueError(f"domains: domain {domain.name!r} is {domain.fabric} but holds {group.kind} "
                                     f"slots; {domain.fabric} accepts {allowed}")

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
        return self.domains[bisect_right(self._domain_firsts, local) - 1]

    def slot(self, index: int) -> Slot:
        """Slot ``index``, built on demand (IndexError outside ``0 .. len(self) - 1``)."""
        replica, local = self._locate(index)
        group = self.groups[bisect_right(self._group_firsts, local) - 1]
        domain = self.domains[bisect_right(self._domain_firsts, local) - 1]
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

        The domain's own value when set, else the fabric's (PCIe), else the
        slowest member chip's scale-up bandwidth: a collective inside the
        domain moves at the pace of its slowest port.
        """
        if domain.link_bandwidth is not None:
            for known in (TRN2_INSTANCE_LINK, PCIE_GEN5_X16):
                # Specs store plain numbers (TOML); recover the provenance of
                # the sourced values the default layouts and presets use.
                if known.value == domain.link_bandwidth:
                    return known
            return Figure(domain.link_bandwidth, "B/s", f"rack spec ({self.source}), domain {domain.name!r}",
                          "secondary", "set by the rack spec")
        spec = fabric(domain.fabric)
        if spec.bandwidth is not None:
            return spec.bandwidth
        members = {g.kind for g in self.groups if g.first < domain.stop and g.stop > domain.first}
        return min((chip(k).scale_up_bandwidth for k in members), key=lambda f: f.value)

    def link_bandwidth(self, domain: DomainSpec) -> float:
        """Bytes/s per direction per slot inside ``domain`` (see :meth:`link_bandwidth_figure`)."""
        return self.link_bandwidth_figure(domain).value

    def latency_figure(self, domain: DomainSpec) -> Figure:
        """Seconds per hop inside ``domain``: its own value, else the fabric's sourced default."""
        default = fabric(domain.fabric).latency
        if domain.latency is None or domain.latency == default.value:
            return default
        return Figure(domain.latency, "s", f"rack spec ({self.source}), domain {domain.name!r}", "secondary",
                      "set by the rack spec")

    def latency(self, domain: DomainSpec) -> float:
        """Seconds per hop inside ``domain`` (see :meth:`latency_figure`)."""
        return self.latency_figure(domain).value

    def network_figures(self) -> dict[str, Figure]:
        """The network's bandwidth and latency as sourced figures (empty without a network)."""
        if self.network is None:
            return {}
        latency = fabric(self.network.fabric).latency
        if latency.value != self.network.latency:
            latency = Figure(self.network.latency, "s", f"rack spec ({self.source})", "secondary",
                             "set by the rack spec")
        bandwidth = next((fig for fig in (network_bandwidth(k) for k in self.counts())
                          if fig.value == self.network.bandwidth), None)
        if bandwidth is None:
            bandwidth = Figure(self.network.bandwidth, "B/s", f"rack spec ({self.source})", "secondary",
                               "set by the rack spec")
        return {"bandwidth": bandwidth, "latency": latency}

    # -- construction -------------------------------------------------------

    def with_replicas(self, replicas: int) -> RackSpec:
        """This rack repeated ``replicas`` times (the count multiplies any existing replicas)."""
        _positive_int(replicas, "replicas")
        return replace(self, name=f"{self.name}*{replicas}", replicas=self.replicas * replicas,
                       source=f"{self.source}, replicated x{replicas}")

    def describe(self) -> str:
        """One line: size, kinds, domains and network."""
        kinds = ", ".join(f"{n} {k}" for k, n in self.counts().items())
        fabrics_used = sorted({d.fabric for d in self.domains})
        per = f"{len(self.domains)} domain{'s' if len(self.domains) != 1 else ''} ({', '.join(fabrics_used)})"
        if self.replicas > 1:
            per += f" per replica x{self.replicas}"
        net = f", network {self.network.fabric}" if self.network else ""
        return f"{self.name}: {len(self)} slots ({kinds}), {per}{net}"

    def to_toml(self) -> str:
        """The rack as a TOML rack file that :meth:`from_toml_text` reads back to an equal spec."""
        from devices.rack_toml import dumps

        return dumps(self)

    @classmethod
    def parse(cls, spec: str | os.PathLike) -> RackSpec:
        """A rack from a preset name, ``"kind:count+kind:count"``, ``"<spec>*N"`` or a ``.toml`` path."""
        from devices.rack_parse import parse

        return parse(spec)

    @classmethod
    def preset(cls, name: str) -> RackSpec:
        """A named preset (see :func:`devices.presets`); ValueError listing them for an unknown name."""
        from devices.rack_parse import load_preset

        return load_preset(name)

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> RackSpec:
        """A rack from a TOML rack file."""
        from devices.rack_toml import load

        return load(path)

    @classmethod
    def from_toml_text(cls, text: str, source: str = "toml text") -> RackSpec:
        """A rack from TOML rack-file text."""
        from devices.rack_toml import loads

        return loads(text, source=source)
