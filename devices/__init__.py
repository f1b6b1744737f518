"""The device catalogue and rack specs of hybrid-interop (pure Python, no torch).

* :func:`chip`, :func:`kinds`, :func:`catalogue`: chip records, one file per
  kind under ``devices/chips/``, every figure a sourced :class:`Figure`.
* :func:`parse_rack`, :func:`presets`, :class:`RackSpec`: racks from
  ``"kind:count+kind:count"`` strings, presets, TOML files, and ``*N`` replicas;
  :func:`load_preset`, :func:`load_rack`, :func:`loads_rack`, :func:`dumps_rack`
  for one form in particular.
* :func:`capabilities`: what each kind computes in, per op class and dtype,
  in the same file as its chip, ``devices/chips/<kind>.py`` (:mod:`devices.capability`).
* :func:`parse_size` and friends: the units rack specs are written in.
* :func:`dtype_name`, :func:`dtype_label`, :data:`DTYPE_NAMES`, :func:`itemsize`: the one dtype
  vocabulary (torch's names: ``float32``, ``bfloat16``, ``float8_e4m3fn``...).
* :func:`catalogue_rows`, :func:`fabric_rows`, :func:`presets_rows`: rows for
  listings, every figure with its source (the documents: ``devices/SOURCES.md``).
* :class:`ChipSet`: a set of chips as a whole (peak, board power, price per hour
  on one of :data:`PRICE_BASES`, MFU, cost and energy per token), each missing
  figure with its reason (:mod:`devices.chip_set`); NeuronCores per Trainium chip
  in :mod:`devices.neuron`.

Nothing here reads the environment or imports torch; importing the package
loads no chip until one is asked for.  ``devices.chip`` is the lookup function
of the contract; the module of the same name is reached with
``from devices.chip import Chip``.
"""

from __future__ import annotations

import os

from devices.backing import BACKINGS, Backing
from devices.capability import (
    LEVELS, OP_CLASSES, Capabilities, CudaIdentity, Rule, Support, capabilities, capability_kinds, op_class,
)
from devices.catalogue_table import catalogue_rows, fabric_rows, format_table, presets_rows
from devices.chip import PRICE_BASES, Chip, catalogue, chip, kinds
from devices.chip_set import DEFAULT_BASIS, ChipSet, Economics, Rate
from devices.dtypes import DTYPE_NAMES, dtype_label, dtype_name, itemsize
from devices.fabrics import DOMAIN_FABRICS, NETWORK_FABRICS, Fabric, fabric, network_bandwidth
from devices.figure import STATUSES, UNITS, Figure
from devices.rack.domain_table import DomainRun, DomainTable
from devices.rack.parts import INT64_MAX, DomainSpec, NetworkSpec, Slot, SlotGroup
from devices.rack.layout import default_domains, default_network
from devices.rack.numerics import NUMERICS_MODES, NumericsSpec
from devices.rack.parse import DEFAULT_PRESET, load_preset
from devices.rack.parse import presets as _presets
from devices.rack.spec import RackSpec
from devices.rack.toml_file import dumps as _dumps, load as load_rack, loads as _loads
from devices.text_table import table
from devices.units import format_bytes, format_value, parse_bandwidth, parse_duration, parse_size


def estimate(kind, op, shapes, dtype, **kwargs):
    """Modelled cost of one op on one chip kind; see :func:`devices.cost.estimate`."""
    from devices.cost import estimate as _estimate

    return _estimate(kind, op, shapes, dtype, **kwargs)


def parse_rack(spec: str | os.PathLike | RackSpec) -> RackSpec:
    """A rack from a preset name, ``"kind:count+kind:count"``, a ``.toml`` path, or any of them with ``*N``.

    Every malformed spec raises ValueError naming the field and the accepted values.  Parsing costs the
    same for ``"trn2:100000000"`` as for ``"trn2:16"``: nothing is built per slot or per domain.
    """
    from devices.rack.parse import parse

    return parse(spec)


def loads_rack(text: str, source: str = "toml text") -> RackSpec:
    """A rack from the text of a TOML rack file (``source`` names it in errors; format: :mod:`devices.rack.toml_file`)."""
    return _loads(text, source=source)


def dumps_rack(rack: RackSpec, description: str = "") -> str:
    """A TOML rack file for ``rack`` that :func:`loads_rack` reads back to an equal spec."""
    return _dumps(rack, description)


def presets() -> dict[str, str]:
    """Preset name -> one-line description, the embedded default (``fusion-default``) first."""
    return _presets()


__all__ = [
    "NUMERICS_MODES", "NumericsSpec",
    "LEVELS", "OP_CLASSES", "Capabilities", "CudaIdentity", "Rule", "Support", "capabilities", "capability_kinds",
    "op_class",
    "PRICE_BASES", "DEFAULT_BASIS", "ChipSet", "Economics", "Rate",
    "BACKINGS", "Backing", "DEFAULT_PRESET", "DOMAIN_FABRICS", "DTYPE_NAMES", "INT64_MAX", "NETWORK_FABRICS",
    "STATUSES", "UNITS", "Chip", "DomainRun", "DomainSpec", "DomainTable", "Fabric", "Figure", "NetworkSpec", "RackSpec", "Slot",
    "SlotGroup", "catalogue", "catalogue_rows", "chip", "estimate", "default_domains", "default_network",
    "dtype_label", "dtype_name", "dumps_rack", "fabric", "fabric_rows", "format_bytes", "format_table", "format_value", "table", "itemsize", "kinds", "load_preset",
    "load_rack", "loads_rack", "network_bandwidth", "parse_bandwidth", "parse_duration", "parse_rack", "parse_size",
    "presets", "presets_rows",
]
