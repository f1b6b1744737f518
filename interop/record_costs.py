"""Costing timeline records: the modelled duration of each op through devices.cost, of each copy
through the one point-to-point transfer model (collectives.transfer: the route
the rack's topology gives, the host's PCIe link being one of its links).

Every duration is modelled; the estimate carries the catalogue figures it used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import collectives
import devices
import devices.cost

@dataclass(frozen=True, slots=True)
class CopyCost:
    """A transfer's modelled time and the link it crossed."""

    seconds: float
    link: str | None
    """Label of the link track, e.g. ``hybrid:0->hybrid:4 (nvlink-fusion)``; None inside one slot."""
    bandwidth: float
    latency: float
    sources: tuple


class RecordCoster:
    """Costs records on one rack. Stateless (a rack's topology and plans are cached by collectives); cheap to build."""

    def __init__(self, rack):
        self.rack = rack
        self.kinds = [d.kind for d in rack.devices]

    def op(self, slot: int, name: str, in_shapes, out_shapes, dtype: str, causal: bool,
           list_length: int = 0, args: tuple = ()) -> devices.cost.Estimate:
        """``list_length``: the tensors in the op's first tensor list (0: it has none), as the runtime records
        it; a multi-tensor op's lists arrive flattened in ``in_shapes``; ``args``: more non-tensor arguments,
        as (name, value) pairs."""
        if args:
            args = {**dict(args), "is_causal": True} if causal else dict(args)
        else:
            args = {"is_causal": True} if causal else None
        # `dtype` is torch's name as the runtime records it; an op with no
        # tensor at all (nothing to read or write) has none, and no bytes to
        # cost in any dtype.
        return devices.cost.estimate(self.kinds[slot], name, in_shapes, dtype or "float32",
                                     out_shapes=out_shapes, args=args, list_length=list_length or None)

    def sparse_op(self, slot: int, name: str, in_shapes, out_shapes, dtype: str) -> devices.cost.Estimate:
        """An op on sparse COO tensors, recorded with each COO operand as its indices and values: priced by the
        bytes its operands and results move, each read or written once (sparse kernels are memory-bound; the
        dense op of the same name would price the dense shape the COO tensor stands for). Every element is
        counted at the op's dtype, the indices too."""
        elements = sum(math.prod(s) for s in (*in_shapes, *out_shapes))
        return devices.cost.estimate_kernel(self.kinds[slot], dtype or "float32",
                                            bytes=elements * devices.itemsize(dtype or "float32"), name=name)

    def kernel(self, slot: int, launch) -> devices.cost.Estimate:
        """A kernel launch (:class:`interop.timelines.KernelLaunch`) from its own bytes and FLOPs."""
        return devices.cost.estimate_kernel(self.kinds[slot], launch.dtype, bytes=launch.bytes, flops=launch.flops,
                                            matmul_flops=launch.matmul_flops, matmul_outputs=launch.matmul_outputs,
                                            name=launch.name)

    def copy(self, src: int, dst: int, nbytes: int) -> CopyCost:
        if src == dst:
            est = devices.cost.estimate(self.kinds[src], "aten::copy_", [(nbytes,), (nbytes,)], "uint8",
                                        out_shapes=[(nbytes,)])
            return CopyCost(est.seconds, None, 0.0, 0.0, est.sources)
        # A negative slot is the host: the copy crosses that slot's PCIe link, a link of the topology.
        a, b = (collectives.HOST if src < 0 else src), (collectives.HOST if dst < 0 else dst)
        est = collectives.transfer(self.rack.spec, a, b, nbytes)
        label = f"{'host' if src < 0 else f'hybrid:{src}'}->{'host' if dst < 0 else f'hybrid:{dst}'} ({est.fabric})"
        return CopyCost(est.seconds, label, est.bandwidth, est.latency, est.sources)
