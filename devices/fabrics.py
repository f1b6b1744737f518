"""Default latencies and bandwidths of the fabrics a rack spec can name, as sourced figures.

A :class:`~devices.rack.parts.DomainSpec` or :class:`~devices.rack.parts.NetworkSpec`
that leaves ``latency`` or a bandwidth unset gets it from here, so the cost
model can always cite where a link's numbers came from.  Per-chip scale-up
bandwidth lives on the chip (:attr:`devices.chip.Chip.scale_up_bandwidth`);
this table holds what belongs to the fabric or the instance instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from devices.chip import Chip, chip
from devices.figure import Figure
from devices.sources import (A100_PAGE, BCM_NVLINK, DGX_A100_GUIDE, DGX_GB_USER_GUIDE, H100_DATASHEET, HPCTECH_H100,
                             KLOCKWOOD_B300, NCCL_TESTS_119, NCCL_TUNING, NVLINK_FUSION_PAGE, TRN1_ARCH, TRN1_ARCH_2024, TRN2_ARCH,
                             TRN3_ARCH)

DOMAIN_FABRICS: tuple[str, ...] = ("nvlink-fusion", "nvlink", "neuronlink-torus", "neuronswitch", "pcie")
"""Accepted values of ``DomainSpec.fabric``."""

NETWORK_FABRICS: tuple[str, ...] = ("efa", "infiniband")
"""Accepted values of ``NetworkSpec.fabric``."""

_NCCL = NCCL_TUNING.cite("hop latencies")

NVLINK_HOP_LATENCY = Figure(
    0.6e-6, "s", _NCCL, "published",
    "NVLink hop, ring, LL protocol (the small-message alpha); LL128 1.9 us, Simple 3.4 us; base latency per "
    "collective 6.6 us (ring LL) comes on top; NCCL's tuning model, not a measurement")
NETWORK_HOP_LATENCY = Figure(
    2.7e-6, "s", _NCCL, "published",
    "network hop, ring, LL protocol; LL128 4.0 us, Simple 14 us; NCCL's tuning model, applied to EFA too")
PCIE_HOP_LATENCY = Figure(1.0e-6, "s", _NCCL, "published", "PCI hop, ring, LL protocol; LL128 2.5, Simple 5.7 us")
NVLS_BASE_LATENCY = Figure(
    25e-6, "s", _NCCL, "published", "NVLS (in-switch reduction) base latency per collective")
NEURON_HOP_LATENCY = NVLINK_HOP_LATENCY.derive(
    1.0, "assumed: no public NeuronLink/NeuronSwitch hop latency was found; NCCL's NVLink hop latency "
         "stands in for it", source="stand-in (no published figure)")
FUSION_HOP_LATENCY = NVLINK_HOP_LATENCY.derive(
    1.0, "assumed: NVLink Fusion rides NVLink switches, so the NVLink hop latency is used",
    source=NVLINK_FUSION_PAGE.cite("Trainium4 and NVIDIA GPUs on NVIDIA's NVLink switches"))

PCIE_GEN5_X16 = Figure(
    64e9, "B/s", f"{H100_DATASHEET.cite('PCIe Gen5 128 GB/s')}; {HPCTECH_H100.cite('PCIe Gen5 x16 128 GB/s')}",
    "secondary", "PCIe Gen5 x16: 128 GB/s is the bidirectional total; per direction = 64 GB/s")

TRN2_INSTANCE_LINK = Figure(
    512e9, "B/s", TRN2_ARCH.cite("trn2.48xlarge: 16 Trainium2 in a 4x4 2D torus, NeuronLink 1,024 GB/s per chip "
                                 "inside the instance"), "published",
    "1,024 GB/s per chip read as a bidirectional total, as for the chip's 1.28 TB/s; per direction = 512 GB/s; "
    "the remaining 256 GB/s of the chip's 1.28 TB/s are the UltraServer's Z rings")

NVLINK_MAX_DOMAIN = Figure(576, "", BCM_NVLINK.cite("NVLink 5: up to 576 GPUs in a single NVLink domain"), "published",
                           "NVLink Fusion rides the same switches")
"""Largest NVLink (or NVLink Fusion) domain the default layout builds before starting another."""
NVLINK3_MAX_DOMAIN = Figure(
    16, "", A100_PAGE.cite("'up to 16 A100 GPUs can be interconnected at up to 600 GB/s' with NVSwitch"), "secondary",
    "second-generation NVSwitch (HGX A100 16-GPU); the DGX A100 node holds 8")
"""Largest NVLink 3 (A100) domain the default layout builds before starting another."""
TRN2_INSTANCE_CHIPS = Figure(16, "", TRN2_ARCH.cite("trn2.48xlarge: 16 Trainium2 in a 4x4 torus"), "published")
"""Chips per trn2.48xlarge: the default Trn2 torus size."""
TRN1_INSTANCE_CHIPS = Figure(16, "", TRN1_ARCH.cite("trn1.32xlarge and trn1n.32xlarge: 16 Trainium chips in a 2D torus"),
                             "published", "a 4x4 torus; the 2024 page's '4D-HyperCube' is the same graph (C4 x C4 = Q4)")
"""Chips per trn1.32xlarge: the default Trn1 torus size."""
TRN1_ULTRACLUSTER_CHIPS = Figure(100_000, "", TRN1_ARCH.cite("Trn1 UltraClusters of over 100,000 Trainium chips"),
                                 "published", "a lower bound ('over'); the documentation gives no Trn2 maximum")
"""Chips of the largest Trn1 UltraCluster AWS documents (the only Trainium cluster size it gives)."""
TRN1N_INSTANCE_LINK = Figure(
    384 * 2**30, "B/s", TRN1_ARCH_2024.cite("NeuronLink-v2 device-to-device 768 GiB/s per device on trn1n.32xlarge"),
    "published",
    "768 GiB/s per chip on trn1n.32xlarge (twice trn1.32xlarge's 384), read as a bidirectional total like the chip's "
    "figure; per direction = 384 GiB/s (the trn1n-instance preset's torus)")
"""NeuronLink bandwidth per chip per direction inside a trn1n.32xlarge."""
TRN1N_NETWORK = Figure(
    1600 * 1e9 / 8 / 16, "B/s", TRN1_ARCH.cite("EFA 1,600 Gbps per trn1n.32xlarge"), "published",
    "1,600 Gb/s per instance of 16 chips -> 200 GB/s / 16 = 12.5 GB/s per chip per direction (trn1n-instance)")
"""EFA bandwidth per chip per direction of a trn1n.32xlarge (trn1.32xlarge: half, the default for trn1)."""
TRN3_ULTRASERVER_CHIPS = Figure(144, "", TRN3_ARCH.cite("Trn3 Gen2 UltraServer: 144 Trainium3 on NeuronSwitch-v1"),
                                "published")
"""Chips per Trn3 UltraServer (Gen2): the default NeuronSwitch domain size."""


@dataclass(frozen=True, slots=True)
class Fabric:
    """A fabric's defaults: what a domain or network of this fabric gets when the spec leaves them unset."""

    name: str
    """One of :data:`DOMAIN_FABRICS` or :data:`NETWORK_FABRICS`."""
    scope: str
    """``"domain"`` (inside a switch or torus) or ``"network"`` (joins domains)."""
    latency: Figure
    """Default seconds per hop."""
    bandwidth: Figure | None
    """Bytes/s per direction per slot set by the fabric itself (PCIe), or None: from the chips."""
    members: str
    """Which chips may sit on it: ``"nvidia"``, ``"trainium"``, ``"fusion"`` (trn4 + NVIDIA) or ``"any"``."""
    description: str
    """One line for listings."""

    def accepts(self, member: Chip) -> bool:
        """True if a chip of this kind can be attached to the fabric."""
        if self.members == "any":
            return True
        if self.members == "nvidia":
            return member.vendor == "nvidia"
        if self.members == "trainium":
            return member.family == "trainium"
        return member.vendor == "nvidia" or member.scale_up_fabric == "nvlink-fusion"


_FABRICS: Mapping[str, Fabric] = MappingProxyType({
    "nvlink-fusion": Fabric("nvlink-fusion", "domain", FUSION_HOP_LATENCY, None, "fusion",
                            "NVLink Fusion switch domain: Trainium4 and NVIDIA GPUs on one fabric"),
    "nvlink": Fabric("nvlink", "domain", NVLINK_HOP_LATENCY, None, "nvidia",
                     "NVLink/NVSwitch domain of NVIDIA GPUs"),
    "neuronlink-torus": Fabric("neuronlink-torus", "domain", NEURON_HOP_LATENCY, None, "trainium",
                               "NeuronLink torus (Trn2 4x4 per instance, 4x4x4 per UltraServer; Trn1 hypercube)"),
    "neuronswitch": Fabric("neuronswitch", "domain", NEURON_HOP_LATENCY, None, "trainium",
                           "NeuronSwitch all-to-all domain (Trn3 UltraServer)"),
    "pcie": Fabric("pcie", "domain", PCIE_HOP_LATENCY, PCIE_GEN5_X16, "any",
                   "PCIe Gen5 x16 host bus (no scale-up fabric)"),
    "efa": Fabric("efa", "network", NETWORK_HOP_LATENCY, None, "any", "AWS Elastic Fabric Adapter"),
    "infiniband": Fabric("infiniband", "network", NETWORK_HOP_LATENCY, None, "any", "InfiniBand NDR/XDR"),
})

_GBPS = 1e9 / 8  # bits/s -> bytes/s; network line rates are per direction (full duplex)
_IB_NDR = (f"InfiniBand NDR 400 Gb/s, one NIC per GPU as in the DGX/HGX reference designs; "
           f"{NCCL_TESTS_119.cite('24 GB/s peak per 200G NIC, so ~48 GB/s measured per 400G NIC')}")
_SCALE_OUT: Mapping[str, Figure] = MappingProxyType({
    "trn1": Figure(800 * _GBPS / 16, "B/s", TRN1_ARCH.cite("EFA 800 Gbps per trn1.32xlarge (1,600 for trn1n)"),
                   "published",
                   "800 Gb/s per instance of 16 chips -> 100 GB/s / 16 = 6.25 GB/s per chip per direction"),
    "trn2": Figure(3200 * _GBPS / 16, "B/s", TRN2_ARCH.cite("trn2.48xlarge EFAv3 3.2 Tbps per instance"), "published",
                   "3.2 Tb/s per instance of 16 chips -> 400 GB/s / 16 = 25 GB/s per chip per direction"),
    "trn3": Figure(28800 * _GBPS / 144, "B/s", TRN3_ARCH.cite("Trn3 UltraServer EFA 28,800 Gbps (Gen2, 144 chips; "
                                                              "Gen1 12,800 Gbps for 64)"), "published",
                   "28.8 Tb/s / 144 chips = 25 GB/s per chip per direction (Gen1: 12.8 Tb/s / 64 = 25 GB/s too)"),
    "h100": Figure(400 * _GBPS, "B/s", _IB_NDR, "secondary", "400 Gb/s = 50 GB/s per direction, nominal"),
    "h200": Figure(400 * _GBPS, "B/s", _IB_NDR, "secondary", "400 Gb/s = 50 GB/s per direction, nominal"),
    "b200": Figure(400 * _GBPS, "B/s", _IB_NDR, "secondary", "400 Gb/s = 50 GB/s per direction, nominal"),
    "a100": Figure(200 * _GBPS, "B/s", DGX_A100_GUIDE.cite("eight single-port ConnectX-6 HDR 200 Gb/s InfiniBand "
                                                        "adapters per DGX A100, one per GPU"),
                   "secondary", "200 Gb/s = 25 GB/s per direction, nominal"),
    "gb200": Figure(400 * _GBPS, "B/s", DGX_GB_USER_GUIDE.cite("DGX GB200 compute tray: 4x ConnectX-7 single-port "
                                                               "400G OSFP NICs per tray of 4 Blackwell GPUs"),
                    "published", "400 Gb/s per GPU = 50 GB/s per direction, nominal"),
    "gb300": Figure(800 * _GBPS, "B/s", KLOCKWOOD_B300.cite("GB300 NVL72: one ConnectX-8 SuperNIC at 800 Gb/s per GPU"),
                    "secondary", "800 Gb/s = 100 GB/s per direction, nominal"),
})


def fabric(name: str) -> Fabric:
    """The defaults of a fabric by name; ValueError listing the accepted fabrics."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _FABRICS:
        raise ValueError(f"fabric: unknown fabric {name!r}; accepted: {', '.join(_FABRICS)}")
    return _FABRICS[key]


def fabrics() -> dict[str, Fabric]:
    """Every fabric's defaults by name."""
    return dict(_FABRICS)


def network_bandwidth(kind: str) -> Figure:
    """Scale-out bandwidth per chip per direction for a kind (its instance's EFA or NIC share).

    Trainium4 has no announced figure: Trainium3's per-chip share is carried
    over and marked projected.
    """
    member = chip(kind)
    if member.kind in _SCALE_OUT:
        return _SCALE_OUT[member.kind]
    if member.kind == "trn4":
        return _SCALE_OUT["trn3"].derive(
            1.0, "assumed: no Trn4 network figure announced; Trn3 UltraServer per-chip EFA share carried over",
            source="Trn4 projection")
    raise ValueError(f"kind: no scale-out bandwidth figure for {kind!r}; known: {', '.join(sorted(_SCALE_OUT))}, trn4")


def default_network_fabric(kinds: Iterable[str]) -> str:
    """``"efa"`` when any Trainium is present (an AWS rack), else ``"infiniband"`` (NVIDIA's reference design)."""
    return "efa" if any(chip(k).family == "trainium" for k in kinds) else "infiniband"
