"""The collectives of :class:`ProcessGroupHybrid`, with the c10d ProcessGroup signatures: all_reduce,
all_gather, reduce_scatter here; rooted ones, all_to_all and barrier in :mod:`._ops_rooted`.

Each method builds a :class:`Call` (checked locally and across peers before
anything is written) and a ``launch`` that runs the engine on the tensors'
aliases and says how to price the call.  Both the current c10d names
(``all_gather_single``...) and the older ones (``_allgather_base``...) exist,
since torch's Python front end, its C++ callers (DDP, functional collectives)
and older code use different ones.
"""

from __future__ import annotations

import torch
from torch._C._distributed_c10d import (
    AllgatherOptions, AllreduceCoalescedOptions, AllreduceOptions, ReduceOp, ReduceScatterOptions,
)

from collectives.distributed._checks import COALESCED, ArgumentError, Call, as_transport, check_reduce, reduce_spec
from collectives.distributed._work import WorkHybrid


def _opts(opts, cls):
    if opts is None:
        return cls()
    if isinstance(opts, (ReduceOp, ReduceOp.RedOpType)):
        o = cls()
        o.reduceOp = opts
        return o
    return opts


def _same(label: str, ref: torch.Tensor, others, what: str) -> None:
    for i, o in enumerate(others):
        if o.dtype != ref.dtype:
            raise ArgumentError(f"{label}: {what}[{i}] is {o.dtype}, the input is {ref.dtype}")
        if o.numel() != ref.numel():
            raise ArgumentError(f"{label}: {what}[{i}] has {o.numel()} elements, the input {ref.numel()}")


class Collectives:
    """Mixin: the reducing and gathering collectives of the hybrid process group (see the module docstring)."""

    # -- all_reduce ---------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None) -> WorkHybrid:
        """All-reduce one tensor per rank, in place (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM, BAND/BOR/BXOR)."""
        opts = _opts(opts, AllreduceOptions)
        return self._reduce_all("all_reduce", [self._single("all_reduce", tensors)], opts, False)

    def allreduce_coalesced(self, tensors, opts=None) -> WorkHybrid:
        """All-reduce several tensors as one collective (one modelled launch)."""
        opts = _opts(opts, AllreduceCoalescedOptions)
        return self._reduce_all(COALESCED.format("all_reduce"), list(tensors), opts, True)

    def _reduce_all(self, label: str, tensors: list, opts, coalesced: bool) -> WorkHybrid:
        if not coalesced and any(isinstance(t, torch.Tensor) and t.is_sparse for t in tensors):
            return self._sparse_allreduce(label, tensors, opts)
        op = opts.reduceOp

        def build():
            name, factor = reduce_spec(op)
            if not tensors:
                raise ArgumentError(f"{label}: no tensors")
            views, hybrid = [], False
            for i, t in enumerate(tensors):
                v, h = self._view(label, f"tensors[{i}]", t)
                scale = check_reduce(label, name, t.dtype, factor)
                if t.dtype != tensors[0].dtype:
                    raise ArgumentError(f"{label}: tensors[{i}] is {t.dtype}, tensors[0] is {tensors[0].dtype}")
                views.append(v)
                hybrid |= h
            total = sum(t.numel() for t in tensors)
            call = Call("all_reduce", tensors[0].dtype, name, count=total, itemsize=tensors[0].element_size(),
                        sizes=tuple(t.numel() for t in tensors) if coalesced else (), modelled=hybrid,
                        coalesced=coalesced)

            def launch(run, rows):
                bufs = [as_transport(run.buf(v, out=True), reducing=True) for v in views]
                engine_op, bufs = run.reduce_op(name, scale, bufs, in_place=True, original=op)
                run.average(name, bufs)
                o = run.opts(AllreduceCoalescedOptions if coalesced else AllreduceOptions, reduceOp=engine_op)
                backend = run.engine.backend
                w = backend.allreduce_coalesced(bufs, o) if coalesced else backend.allreduce(bufs, o)
                return [w], list(tensors), dict(model="all_reduce", count=total, itemsize=call.itemsize)
            return call, launch, views
        return self._issue(label, build, opts)

    def _sparse_allreduce(self, label: str, tensors: list, opts) -> WorkHybrid:
        """CPU sparse COO tensors (SUM) go to Gloo as they are: host data, nothing to alias or place."""
        def build():
            name, _ = reduce_spec(opts.reduceOp)
            t = tensors[0]
            if name != "sum":
                raise ArgumentError(f"{label}: sparse tensors reduce with sum only, got {name}")
            if len(tensors) != 1 or t.layout != torch.sparse_coo or t.device.type != "cpu":
                raise ArgumentError(f"{label}: a sparse all_reduce takes one CPU sparse COO tensor "
                                    f"(got {t.layout} on {t.device})")
            call = Call("all_reduce", t.dtype, "sum", count=t.numel(), itemsize=t.element_size())

            def launch(run, rows):
                w = self._gloo.allreduce([t], run.opts(AllreduceOptions, reduceOp=ReduceOp.SUM))
                return [w], [t], None
            return call, launch, []
        return self._issue(label, build, opts)

    # -- all_gather -----------------------------------------------------------------------------

    def allgather(self, output_tensors, input_tensors, opts=None) -> WorkHybrid:
        """Every rank's input into every rank's list of ``size`` outputs."""
        label = "all_gather"

        def build():
            inp = self._single(label, input_tensors)
            outs = self._list(label, "output_tensors[0]", self._nested(label, "output_tensors", output_tensors),
                              self._size)
            vin, hybrid = self._view(label, "input", inp)
            vouts = []
            for i, o in enumerate(outs):
                v, h = self._view(label, f"outputs[{i}]", o)
                vouts.append(v)
                hybrid |= h
            _same(label, inp, outs, "outputs")
            call = Call("all_gather", inp.dtype, count=inp.numel(), itemsize=inp.element_size(),
                        modelled=hybrid)

            def launch(run, rows):
                bi = as_transport(run.buf(vin), reducing=False)
                bo = [as_transport(run.buf(v, out=True), reducing=False) for v in vouts]
                w = run.engine.backend.allgather([bo], [bi], run.opts(AllgatherOptions))
                return [w], [list(outs)], dict(model="all_gather", count=inp.numel(), itemsize=call.itemsize)
            return call, launch, [vin, *vouts]
        return self._issue(label, build, opts)

    def all_gather_single(self, output_tensor, input_tensor, opts=None) -> WorkHybrid:
        """Every rank's input concatenated into one output of ``size`` times its elements."""
        return self._gather_flat("all_gather", [output_tensor], [input_tensor], opts)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, output_tensors, input_tensors, opts=None) -> WorkHybrid:
        """Several :meth:`all_gather_single` as one collective (one modelled launch)."""
        return self._gather_flat(COALESCED.format("all_gather"), list(output_tensors), list(input_tensors), opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists, input_tensors, opts=None) -> WorkHybrid:
        """Several :meth:`allgather` as one collective: ``output_lists[r][j]`` receives rank r's input j."""
        label = COALESCED.format("all_gather")
        inputs = list(input_tensors)
        if (not isinstance(output_lists, (list, tuple)) or len(output_lists) != self._size
                or any(len(outs) != len(inputs) for outs in output_lists)):
            return self._refuse(label, ArgumentError(
                f"{label}: output_lists must hold {self._size} lists (one per rank) of {len(inputs)} tensors "
                "(one per input)"))
        per_input = [[output_lists[r][j] for r in range(self._size)] for j in range(len(inputs))]
        return self._gather_lists(label, per_input, inputs, [list(outs) for outs in output_lists], opts)

    def _nested(self, label: str, what: str, lists) -> list:
        if not isinstance(lists, (list, tuple)) or len(lists) != 1 or not isinstance(lists[0], (list, tuple)):
            raise ArgumentError(f"{label}: {what} must be a list holding one list of {self._size} tensors")
        return lists[0]

    def _refuse(self, label: str, error: Exception) -> WorkHybrid:
        def build():
            raise error
        return self._issue(label, build)

    def _gather_flat(self, label: str, outputs: list, inputs: list, opts=None) -> WorkHybrid:
        def build():
            if len(outputs) != len(inputs) or not inputs:
                raise ArgumentError(f"{label}: {len(outputs)} outputs for {len(inputs)} inputs")
            vins, vouts, hybrid = [], [], False
            for i, (o, x) in enumerate(zip(outputs, inputs)):
                vx, hx = self._view(label, f"input[{i}]", x)
                vo, ho = self._view(label, f"output[{i}]", o)
                if o.dtype != x.dtype:
                    raise ArgumentError(f"{label}: output[{i}] is {o.dtype}, input[{i}] is {x.dtype}")
                if o.numel() != self._size * x.numel():
                    raise ArgumentError(f"{label}: output[{i}] has {o.numel()} elements; it must have "
                                        f"{self._size} x {x.numel()} (group size x input)")
                vins.append(vx)
                vouts.append(vo)
                hybrid |= hx or ho
            total = sum(x.numel() for x in inputs)
            call = Call("all_gather", inputs[0].dtype, count=total, itemsize=inputs[0].element_size(),
                        sizes=tuple(x.numel() for x in inputs) if len(inputs) > 1 else (), modelled=hybrid,
                        coalesced=len(inputs) > 1)

            def launch(run, rows):
                works = []
                for vx, vo in zip(vins, vouts):
                    bx = as_transport(run.buf(vx), reducing=False)
                    bo = as_transport(run.buf(vo, out=True), reducing=False)
                    works.append(run.engine.backend._allgather_base(bo, bx, run.opts(AllgatherOptions)))
                result = list(outputs) if len(outputs) > 1 else outputs[0]
                return works, result, dict(model="all_gather", count=total, itemsize=call.itemsize)
            return call, launch, vins + vouts
        return self._issue(label, build, opts)

    def _gather_lists(self, label: str, output_lists: list, inputs: list, result: list, opts=None) -> WorkHybrid:
        """``output_lists[j]``: the ``size`` outputs (rank order) of input j."""
        def build():
            if len(output_lists) != len(inputs) or not inputs:
                raise ArgumentError(f"{label}: {len(output_lists)} output lists for {len(inputs)} inputs")
            pairs, hybrid = [], False
            for i, (outs, x) in enumerate(zip(output_lists, inputs)):
                vx, h = self._view(label, f"input[{i}]", x)
                vos = []
                for j, o in enumerate(outs):
                    vo, ho = self._view(label, f"output_lists[{i}][{j}]", o)
                    vos.append(vo)
                    h |= ho
                _same(label, x, outs, f"output_lists[{i}]")
                pairs.append((vx, vos))
                hybrid |= h
            total = sum(x.numel() for x in inputs)
            call = Call("all_gather", inputs[0].dtype, count=total, itemsize=inputs[0].element_size(),
                        sizes=tuple(x.numel() for x in inputs), modelled=hybrid, coalesced=True)

            def launch(run, rows):
                works = []
                for vx, vos in pairs:
                    bx = as_transport(run.buf(vx), reducing=False)
                    bos = [as_transport(run.buf(v, out=True), reducing=False) for v in vos]
                    works.append(run.engine.backend.allgather([bos], [bx], run.opts(AllgatherOptions)))
                return works, result, dict(model="all_gather", count=total, itemsize=call.itemsize)
            return call, launch, [v for vx, vos in pairs for v in (vx, *vos)]
        return self._issue(label, build, opts)

    # -- reduce_scatter -------------------------------------------------------------------------

    def reduce_scatter(self, output_tensors, input_tensors, opts=None) -> WorkHybrid:
        """Reduce ``size`` inputs per rank across ranks; rank i keeps the reduction of everyone's input i."""
        label = "reduce_scatter"
        opts = _opts(opts, ReduceScatterOptions)

        def build():
            out = self._single(label, output_tensors)
            ins = self._list(label, "input_tensors[0]", self._nested(label, "input_tensors", input_tensors),
                             self._size)
            vout, hybrid = self._view(label, "output", out)
            name, factor = reduce_spec(opts.reduceOp)
            scale = check_reduce(label, name, out.dtype, factor)
            vins = []
            for i, x in enumerate(ins):
                v, h = self._view(label, f"inputs[{i}]", x)
                vins.append(v)
                hybrid |= h
            _same(label, out, ins, "inputs")
            call = Call("reduce_scatter", out.dtype, name, count=out.numel(), itemsize=out.element_size(),
                        modelled=hybrid)

            def launch(run, rows):
                bo = as_transport(run.buf(vout, out=True), reducing=True)
                bis = [as_transport(run.buf(v), reducing=True) for v in vins]
                engine_op, bis = run.reduce_op(name, scale, bis, in_place=False, original=opts.reduceOp)
                run.average(name, [bo])
                o = run.opts(ReduceScatterOptions, reduceOp=engine_op)
                w = run.engine.backend.reduce_scatter([bo], [bis], o)
                return [w], [out], dict(model="reduce_scatter", count=out.numel(), itemsize=call.itemsize)
            return call, launch, [vout, *vins]
        return self._issue(label, build, opts)

    def reduce_scatter_single(self, output, input, opts=None) -> WorkHybrid:
        """Reduce one input of ``size`` blocks across ranks; rank i keeps block i in ``output``."""
        return self._scatter_flat("reduce_scatter", [output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None) -> WorkHybrid:
        """Several :meth:`reduce_scatter_single` as one collective (one modelled launch)."""
        return self._scatter_flat(COALESCED.format("reduce_scatter"), list(outputs), list(inputs), opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def _scatter_flat(self, label: str, outputs: list, inputs: list, opts) -> WorkHybrid:
        opts = _opts(opts, ReduceScatterOptions)

        def build():
            if len(outputs) != len(inputs) or not inputs:
                raise ArgumentError(f"{label}: {len(outputs)} outputs for {len(inputs)} inputs")
            name, factor = reduce_spec(opts.reduceOp)
            pairs, hybrid = [], False
            for i, (o, x) in enumerate(zip(outputs, inputs)):
                vx, hx = self._view(label, f"input[{i}]", x)
                vo, ho = self._view(label, f"output[{i}]", o)
                scale = check_reduce(label, name, x.dtype, factor)
                if o.dtype != x.dtype:
                    raise ArgumentError(f"{label}: output[{i}] is {o.dtype}, input[{i}] is {x.dtype}")
                if x.numel() != self._size * o.numel():
                    raise ArgumentError(f"{label}: input[{i}] has {x.numel()} elements; it must have "
                                        f"{self._size} x {o.numel()} (group size x output)")
                pairs.append((vo, vx))
                hybrid |= hx or ho
            total = sum(o.numel() for o in outputs)
            call = Call("reduce_scatter", outputs[0].dtype, name, count=total, itemsize=outputs[0].element_size(),
                        sizes=tuple(o.numel() for o in outputs) if len(outputs) > 1 else (), modelled=hybrid,
                        coalesced=len(outputs) > 1)

            def launch(run, rows):
                works = []
                for vo, vx in pairs:
                    bo = as_transport(run.buf(vo, out=True), reducing=True)
                    bx = as_transport(run.buf(vx), reducing=True)
                    engine_op, (bx,) = run.reduce_op(name, scale, [bx], in_place=False, original=opts.reduceOp)
                    run.average(name, [bo])
                    o = run.opts(ReduceScatterOptions, reduceOp=engine_op)
                    works.append(run.engine.backend._reduce_scatter_base(bo, bx, o))
                result = list(outputs) if len(outputs) > 1 else outputs[0]
                return works, result, dict(model="reduce_scatter", count=total, itemsize=call.itemsize)
            return call, launch, [v for p in pairs for v in p]
        return self._issue(label, build, opts)
