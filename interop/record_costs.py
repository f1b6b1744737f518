"""Costing timeline records: the modelled duration of each op through devices.cost, of each copy
through the one point-to-point transfer model (collectives.transfer: the route
the rack's topology gives, the host's PCIe link being one of its links).

Every duration is modelled; the estimate carries the catalogue figures it used.

The runtime keeps a cost table (csrc/model/HybridPlacer.h) so that a record whose cost is known is placed
where it is recorded, with no Python on the way. This module fills it: the first record of each key is
priced here, once, and its estimate is kept under the table's id (:data:`templates`) for the records a
reader asks for. The table caches what the cost model said; it never decides a figure, and it is emptied
whenever the cost model's own caches are (:func:`devices.cost.cache_clear`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import collectives
import devices
import devices.cost

PS = 10**12  # picoseconds per second: clocks count integer picoseconds

templates: dict[int, tuple] = {}
"""Per cost-table id, what a record of it shows beyond its placement: ``("op", estimate)``,
``("kernel", launch, estimate)``, ``("copy", CopyCost, projected)`` or ``("collective", name, bytes,
projected, sources, link, participants)``."""

_kernel_ids: dict[tuple, int] = {}  # (chip kind, KernelLaunch) -> cost id: a compiled graph's launches repeat
_collective_ids: dict[tuple, int] = {}


def _add(template: tuple, duration_ps: int, flops: float, nbytes: float, *, name: str = "", dtype: str = "",
         link: str | None = None, participants: tuple = (), by_default: bool = False, projected: bool = False) -> int:
    from interop import _C  # the runtime's cost table

    ident = _C._timeline_add_cost(duration_ps, flops, nbytes, name, dtype, link or "", list(participants),
                                  by_default, projected)
    templates[ident] = template
    return ident


def _forget() -> None:
    from interop import _C

    _C._timeline_clear_costs()
    _kernel_ids.clear()


devices.cost.on_cache_clear(_forget)


def collective_cost(name: str, seconds: float, nbytes: float, projected: bool, sources, link: str | None,
                    participants: tuple) -> int:
    """The cost-table id of a collective or transfer placed by the collective layer."""
    sources = tuple(sources)
    key = (name, seconds, float(nbytes), projected, sources, link, participants)
    try:
        return _collective_ids[key]
    except KeyError:
        pass
    except TypeError:  # a source that does not hash: priced afresh each time
        key = None
    ident = _add(("collective", name, float(nbytes), projected, sources, link, participants), round(seconds * PS),
                 0.0, float(nbytes), name=name, link=link, participants=participants, projected=projected)
    if key is not None:
        _collective_ids[key] = ident
    return ident

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

    def price(self, kind: int, slot: int, peer: int, name: str, value: int, dtype: str, flags: int, ins: tuple,
              outs: tuple, launches: dict) -> int:
        """The cost-table id of a record the table holds no cost for (the runtime's resolver: kind and flags
        are the runtime's record kinds and flags, ``launches`` the queued kernel descriptions by id)."""
        from interop import _C

        kinds, record_flags = _C.RECORD_KINDS, _C.RECORD_FLAGS
        if kind == kinds["op"]:
            est = (self.sparse_op(slot, name, ins, outs, dtype) if flags & record_flags["sparse"]
                   else self.op(slot, name, ins, outs, dtype, bool(flags & record_flags["causal"]), value))
            return _add(("op", est), round(est.seconds * PS), est.flops, est.bytes, dtype=est.dtype,
                        by_default=est.estimated_by_default, projected=est.projected)
        if kind == kinds["copy"]:
            cost = self.copy(slot, peer, value)
            projected = any(self.rack.devices[s].spec.projected for s in (slot, peer) if s >= 0)
            return _add(("copy", cost, projected), round(cost.seconds * PS), 0.0, float(value), name="copy",
                        link=cost.link, projected=projected)
        if kind == kinds["kernel"]:
            launch = launches.pop(value)
            key = (self.kinds[slot], launch)
            try:
                ident = _kernel_ids.get(key)
            except TypeError:  # an argument that does not hash: priced afresh
                key, ident = None, None
            if ident is None:
                if launch.aten:
                    est = self.op(slot, launch.aten, launch.in_shapes, launch.out_shapes, launch.dtype, launch.causal,
                                  args=launch.args)
                else:
                    est = self.kernel(slot, launch)
                ident = _add(("kernel", launch, est), round(est.seconds * PS), est.flops, est.bytes,
                             name=launch.name, dtype=est.dtype, by_default=est.estimated_by_default,
                             projected=est.projected)
                if key is not None:
                    _kernel_ids[key] = ident
            return ident
        raise ValueError(f"a record of kind {kind} has no cost")

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
