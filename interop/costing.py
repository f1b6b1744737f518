"""Modelled durations of timeline records: ops through devices.cost, copies
over the route the rack's topology gives (collectives.topology).

Every duration is modelled; the estimate carries the catalogue figures it used.
"""

from __future__ import annotations

from dataclasses import dataclass

import devices
import devices.cost
from devices.fabrics import PCIE_GEN5_X16, PCIE_HOP_LATENCY

@dataclass(frozen=True, slots=True)
class CopyCost:
    """A transfer's modelled time and the link it crossed."""

    seconds: float
    link: str | None
    """Label of the link track, e.g. ``hybrid:0->hybrid:4 (nvlink-fusion)``; None inside one slot."""
    bandwidth: float
    latency: float
    sources: tuple


class Coster:
    """Costs records on one rack. Stateless apart from caches; cheap to build."""

    def __init__(self, rack):
        self.rack = rack
        self.kinds = [d.kind for d in rack.devices]
        self._topology = None

    @property
    def topology(self):
        if self._topology is None:
            from collectives.topology import Topology

            self._topology = Topology.from_rack(self.rack.spec)
        return self._topology

    def op(self, slot: int, name: str, in_shapes, out_shapes, dtype: str, causal: bool) -> devices.cost.Estimate:
        args = {"is_causal": True} if causal else None
        # `dtype` is torch's name as the runtime records it; an op with no
        # tensor at all (nothing to read or write) has none, and no bytes to
        # cost in any dtype.
        return devices.cost.estimate(self.kinds[slot], name, in_shapes, dtype or "float32",
                                     out_shapes=out_shapes, args=args)

    def copy(self, src: int, dst: int, nbytes: int) -> CopyCost:
        if src == dst:
            est = devices.cost.estimate(self.kinds[src], "aten::copy_", [(nbytes,), (nbytes,)], "uint8",
                                        out_shapes=[(nbytes,)])
            return CopyCost(est.seconds, None, 0.0, 0.0, est.sources)
        if src < 0 or dst < 0:
            slot = dst if src < 0 else src
            seconds = PCIE_HOP_LATENCY.value + nbytes / PCIE_GEN5_X16.value
            arrow = f"host->hybrid:{slot}" if src < 0 else f"hybrid:{slot}->host"
            return CopyCost(seconds, f"{arrow} (pcie)", PCIE_GEN5_X16.value, PCIE_HOP_LATENCY.value,
                            (PCIE_GEN5_X16, PCIE_HOP_LATENCY))
        route = self.topology.route(src, dst)
        bandwidth = min(self.topology.bandwidth(link) for link in route.links)
        seconds = route.latency + nbytes / bandwidth
        return CopyCost(seconds, f"hybrid:{src}->hybrid:{dst} ({route.hw})", bandwidth, route.latency,
                        tuple(self.topology.sources()))
