"""Rows for listings (``hybrid racks``): every catalogue and fabric figure with its unit, source and status, and the presets.

Rows are plain dicts of strings (plus the raw value), so a CLI, a test or a
notebook can print them without knowing the dataclasses.
"""

from __future__ import annotations

from devices import fabrics
from devices.chip import FIELD_UNITS, catalogue, chip
from devices.figure import Figure
from devices.rack.parse import load_preset, presets
from devices.text_table import table
from devices.units import format_value

CATALOGUE_COLUMNS: tuple[str, ...] = ("kind", "name", "figure", "value", "unit", "display", "status", "source", "note")
"""Keys of each :func:`catalogue_rows` row, in display order."""

FABRIC_COLUMNS: tuple[str, ...] = ("subject", "figure", "value", "unit", "display", "status", "source", "note")
"""Keys of each :func:`fabric_rows` row, in display order."""

PRESET_COLUMNS: tuple[str, ...] = ("name", "slots", "kinds", "domains", "network", "description")
"""Keys of each :func:`presets_rows` row, in display order."""



def catalogue_rows(kinds: list[str] | None = None) -> list[dict]:
    """One row per chip figure: kind, name, figure (``"peak.bfloat16"``...), value, unit, display, status, source, note.

    A figure the catalogue leaves unset (no power or price was found) gets a
    row too, with value None, display ``"-"``, status ``"unset"`` and the
    chip's reason as its source, so the listing shows what is missing and why.
    """
    chips = catalogue()
    rows: list[dict] = []
    for kind in (sorted(chips) if kinds is None else kinds):
        member = chips[kind] if kind in chips else chip(kind)  # chip() raises listing the accepted kinds
        for field_name, fig in member.figures().items():
            if fig is None:
                unit = "USD/h" if field_name.startswith("price.") else FIELD_UNITS.get(field_name, "")
                rows.append({"kind": member.kind, "name": member.name, "figure": field_name, "value": None,
                             "unit": unit, "display": "-", "status": "unset",
                             "source": member.missing(field_name), "note": ""})
                continue
            rows.append({"kind": member.kind, "name": member.name, "figure": field_name, "value": fig.value,
                         "unit": fig.unit, "display": format_value(fig.value, fig.unit), "status": fig.status,
                         "source": fig.source, "note": fig.note})
    return rows


def _figure_row(subject: str, name: str, fig: Figure) -> dict:
    return {"subject": subject, "figure": name, "value": fig.value, "unit": fig.unit,
            "display": format_value(fig.value, fig.unit) if fig.unit else f"{fig.value:g}", "status": fig.status,
            "source": fig.source, "note": fig.note}


def fabric_rows(kinds: list[str] | None = None) -> list[dict]:
    """One row per fabric figure: subject, figure, value, unit, display, status, source, note.

    The fabrics' hop latencies and bandwidths, the sizes the default layout
    builds domains of, and each kind's scale-out share of its instance's
    network (only ``kinds``' shares when given).
    """
    rows = []
    for name, spec in fabrics.fabrics().items():
        rows.append(_figure_row(f"fabric {name}", "latency", spec.latency))
        if spec.bandwidth is not None:
            rows.append(_figure_row(f"fabric {name}", "bandwidth", spec.bandwidth))
    rows.append(_figure_row("fabric nvlink", "nvls_base_latency", fabrics.NVLS_BASE_LATENCY))
    for name in ("NVLINK_MAX_DOMAIN", "NVLINK3_MAX_DOMAIN", "TRN1_INSTANCE_CHIPS", "TRN2_INSTANCE_CHIPS",
                 "TRN3_ULTRASERVER_CHIPS", "TRN2_INSTANCE_LINK", "TRN1N_INSTANCE_LINK", "TRN1N_NETWORK", "TRN1_ULTRACLUSTER_CHIPS"):
        rows.append(_figure_row("default layout", name.lower(), getattr(fabrics, name)))
    for kind in (sorted(catalogue()) if kinds is None else [chip(k).kind for k in kinds]):
        rows.append(_figure_row(f"network {kind}", "bandwidth_per_slot", fabrics.network_bandwidth(kind)))
    return rows


def presets_rows() -> list[dict]:
    """One row per preset: name, slots, kinds (``"4 trn4, 4 b200"``), domains, network, description."""
    rows = []
    for name, description in presets().items():
        rack = load_preset(name)
        domains = ", ".join(
            f"{d.name} {d.fabric}" + (f" {'x'.join(map(str, d.shape))}" if d.shape else "")
            + (" +reduction" if d.in_switch_reduction else "") for d in rack.domains)
        network = "-" if rack.network is None else (
            f"{rack.network.fabric} {format_value(rack.network.bandwidth, 'B/s')}/slot")
        rows.append({"name": name, "slots": str(len(rack)),
                     "kinds": ", ".join(f"{n} {k}" for k, n in rack.counts().items()),
                     "domains": domains, "network": network, "description": description})
    return rows


def format_table(rows: list[dict], columns: tuple[str, ...] | list[str]) -> str:
    """Rows (dicts) as a plain aligned text table, one line per row; a missing value prints as ``-``."""
    return table(list(columns), [["-" if r.get(c) is None else r.get(c) for c in columns] for r in rows],
                 align="l" * len(columns), rule=False)
