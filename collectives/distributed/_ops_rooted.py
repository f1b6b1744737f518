"""The rooted collectives (broadcast, reduce, gather, scatter), all_to_all and barrier of
:class:`ProcessGroupHybrid`, with the c10d ProcessGroup signatures (see :mod:`._ops`)."""

from __future__ import annotations

import torch
from torch._C._distributed_c10d import (
    AllToAllOptions, BarrierOptions, BroadcastOptions, GatherOptions, ReduceOptions, ScatterOptions,
)

from collectives.distributed._checks import (
    ArgumentError, Call, as_transport, check_reduce, reduce_spec, rows_view, send_matrix,
)
from collectives.distributed._ops import _opts, _same
from collectives.distributed._work import WorkHybrid


class RootedCollectives:
    """Mixin: broadcast, reduce, gather, scatter, all_to_all, barrier."""

    # -- rooted ---------------------------------------------------------------------------------

    def broadcast(self, tensors, opts=None) -> WorkHybrid:
        """Copy the root's tensor into every rank's (``opts.rootRank``)."""
        label = "broadcast"
        opts = _opts(opts, BroadcastOptions)

        def build():
            t = self._single(label, tensors)
            root = self._root(label, opts.rootRank)
            if opts.rootTensor != 0:
                raise ArgumentError(f"{label}: rootTensor must be 0 (one tensor per rank), got {opts.rootTensor}")
            v, hybrid = self._view(label, "tensor", t)
            call = Call("broadcast", t.dtype, root=root, count=t.numel(), itemsize=t.element_size(),
                        modelled=hybrid)

            def launch(run, rows):
                b = as_transport(run.buf(v, out=self._rank != root), reducing=False)
                o = run.opts(BroadcastOptions, rootRank=root)
                w = run.engine.backend.broadcast([b], o)
                return [w], [t], dict(model="broadcast", count=t.numel(), itemsize=call.itemsize, root=root)
            return call, launch, [v]
        return self._issue(label, build, opts)

    def reduce(self, tensors, opts=None) -> WorkHybrid:
        """Reduce every rank's tensor into the root's (``opts.rootRank``); the others are left as they were."""
        label = "reduce"
        opts = _opts(opts, ReduceOptions)

        def build():
            t = self._single(label, tensors)
            root = self._root(label, opts.rootRank)
            v, hybrid = self._view(label, "tensor", t)
            name, factor = reduce_spec(opts.reduceOp)
            scale = check_reduce(label, name, t.dtype, factor)
            call = Call("reduce", t.dtype, name, root=root, count=t.numel(), itemsize=t.element_size(),
                        modelled=hybrid)

            def launch(run, rows):
                is_root = self._rank == root
                b = as_transport(run.buf(v, out=is_root), reducing=True)
                if not is_root and not run.engine.native_reduce:
                    # Gloo uses a non-root's buffer as scratch; NCCL leaves it alone, and so do we.
                    b = b.clone()
                engine_op, (b,) = run.reduce_op(name, scale, [b], in_place=True, original=opts.reduceOp)
                if is_root:
                    run.average(name, [b])
                o = run.opts(ReduceOptions, reduceOp=engine_op, rootRank=root)
                w = run.engine.backend.reduce([b], o)
                return [w], [t], dict(model="reduce", count=t.numel(), itemsize=call.itemsize, root=root)
            return call, launch, [v]
        return self._issue(label, build, opts)

    def gather(self, output_tensors, input_tensors, opts=None) -> WorkHybrid:
        """The root receives every rank's input in its list of ``size`` outputs (others pass ``[]``)."""
        label = "gather"
        opts = _opts(opts, GatherOptions)

        def build():
            root = self._root(label, opts.rootRank)
            inp = self._single(label, input_tensors)
            vin, hybrid = self._view(label, "input", inp)
            vouts, outs = [], []
            if self._rank == root:
                if len(output_tensors) != 1:
                    raise ArgumentError(f"{label}: the root needs one list of {self._size} outputs")
                outs = self._list(label, "output_tensors[0]", output_tensors[0], self._size)
                for i, o in enumerate(outs):
                    v, h = self._view(label, f"outputs[{i}]", o)
                    vouts.append(v)
                    hybrid |= h
                _same(label, inp, outs, "outputs")
            elif output_tensors and any(len(x) for x in output_tensors):
                raise ArgumentError(f"{label}: only the root (rank {root}) passes outputs")
            call = Call("gather", inp.dtype, root=root, count=inp.numel(), itemsize=inp.element_size(),
                        modelled=hybrid)

            def launch(run, rows):
                bi = as_transport(run.buf(vin), reducing=False)
                bo = [[as_transport(run.buf(v, out=True), reducing=False) for v in vouts]] if vouts else []
                o = run.opts(GatherOptions, rootRank=root)
                w = run.engine.backend.gather(bo, [bi], o)
                return [w], [list(outs)], dict(model="gather", count=inp.numel(), itemsize=call.itemsize, root=root)
            return call, launch, [vin, *vouts]
        return self._issue(label, build, opts)

    def scatter(self, output_tensors, input_tensors, opts=None) -> WorkHybrid:
        """The root's list of ``size`` inputs is split: input i lands in rank i's output (others pass ``[]``)."""
        label = "scatter"
        opts = _opts(opts, ScatterOptions)

        def build():
            root = self._root(label, opts.rootRank)
            out = self._single(label, output_tensors)
            vout, hybrid = self._view(label, "output", out)
            vins = []
            if self._rank == root:
                if len(input_tensors) != 1:
                    raise ArgumentError(f"{label}: the root needs one list of {self._size} inputs")
                ins = self._list(label, "input_tensors[0]", input_tensors[0], self._size)
                for i, x in enumerate(ins):
                    v, h = self._view(label, f"inputs[{i}]", x)
                    vins.append(v)
                    hybrid |= h
                _same(label, out, ins, "inputs")
            elif input_tensors and any(len(x) for x in input_tensors):
                raise ArgumentError(f"{label}: only the root (rank {root}) passes inputs")
            call = Call("scatter", out.dtype, root=root, count=out.numel(), itemsize=out.element_size(),
                        modelled=hybrid)

            def launch(run, rows):
                bo = as_transport(run.buf(vout, out=True), reducing=False)
                bi = [[as_transport(run.buf(v), reducing=False) for v in vins]] if vins else []
                o = run.opts(ScatterOptions, rootRank=root)
                w = run.engine.backend.scatter([bo], bi, o)
                return [w], [out], dict(model="scatter", count=out.numel(), itemsize=call.itemsize, root=root)
            return call, launch, [vout, *vins]
        return self._issue(label, build, opts)

    # -- all_to_all -----------------------------------------------------------------------------

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None) -> WorkHybrid:
        """Rank i's input block j goes to rank j's output block i; split sizes count dim-0 rows (uneven allowed)."""
        label = "all_to_all"

        def build():
            vin, hi = self._view(label, "input", input)
            vout, ho = self._view(label, "output", output)
            if input.dtype != output.dtype:
                raise ArgumentError(f"{label}: output is {output.dtype}, input is {input.dtype}")
            p = self._size
            in_rows = input.shape[0] if input.dim() else 1
            out_rows = output.shape[0] if output.dim() else 1
            in_w = input.numel() // in_rows if in_rows else 0
            out_w = output.numel() // out_rows if out_rows else 0
            if in_rows and out_rows and in_w != out_w:
                raise ArgumentError(f"{label}: a row of the input has {in_w} elements, a row of the output {out_w}")
            width = in_w or out_w
            ins = self._splits(label, "input", input_split_sizes, in_rows)
            outs = self._splits(label, "output", output_split_sizes, out_rows)
            send = tuple(s * width for s in ins)
            recv = tuple(s * width for s in outs)
            call = Call("all_to_all", input.dtype, count=0, itemsize=input.element_size(), send=send,
                        recv=recv, modelled=hi or ho)

            def launch(run, rows):
                bi = rows_view(run.buf(vin))
                bo = rows_view(run.buf(vout, out=True))
                w = run.engine.backend.alltoall_base(bo, bi, list(outs), list(ins), run.opts(AllToAllOptions))
                return [w], output, self._a2a_model(send, recv, rows, call.itemsize)
            return call, launch, [vin, vout]
        return self._issue(label, build, opts)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None) -> WorkHybrid:
        """Rank i's ``input_tensors[j]`` lands in rank j's ``output_tensors[i]`` (sizes may differ per pair)."""
        label = "all_to_all"

        def build():
            ins = self._list(label, "input_tensors", input_tensors, self._size)
            outs = self._list(label, "output_tensors", output_tensors, self._size)
            vins, vouts, hybrid = [], [], False
            for i, (x, o) in enumerate(zip(ins, outs)):
                vx, hx = self._view(label, f"inputs[{i}]", x)
                vo, ho = self._view(label, f"outputs[{i}]", o)
                if x.dtype != ins[0].dtype or o.dtype != ins[0].dtype:
                    raise ArgumentError(f"{label}: every input and output must be {ins[0].dtype}")
                vins.append(vx)
                vouts.append(vo)
                hybrid |= hx or ho
            send = tuple(x.numel() for x in ins)
            recv = tuple(o.numel() for o in outs)
            call = Call("all_to_all", ins[0].dtype, itemsize=ins[0].element_size(), send=send, recv=recv,
                        modelled=hybrid)

            def launch(run, rows):
                bi = [as_transport(run.buf(v), reducing=False) for v in vins]
                bo = [as_transport(run.buf(v, out=True), reducing=False) for v in vouts]
                if len({t.numel() for t in bi + bo}) == 1:
                    w = run.engine.backend.alltoall(bo, bi, run.opts(AllToAllOptions))
                else:
                    # Gloo's list all_to_all wants one size throughout: run the
                    # split form on packed copies and unpack into the outputs.
                    packed_in = torch.cat(bi)
                    packed_out = torch.empty(sum(t.numel() for t in bo), dtype=packed_in.dtype)
                    w = run.engine.backend.alltoall_base(packed_out, packed_in, [t.numel() for t in bo],
                                                         [t.numel() for t in bi], run.opts(AllToAllOptions))

                    def unpack(outs=tuple(bo), packed=packed_out):
                        for o, part in zip(outs, packed.split([t.numel() for t in outs])):
                            o.copy_(part)
                    run.then(unpack)
                return [w], list(outs), self._a2a_model(send, recv, rows, call.itemsize)
            return call, launch, vins + vouts
        return self._issue(label, build, opts)

    def _splits(self, label: str, what: str, splits, rows: int) -> list[int]:
        p = self._size
        splits = [int(s) for s in (splits or [])]
        if not splits:
            if rows % p:
                raise ArgumentError(f"{label}: the {what}'s {rows} rows do not split evenly over {p} ranks; "
                                    "pass split sizes")
            return [rows // p] * p
        if len(splits) != p or any(s < 0 for s in splits):
            raise ArgumentError(f"{label}: {what} split sizes must be {p} non-negative row counts, got {splits}")
        if sum(splits) != rows:
            raise ArgumentError(f"{label}: {what} split sizes add up to {sum(splits)} rows, the {what} has {rows}")
        return splits

    def _a2a_model(self, send, recv, rows, itemsize) -> dict:
        p = self._size
        if rows is not None:  # every rank's send sizes came with the peer check: the exact matrix
            matrix = send_matrix(rows, p)
        else:  # without it only this rank's row is known: assume the others send alike
            matrix = tuple(tuple(send) for _ in range(p))
        flat = {x for row in matrix for x in row}
        if len(flat) == 1:
            return dict(model="all_to_all", count=flat.pop(), itemsize=itemsize)
        return dict(model="all_to_all", count=0, itemsize=itemsize, splits=matrix)

    # -- barrier --------------------------------------------------------------------------------

    def barrier(self, opts=None) -> WorkHybrid:
        """Every rank waits for all (Gloo barrier); placed on the timeline as a barrier of the group's slots."""
        label = "barrier"

        def build():
            call = Call("barrier", None, modelled=True)

            def launch(run, rows):
                w = self._gloo.barrier(opts if isinstance(opts, BarrierOptions) else BarrierOptions())
                return [w], [], dict(model="barrier", count=0, itemsize=1)
            return call, launch, []
        return self._issue(label, build, opts)

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        """Gloo's monitored barrier (names the ranks that did not arrive)."""
        return self._gloo.monitored_barrier(timeout, wait_all_ranks) if timeout is not None else \
            self._gloo.monitored_barrier(wait_all_ranks=wait_all_ranks)
