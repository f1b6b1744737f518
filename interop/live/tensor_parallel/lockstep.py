"""Running a tensor-parallel stage in one process: its ranks' graphs side by side, the collectives joint.

:class:`TensorParallelChunk` is the in-process runner's replica of a stage with ``tp`` slots:
inputs arrive on its first slot and are broadcast, each block runs its ranks' graphs (from
:func:`~.sharding.shard_block`, ``mode="local"``) node by node across the ranks
(:func:`run_lockstep`), the markers becoming all_reduces on the fabric, and the first slot's copy
of the outputs leaves (their gradients are broadcast back). The collectives are autograd
functions, so backward runs through them as Megatron's ``f`` and ``g`` do.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn
from torch.utils import _pytree as pytree

from interop.live.tensor_parallel.sharding import MARKERS, tp_region_input


class _Broadcast(torch.autograd.Function):
    """Rank 0's tensor to every rank's slot (a broadcast on the fabric); backward: rank 0's gradient (the ranks'
    gradients of a replicated input are equal)."""

    @staticmethod
    def forward(ctx, x, slots):
        import collectives

        outs = [x.view_as(x)] + [torch.empty(x.shape, dtype=x.dtype, device=torch.device("hybrid", s))
                                 for s in slots[1:]]
        collectives.broadcast([x.contiguous()] + outs[1:], root=0)
        if not x.is_floating_point():
            ctx.mark_non_differentiable(*outs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return grads[0], None


class _Take0(torch.autograd.Function):
    """The ranks' equal copies of a replicated output -> rank 0's; backward: its gradient broadcast to every
    rank."""

    @staticmethod
    def forward(ctx, *xs):
        ctx.slots = [x.device.index for x in xs]
        return xs[0].view_as(xs[0])

    @staticmethod
    def backward(ctx, grad):
        import collectives

        grad = grad.contiguous()
        outs = [grad] + [torch.empty_like(grad, device=torch.device("hybrid", s)) for s in ctx.slots[1:]]
        collectives.broadcast(outs, root=0)
        return tuple(outs)


class _SumForward(torch.autograd.Function):
    """``g``: the row-parallel partial outputs summed over the ranks (all_reduce); backward: identity."""

    @staticmethod
    def forward(ctx, *xs):
        import collectives

        xs = [x.contiguous() for x in xs]
        outs = [torch.empty_like(x) for x in xs]
        collectives.all_reduce(xs, outputs=outs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return grads


class _SumBackward(torch.autograd.Function):
    """``f``: identity; backward: the region input's gradients summed over the ranks (all_reduce)."""

    @staticmethod
    def forward(ctx, *xs):
        ctx.like = [(x.shape, x.dtype, x.device) for x in xs]
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def backward(ctx, *grads):
        import collectives

        grads = [g.contiguous() if g is not None else torch.zeros(s, dtype=d, device=dev)
                 for g, (s, d, dev) in zip(grads, ctx.like)]
        outs = [torch.empty_like(g) for g in grads]
        collectives.all_reduce(grads, outputs=outs)
        return tuple(outs)


def run_lockstep(graphs: list[fx.GraphModule], inputs: list[list]) -> list:
    """Run the ranks' graphs of one block side by side (same structure, one node at a time across the ranks),
    the markers as joint collectives; returns each rank's output."""
    interpreters = [fx.Interpreter(g) for g in graphs]
    orders = [list(g.graph.nodes) for g in graphs]
    for interp, args in zip(interpreters, inputs):
        interp.env = {}
        interp.args_iter = iter(args)
    outputs = [None] * len(graphs)
    for k, node in enumerate(orders[0]):
        if node.op == "call_function" and node.target in MARKERS:
            values = [interp.env[orders[r][k].args[0]] for r, interp in enumerate(interpreters)]
            joint = _SumBackward if node.target is tp_region_input else _SumForward
            for r, (interp, value) in enumerate(zip(interpreters, joint.apply(*values))):
                interp.env[orders[r][k]] = value
            continue
        for r, interp in enumerate(interpreters):
            n = orders[r][k]
            value = interp.run_node(n)
            if n.op == "output":
                outputs[r] = value
            else:
                interp.env[n] = value
    return outputs


class TensorParallelChunk(nn.Module):
    """A stage's blocks on ``tp`` slots (the in-process runner's replica of a tensor-parallel stage): inputs
    arrive on the first slot and are broadcast, each block runs its ranks' graphs side by side (column/row
    regions split, the rest whole on every slot, the two all_reduces on the fabric), and the first slot's copy
    of the outputs leaves (their gradients are broadcast back)."""

    def __init__(self, ranks: list[list[fx.GraphModule]], wiring, input_names, output_names, last: bool,
                 out_spec, slots: tuple[int, ...]):
        super().__init__()
        self.ranks = nn.ModuleList(nn.ModuleList(blocks) for blocks in ranks)
        self.wiring = wiring
        self.input_names, self.output_names = input_names, output_names
        self.last, self.out_spec = last, out_spec
        self.slots = tuple(slots)

    @property
    def blocks(self) -> nn.ModuleList:
        """Rank 0's blocks."""
        return self.ranks[0]

    def forward(self, *args):
        tp = len(self.slots)
        envs = [dict() for _ in range(tp)]
        for name, value in zip(self.input_names, args):
            copies = _Broadcast.apply(value, self.slots) if isinstance(value, torch.Tensor) else (value,) * tp
            for env, c in zip(envs, copies):
                env[name] = c
        for k, (ins, outs) in enumerate(self.wiring):
            results = run_lockstep([blocks[k] for blocks in self.ranks], [[env[n] for n in ins] for env in envs])
            for env, result in zip(envs, results):
                if len(outs) == 1 and not isinstance(result, (tuple, list)):
                    env[outs[0]] = result
                else:
                    env.update(zip(outs, result))
        values = []
        for n in self.output_names:
            copies = [env[n] for env in envs]
            first = copies[0]
            if isinstance(first, torch.Tensor) and first.requires_grad:
                values.append(_Take0.apply(*copies))
            else:
                values.append(first)
        if self.last:
            return pytree.tree_unflatten(values, self.out_spec)
        return tuple(values)


__all__ = ["TensorParallelChunk", "run_lockstep"]
