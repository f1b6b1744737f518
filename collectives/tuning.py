"""Sourced constants of the collective cost model: protocols, fabric efficiencies, reduce cost.

Nothing here is fitted to the anchors the tests check: every number is read
from NCCL's source (its own tuning model of the hardware) or from the chip
catalogue, and carries that citation as a :class:`devices.Figure`.  Where no
public figure exists (NeuronLink, NVLink Fusion) the nearest NVIDIA figure
stands in, marked ``projected`` with a note, so that vendors are compared on
equal terms rather than one of them at an ideal 100 %.

Why each piece exists:

* **Protocols.**  NCCL moves data with LL, LL128 or Simple; they trade latency
  for bandwidth (LL: 8-byte flag+data lines, half the bandwidth; LL128: 120 of
  128 bytes useful; Simple: full bandwidth, higher per-hop latency).  The
  estimate prices every protocol and keeps the fastest, as NCCL's tuner does.
* **Link efficiency.**  NCCL models a Hopper NVLink at 20.6 GB/s per link
  (``SM90_NVLINK_BW`` in src/graph/topo.h) although it signals 25 GB/s per
  direction: 82.4 % is what NCCL itself expects a ring to get.
* **In-switch reduction efficiency.**  NCCL's ``nvlsEfficiency`` (src/tuning/nvls.cc):
  0.85 on Hopper, 0.74 on Blackwell.
* **Reduce cost.**  An elementwise reduce reads two operands and writes one,
  so a chip reduces at a third of its HBM bandwidth; NCCL fuses the reduce into
  the copy, so only the part slower than the link is exposed (see ``collectives.cost``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from devices.figure import Figure
from devices.sources import NCCL_NVLS, NCCL_TESTS_119, NCCL_TOPO, NCCL_TUNING, THAKUR_2005

_TUNING = NCCL_TUNING.cite("v2.30 protocol bandwidth and latency tables")
_TUNING_PCI = NCCL_TUNING.cite("hwLat table, PCI row")
_TOPO = NCCL_TOPO.cite()
_NVLS = NCCL_NVLS.cite()

HW_CLASSES: tuple[str, ...] = ("nvlink", "pci", "net")
"""Hop-latency classes: every scale-up switch or torus hop is priced like an NVLink hop (devices does the same)."""

LATENCY_CLASSES: tuple[str, ...] = ("ring", "tree", "nvls")
"""Base-latency rows: ``ring`` also serves the algorithms NCCL has no row for (direct, recursive, hierarchical)."""


@dataclass(frozen=True, slots=True)
class Protocol:
    """How data is moved: bandwidth derating, per-hop latency, per-collective base latency."""

    name: str
    """``simple``, ``ll128``, ``ll`` (NCCL), or ``ideal`` (the alpha-beta model with nothing added)."""
    bandwidth: Figure
    """Fraction of link bandwidth delivered (dimensionless)."""
    hop_scale: Mapping[str, float]
    """Hop class -> factor on the LL hop latency devices gives for a domain or network."""
    base: Mapping[str, Figure]
    """Latency class -> seconds added once per collective; a class absent here cannot use this protocol."""


def _us(value: float, source: str, note: str) -> Figure:
    return Figure(value * 1e-6, "s", source, "published", note)


def _nccl_protocol(name: str, factor: float, note: str, lats: dict[str, tuple[float, float, float]],
                   base: dict[str, float]) -> Protocol:
    # lats: class -> (LL, LL128, Simple) hop latency in us; devices stores the LL value,
    # so other protocols scale it by NCCL's own ratio.
    column = {"ll": 0, "ll128": 1, "simple": 2}[name]
    scale = {hw: v[column] / v[0] for hw, v in lats.items()}
    return Protocol(
        name, Figure(factor, "", _TUNING, "published", note), MappingProxyType(scale),
        MappingProxyType({k: _us(v, _TUNING, f"base latency per collective, {k}/{name}") for k, v in base.items()}))


_HOPS = {"nvlink": (0.6, 1.9, 3.4), "pci": (1.0, 2.5, 5.7), "net": (2.7, 4.0, 14.0)}

SIMPLE = _nccl_protocol("simple", 1.0, "Simple protocol: full bandwidth", _HOPS,
                        {"ring": 8.4, "tree": 8.4, "nvls": 25.0})
LL128 = _nccl_protocol("ll128", 0.92, "LL128 bandwidth derating (120 of 128 bytes carry data)", _HOPS,
                       {"ring": 14.0, "tree": 14.0})
LL = _nccl_protocol("ll", 0.5, "LL bandwidth derating (half of each 8-byte line is a flag)", _HOPS,
                    {"ring": 6.6, "tree": 6.8})
NCCL_PROTOCOLS: tuple[Protocol, ...] = (SIMPLE, LL128, LL)
"""The protocols a real rack is priced with; the estimate keeps the fastest."""

IDEAL = Protocol(
    "ideal", Figure(1.0, "", THAKUR_2005.cite("alpha-beta model"), "published", "no derating"),
    MappingProxyType({hw: 1.0 for hw in HW_CLASSES}),
    MappingProxyType({k: Figure(0.0, "s", THAKUR_2005.cite("alpha-beta model"), "published", "no base latency")
                      for k in LATENCY_CLASSES}))
"""The protocol of an ideal topology: the formulas of collectives.md with nothing added."""

_NVLINK5 = Figure(40.1 / 50.0, "", _TOPO, "published",
                  "SM100_NVLINK_BW 40.1 GB/s per NVLink 5 link as NCCL models it, vs 50 GB/s per direction signalled "
                  "(18 links, 1.8 TB/s bidirectional): 0.802")
_STAND_IN = ("projected", "no public figure for this fabric; NVLink 5's NCCL efficiency (0.802) stands in so vendors "
             "are compared on equal terms")

LINK_EFFICIENCY: Mapping[str, Figure] = MappingProxyType({
    "nvlink4": Figure(20.6 / 25.0, "", _TOPO, "published",
                      "SM90_NVLINK_BW 20.6 GB/s per NVLink 4 link as NCCL models it, vs 25 GB/s per direction "
                      "signalled (18 links, 900 GB/s bidirectional): 0.824"),
    "nvlink5": _NVLINK5,
    "nvlink-fusion": Figure(_NVLINK5.value, "", f"stand-in; base figure: {_TOPO}", *_STAND_IN),
    "neuronlink-v2": Figure(_NVLINK5.value, "", f"stand-in; base figure: {_TOPO}", *_STAND_IN),
    "neuronlink-v3": Figure(_NVLINK5.value, "", f"stand-in; base figure: {_TOPO}", *_STAND_IN),
    "neuronlink-v4": Figure(_NVLINK5.value, "", f"stand-in; base figure: {_TOPO}", *_STAND_IN),
})
"""Chip scale-up fabric -> fraction of the signalled per-direction bandwidth a collective gets."""

PCIE_EFFICIENCY = Figure(12.0 / 15.75, "", _TOPO, "published",
                         "PCI_BW 12 GB/s as NCCL models a PCIe Gen3 x16 link that signals 15.75 GB/s: 0.762")
"""Applied to ``pcie`` domains."""

NETWORK_EFFICIENCY = Figure(47.0 / 50.0, "", NCCL_TESTS_119.cite("InfiniBand NDR 400G: 46-48 GB/s measured per NIC"),
                            "secondary",
                            "47 of 50 GB/s nominal; applied to EFA as well (no published EFA figure)")
"""Applied to the scale-out network's nominal per-slot bandwidth."""

NVLS_EFFICIENCY: Mapping[str, Figure] = MappingProxyType({
    "nvlink4": Figure(0.85, "", _NVLS, "published", "Hopper"),
    "nvlink5": Figure(0.74, "", _NVLS, "published", "Blackwell"),
    "nvlink-fusion": Figure(0.74, "", f"stand-in; base figure: {_NVLS}", "projected",
                            "NVLink Fusion assumed to reduce in-switch like Blackwell NVLink 5"),
})
"""Chip scale-up fabric -> efficiency of in-switch reduction; other fabrics fall back to the Blackwell figure."""

HOP_LATENCY_SOURCE = f"{_TUNING}; {_TUNING_PCI}"
"""Where the protocol ratios applied to devices' LL hop latencies come from."""

REDUCE_PASSES = 3.0
"""An elementwise reduce of two operands touches three bytes of HBM per byte reduced (read, read, write)."""


def nvls_efficiency(fabric: str) -> Figure:
    """In-switch reduction efficiency for members whose scale-up fabric is ``fabric``."""
    if fabric in NVLS_EFFICIENCY:
        return NVLS_EFFICIENCY[fabric]
    return Figure(0.74, "", f"stand-in; base figure: {_NVLS}", "projected",
                  f"no in-switch reduction figure for {fabric}; Blackwell's stands in")


def link_efficiency(fabric: str) -> Figure:
    """Link efficiency for a chip scale-up fabric (``pcie`` for PCIe domains)."""
    if fabric == "pcie":
        return PCIE_EFFICIENCY
    if fabric in LINK_EFFICIENCY:
        return LINK_EFFICIENCY[fabric]
    return Figure(_NVLINK5.value, "", f"stand-in; base figure: {_TOPO}", *_STAND_IN)
