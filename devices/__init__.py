"""The device catalogue and rack specs of hybrid-interop (pure Python, no torch).

* :func:`chip`, :func:`kinds`, :func:`catalogue`: chip records, one file per
  kind under ``devices/chips/``, every figure a sourced :class:`Figure`.
* :func:`parse_rack`, :func:`presets`, :class:`RackSpec`: racks from
  ``"kind:count+kind:count"`` strings, presets, TOML files, and ``*N`` replicas.
* :func:`parse_size` and friends: the units rack specs are written in.
* :func:`dtype_name`, :data:`DTYPE_NAMES`, :func:`itemsize`: the one dtype
  vocabulary (torch's names: ``float32``, ``bfloat16``, ``float8_e4m3fn``...).
* :func:`catalogue_rows`, :func:`presets_rows`: rows for listings.

Nothing here reads the environment or imports torch; importing the package
loads no chip until one is asked for.  ``devices.chip`` is the lookup function
of the contract; the module of the same name is reached with
``from devices.chip import Chip``.
"""

from __future__ import annotations

import os

from devices.catalogue_table import catalogue_rows, format_table, presets_rows
from devices.chip import Chip, catalogue, chip, kinds
from devices.dtypes import DTYPE_NAMES, dtype_name, itemsize
from devices.fabrics import DOMAIN_FABRICS, NETWORK_FABRICS, Fabric, fabric, network_bandwidth
from devices.figure import STATUSES, UNITS, Figure
from devices.rack import BACKINGS, DomainSpec, NetworkSpec, RackSpec, Slot, SlotGroup
from devices.rack_parse import DEFAULT_PRESET, default_domains, default_network
from devices.rack_parse import presets as _presets
from devices.units import format_value, parse_bandwidth, parse_duration, parse_size


def estimate(kind, op, shapes, dtype, **kwargs):
    """Modelled cost of one op on one chip kind; see :func:`devices.cost.estimate`."""
    from devices.cost import estimate as _estimate

    return _estimate(kind, op, shapes, dtype, **kwargs)


def parse_rack(spec: str | os.PathLike | RackSpec) -> RackSpec:
    """A rack from a preset name, ``"kind:count+kind:count"``, a ``.toml`` path, or any of them with ``*N``.

    Every malformed spec raises ValueError naming the field and the accepted values.
    """
    from devices.rack_parse import parse

    return parse(spec)


def presets() -> dict[str, str]:
    """Preset name -> one-line description, the embedded default (``fusion-default``) first."""
    return _presets()


__all__ = [
    "BACKINGS", "DEFAULT_PRESET", "DOMAIN_FABRICS", "DTYPE_NAMES", "NETWORK_FABRICS", "STATUSES", "UNITS",
    "Chip", "DomainSpec", "Fabric", "Figure", "NetworkSpec", "RackSpec", "Slot", "SlotGroup",
    "catalogue", "catalogue_rows", "chip", "estimate", "default_domains", "default_network", "dtype_name", "fabric",
    "format_table", "format_value", "itemsize", "kinds", "network_bandwidth", "parse_bandwidth", "parse_duration",
    "parse_rack", "parse_size", "presets", "presets_rows",
]
