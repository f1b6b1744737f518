"""The parts of a rack spec: runs of identical slots, domains, the network, and one slot.

A rack is described by runs of identical slots (:class:`SlotGroup`) and
contiguous slot ranges under one switch or torus (:class:`DomainSpec`), joined
by a scale-out :class:`NetworkSpec`; :class:`devices.rack.spec.RackSpec`
assembles and validates them.  Every part checks its own fields, so a bad
value fails where it is built, naming the field.

Layering (each module imports only the ones before it): this module, then
:mod:`devices.rack.spec` (the assembled rack), :mod:`devices.rack.layout`
(default domains and network), :mod:`devices.rack.toml_file` (rack files) and
:mod:`devices.rack.parse` (spec strings and presets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from devices.backing import AUTO, Backing
from devices.chip import chip
from devices.fabrics import DOMAIN_FABRICS, NETWORK_FABRICS
from devices.figure import Figure

INT64_MAX = 2**63 - 1
"""Largest slot capacity in bytes and largest slot count a rack spec may hold: both are int64 where they end up
(the allocator's byte counters, torch's sizes), and Python's ``len()`` is bounded by it too."""
INT64_MAX_TEXT = f"2^63-1 ({INT64_MAX})"


def _positive_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return value


def check_int64(value: int, where: str, what: str) -> int:
    """``value`` if it is at most :data:`INT64_MAX`, else ValueError naming ``where`` and saying what it was."""
    if value > INT64_MAX:
        raise ValueError(f"{where}: {what} is {value}, more than the {INT64_MAX_TEXT} a rack can hold")
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


def _number_or_figure(value: object, unit: str, where: str, positive: bool) -> tuple[float, Figure | None]:
    # A sourced Figure keeps its provenance; a plain number (a rack file's) has none of its own.
    if isinstance(value, Figure):
        if value.unit != unit:
            raise ValueError(f"{where}: expected a figure in {unit}, got one in {value.unit!r}")
        number, figure = value.value, value
    else:
        number, figure = value, None
    check = _positive_number if positive else _non_negative_number
    return check(number, where), figure


def _source(value: float | None, source: Figure | None) -> Figure | None:
    # A source describes its own value only: a number replaced without its figure has lost it.
    return source if source is not None and value is not None and source.value == value else None


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
            check_int64(self.capacity, "capacity", "the slot capacity in bytes")
        check_int64(self.first + self.count, "count", "the slot count up to this group")
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
    """Bytes/s per direction per slot (a number, or a sourced :class:`~devices.figure.Figure`, stored as its value);
    None: the fabric's or the chips' figure (see :meth:`devices.rack.spec.RackSpec.link_bandwidth_figure`)."""
    latency: float | None = None
    """Seconds per hop (a number or a Figure, stored as its value); None: the fabric's sourced default."""
    in_switch_reduction: bool = False
    """True when the switch reduces in the network (NVLS / NVLink SHARP)."""
    link_source: Figure | None = field(default=None, compare=False, repr=False)
    """The figure :attr:`link_bandwidth` came from, when it was given as one (the default layouts do)."""
    latency_source: Figure | None = field(default=None, compare=False, repr=False)
    """The figure :attr:`latency` came from, when it was given as one."""

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
            value, figure = _number_or_figure(self.link_bandwidth, "B/s", "link_bandwidth", positive=True)
            object.__setattr__(self, "link_bandwidth", value)
            object.__setattr__(self, "link_source", figure or self.link_source)
        object.__setattr__(self, "link_source", _source(self.link_bandwidth, self.link_source))
        if self.latency is not None:
            value, figure = _number_or_figure(self.latency, "s", "latency", positive=False)
            object.__setattr__(self, "latency", value)
            object.__setattr__(self, "latency_source", figure or self.latency_source)
        object.__setattr__(self, "latency_source", _source(self.latency, self.latency_source))
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
    """Bytes/s per direction per slot (a number, or a sourced Figure, stored as its value)."""
    latency: float
    """Seconds per hop (a number or a Figure, stored as its value)."""
    bandwidth_source: Figure | None = field(default=None, compare=False, repr=False)
    """The figure :attr:`bandwidth` came from, when it was given as one (the default network does)."""
    latency_source: Figure | None = field(default=None, compare=False, repr=False)
    """The figure :attr:`latency` came from, when it was given as one."""

    def __post_init__(self) -> None:
        fabric_name = self.fabric.strip().lower() if isinstance(self.fabric, str) else self.fabric
        if fabric_name not in NETWORK_FABRICS:
            raise ValueError(f"fabric: unknown network fabric {self.fabric!r}; accepted: {', '.join(NETWORK_FABRICS)}")
        object.__setattr__(self, "fabric", fabric_name)
        value, figure = _number_or_figure(self.bandwidth, "B/s", "bandwidth", positive=True)
        object.__setattr__(self, "bandwidth", value)
        object.__setattr__(self, "bandwidth_source", _source(value, figure or self.bandwidth_source))
        value, figure = _number_or_figure(self.latency, "s", "latency", positive=False)
        object.__setattr__(self, "latency", value)
        object.__setattr__(self, "latency_source", _source(value, figure or self.latency_source))


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot, built on demand by :meth:`devices.rack.spec.RackSpec.slot`."""

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
