"""The default layout of a rack: slot groups from runs of chips, the domains they form, the network joining them.

Applied to kind counts (``"trn3:4+h100:4"``) and to rack files without
``[[domains]]`` or ``[network]``; slots keep the order they were given in:

1. If any Trainium4 is present, the Trainium4 and every Hopper or Blackwell
   GPU form one ``nvlink-fusion`` domain (Trn4's NVLink Fusion port joins
   NVIDIA's switch).  Those slots must be adjacent, since a domain is a
   contiguous slot range.
2. Otherwise each contiguous run of Hopper and Blackwell GPUs forms one
   ``nvlink`` domain, with in-switch reduction on (NVLS exists on their
   NVSwitch generations).  A100s (NVLink 3) never join NVLink Fusion and form
   ``nvlink`` domains of their own, without in-switch reduction.
3. NVLink and NVLink Fusion domains hold at most 576 GPUs (NVLink's
   published largest domain), NVLink 3 domains 16 A100s; longer runs are
   split.
4. Trainium2 (NeuronLink-v3): a 4x4 ``neuronlink-torus`` per 16 chips, one
   trn2.48xlarge each, at the in-instance 1,024 GB/s per chip (512 GB/s per
   direction); a remainder r < 16 forms a ring, shape (r,).  The 4x4x4
   UltraServer torus is the ``trn2-ultraserver`` preset, not a default.
5. Trainium (Trn1, NeuronLink-v2): a 4x4 torus (the 2D torus of a
   trn1.32xlarge; the 4D hypercube older pages name is the same graph) per
   16 chips; a remainder forms a ring.
6. Trainium3 (NeuronLink-v4): a ``neuronswitch`` domain per 144 chips (one
   Gen2 UltraServer); a remainder forms a smaller one.
7. Domains are joined by the network of :func:`default_network`: EFA when any
   Trainium is present, InfiniBand otherwise, at the per-slot bandwidth of the
   slowest chip's scale-out share, with NCCL's network hop latency.

Identical domains in a row are one :class:`~devices.rack.domain_table.DomainRun`,
so the layout of ``"trn2:100000000"`` is two objects, not 6,250,000.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from devices.chip import chip
from devices.rack.domain_table import DomainRun, DomainTable
from devices.fabrics import (NVLINK3_MAX_DOMAIN, NVLINK_MAX_DOMAIN, TRN1_INSTANCE_CHIPS, TRN2_INSTANCE_CHIPS,
                             TRN2_INSTANCE_LINK, TRN3_ULTRASERVER_CHIPS, default_network_fabric,
                             fabric as fabric_defaults, network_bandwidth)
from devices.figure import Figure
from devices.rack.parts import DomainSpec, NetworkSpec, SlotGroup

_PREFIX = {"nvlink-fusion": "fusion", "nvlink": "nvlink", "neuronlink-torus": "torus",
           "neuronswitch": "switch", "pcie": "pcie"}


def build_groups(runs: Iterable[tuple[str, int, int | None, str]]) -> tuple[SlotGroup, ...]:
    """Slot groups from ``(kind, count, capacity, backing)`` runs, merging adjacent identical runs."""
    merged: list[list] = []
    for kind, count, capacity, backing in runs:
        if merged and merged[-1][0] == kind and merged[-1][2] == capacity and merged[-1][3] == backing:
            merged[-1][1] += count
        else:
            merged.append([kind, count, capacity, backing])
    groups: list[SlotGroup] = []
    first = 0
    for kind, count, capacity, backing in merged:
        groups.append(SlotGroup(kind, count, first, capacity, backing))
        first += count
    return tuple(groups)


def _domain_class(kind: str, fusion: bool) -> str:
    member = chip(kind)
    if member.scale_up_fabric == "nvlink3":
        return "nvlink3"  # an A100 cannot join NVLink 5 / NVLink Fusion switches
    if member.scale_up_fabric == "nvlink-fusion" or (fusion and member.vendor == "nvidia"):
        return "nvlink-fusion"
    if member.vendor == "nvidia":
        return "nvlink"
    return member.scale_up_fabric  # neuronlink-v2 / -v3 / -v4


def _layout() -> dict[str, tuple[str, int, tuple[int, ...] | None, Figure | None, bool]]:
    nvlink_max = int(NVLINK_MAX_DOMAIN.value)
    return {
        # class: (fabric, chunk, full shape, link bandwidth, in-switch reduction)
        "nvlink-fusion": ("nvlink-fusion", nvlink_max, None, None, False),
        "nvlink": ("nvlink", nvlink_max, None, None, True),
        # No NVLS before third-generation NVSwitch (Hopper): A100 domains reduce on the GPUs.
        "nvlink3": ("nvlink", int(NVLINK3_MAX_DOMAIN.value), None, None, False),
        "neuronlink-v3": ("neuronlink-torus", int(TRN2_INSTANCE_CHIPS.value), (4, 4), TRN2_INSTANCE_LINK, False),
        "neuronlink-v2": ("neuronlink-torus", int(TRN1_INSTANCE_CHIPS.value), (4, 4), None, False),
        "neuronlink-v4": ("neuronswitch", int(TRN3_ULTRASERVER_CHIPS.value), None, None, False),
    }


def default_domains(groups: Sequence[SlotGroup]) -> DomainTable:
    """The documented default layout (module docstring, rules 1-6) for slot groups in index order."""
    fusion = any(chip(g.kind).scale_up_fabric == "nvlink-fusion" for g in groups)
    runs: list[list] = []  # [class, first, count]
    for group in groups:
        klass = _domain_class(group.kind, fusion)
        if runs and runs[-1][0] == klass:
            runs[-1][2] += group.count
        else:
            runs.append([klass, group.first, group.count])
    fusion_runs = [r for r in runs if r[0] == "nvlink-fusion"]
    if len(fusion_runs) > 1:
        spans = ", ".join(f"{first}-{first + count - 1}" for _, first, count in fusion_runs)
        raise ValueError(f"slots: Trainium4 and NVIDIA GPU slots share one nvlink-fusion domain, so they must be "
                         f"adjacent; they sit at slots {spans}. Reorder the spec (Trainium4 and GPUs together, "
                         f"e.g. 'trn4:4+b200:4+trn3:4') or give [[domains]] in a TOML file")
    layout = _layout()
    numbering: dict[str, int] = {}
    entries: list[DomainRun] = []

    def add(fabric_name: str, first: int, size: int, shape, link, reduction: bool, repeat: int) -> None:
        prefix = _PREFIX[fabric_name]
        number = numbering.get(prefix, 0)
        numbering[prefix] = number + repeat
        domain = DomainSpec(f"{prefix}{number}", fabric_name, first, size, shape=shape, link_bandwidth=link,
                            in_switch_reduction=reduction)
        entries.append(DomainRun(domain, repeat))

    for klass, first, count in runs:
        fabric_name, chunk, full_shape, link, reduction = layout[klass]
        full, rest = divmod(count, chunk)
        if full:
            add(fabric_name, first, chunk, full_shape, link, reduction, full)
        if rest:
            shape = (rest,) if fabric_name == "neuronlink-torus" else None
            add(fabric_name, first + full * chunk, rest, shape, link, reduction, 1)
    return DomainTable(entries)


def default_network(kinds: Iterable[str], fabric: str | None = None) -> NetworkSpec:
    """EFA if any Trainium is present else InfiniBand, at the slowest kind's per-slot scale-out bandwidth.

    The bandwidth and latency are the catalogue's sourced figures, so the network cites them.
    """
    present = sorted(set(kinds))
    if not present:
        raise ValueError("slots: a rack needs at least one slot")
    chosen = default_network_fabric(present) if fabric is None else fabric
    bandwidth = min((network_bandwidth(k) for k in present), key=lambda f: f.value)
    return NetworkSpec(chosen, bandwidth, fabric_defaults(chosen).latency)


__all__ = ["build_groups", "default_domains", "default_network"]
