"""Point-to-point transfers: the one model of what moving bytes from one place of a rack to another costs.

A copy between two slots (``x.to("hybrid:4")``), between the host and a slot
(``x.to("hybrid:3")`` from CPU memory, ``.cpu()``), and the ``send_recv``
collective are one thing: a message on the route the topology gives
(NVLink Fusion or NVLink switch, NeuronLink torus or switch, the scale-out
network, or the slot's own PCIe link to the host, :data:`HOST`).  It is
priced as the send_recv collective is, by :func:`collectives.plan`: the
message's schedule on the route's links under each of the rack's protocols,
the fastest kept, with that protocol's base latency:

    base latency + hops x hop latency + bytes / (bottleneck link bandwidth x protocol factor)

so ``x.to("hybrid:4")`` and ``collectives.send_recv`` on the same route give
the same modelled time, from the same sourced figures.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectives.algorithm_choice import cached_plan, topology
from collectives.topology import HOST


@dataclass(frozen=True, slots=True)
class TransferEstimate:
    """The modelled time of one point-to-point transfer and the route it took."""

    seconds: float
    """Modelled time."""
    nbytes: int
    """Bytes moved."""
    src: int
    """Source slot, or :data:`HOST`."""
    dst: int
    """Destination slot, or :data:`HOST`."""
    fabric: str
    """The fabric crossed (``nvlink-fusion``, ``neuronswitch``, ``efa``, ``pcie``...; ``local`` inside a slot)."""
    hops: int
    """Links crossed in a row (a torus route hops from neighbour to neighbour)."""
    bandwidth: float
    """Bytes/s of the route's slowest link (fabric efficiency applied, protocol not)."""
    latency: float
    """Seconds of the route's hops at the LL protocol (the protocol priced scales it)."""
    protocol: str
    """The protocol priced (the fastest of the rack's)."""
    sources: tuple[str, ...]
    """Citations of every figure used."""
    modelled: bool = True
    """Always True: this is a model, not a measurement."""


def transfer(rack, src: int, dst: int, nbytes: int) -> TransferEstimate:
    """Modelled time of moving ``nbytes`` from ``src`` to ``dst`` (slots, or :data:`HOST`) on ``rack``.

    ``rack``: a Topology, :class:`devices.RackSpec`, preset name or spec
    string.  ``src == dst`` is not a transfer (ValueError: a copy inside a
    slot is a memory operation, priced by the device's cost model).
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes: expected a non-negative integer, got {nbytes!r}")
    if src == dst:
        raise ValueError(f"src and dst are both {src}: a copy inside one place is not a transfer")
    topo = topology(rack)
    route = topo.route(src, dst)  # ValueError / IndexError naming the endpoint
    est = cached_plan(topo, "send_recv", nbytes, 1, (src, dst), build=False).estimate
    bandwidth = min(topo.bandwidth(link) for link in route.links)
    sources = tuple(topo.route_sources(src, dst)) + (
        "priced as the send_recv collective on the route (collectives.transfer, collectives.algorithm_choice)",)
    return TransferEstimate(est.seconds, nbytes, src, dst, route.fabric, route.hops, bandwidth, route.latency,
                            est.protocol, sources)


__all__ = ["HOST", "TransferEstimate", "transfer"]
