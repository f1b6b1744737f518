"""NeuronCores per Trainium chip: what a Neuron configuration's degrees count.

The Neuron stack's tensor-, pipeline- and data-parallel degrees count
NeuronCores (each core is a rank), while the catalogue, the racks and the step
model count chips. :func:`ranks_per_chip` gives how many ranks one chip holds:
Trn1 has 2 NeuronCore-v2 per chip; Trn2 and Trn3 have 8 physical cores that
the Logical NeuronCore setting (LNC, default 2) groups into 4 ranks (LNC=1: 8).
Trn4 is projected from Trn3.
"""

from __future__ import annotations

from devices.chip import chip
from devices.figure import Figure
from devices.sources import NEURON_LNC, TRAINIUM3_DOCS, TRAINIUM_DOCS

NEURON_CORES: dict[str, Figure] = {
    "trn1": Figure(2, "", TRAINIUM_DOCS.cite("2 NeuronCore-v2 per chip"), "published",
                   "32 NeuronCores per trn1.32xlarge of 16 chips"),
    "trn2": Figure(8, "", NEURON_LNC.cite("8 physical NeuronCore-v3 per Trainium2"), "published"),
    "trn3": Figure(8, "", TRAINIUM3_DOCS.cite("8 NeuronCore-v4 per Trainium3"), "published"),
}
"""Physical NeuronCores per chip, by kind (Trn4: :func:`cores_per_chip` projects Trn3's)."""

LNC_DEFAULT = Figure(2, "", NEURON_LNC.cite("LNC=2 is the default on Trn2"), "published",
                     "one logical NeuronCore (a rank) is 2 physical cores; taken for Trn3 too (LNC applies to Trn2 "
                     "and Trn3)")
"""Physical cores per logical NeuronCore unless a configuration says otherwise (Trn2, Trn3, Trn4)."""

LNC_KINDS = ("trn2", "trn3", "trn4")
"""Kinds whose NeuronCores the Logical NeuronCore setting groups (not Trn1)."""


def cores_per_chip(kind: str) -> Figure:
    """Physical NeuronCores per chip of a Trainium kind (a sourced figure; Trn4's is projected from Trn3's)."""
    member = chip(kind)
    if member.family != "trainium":
        raise ValueError(f"kind: {member.kind} is not a Trainium kind; NeuronCores exist on "
                         f"{', '.join(sorted(NEURON_CORES))}, trn4")
    if member.kind in NEURON_CORES:
        return NEURON_CORES[member.kind]
    return NEURON_CORES["trn3"].derive(1.0, "assumed: Trainium4 keeps Trainium3's 8 NeuronCores per chip",
                                       source="Trn4 projection")


def ranks_per_chip(kind: str, lnc: int | None = None) -> int:
    """Neuron ranks (logical NeuronCores) one chip holds: Trn1 2; Trn2/Trn3/Trn4 8 / ``lnc`` (default 2)."""
    cores = int(cores_per_chip(kind).value)
    if chip(kind).kind not in LNC_KINDS:
        if lnc not in (None, 1):
            raise ValueError(f"lnc: the Logical NeuronCore setting applies to {', '.join(LNC_KINDS)}, not {kind}; "
                             f"omit it")
        return cores
    lnc = int(LNC_DEFAULT.value) if lnc is None else lnc
    if isinstance(lnc, bool) or not isinstance(lnc, int) or lnc < 1 or cores % lnc:
        raise ValueError(f"lnc: expected 1 or 2 (physical cores per logical NeuronCore), got {lnc!r}")
    return cores // lnc


__all__ = ["LNC_DEFAULT", "LNC_KINDS", "NEURON_CORES", "cores_per_chip", "ranks_per_chip"]
