"""Tensor parallelism through PyTorch's own engine: the styles ``parallelize_module`` applies to an
export-mode graph (:func:`~.sharding.shard_block` with ``mode="export"``).

Column-parallel linears take ``ColwiseParallel``; row-parallel ones :func:`row_style`, a
``RowwiseParallel`` that sums the partial outputs in place and then adds the bias whole, as the
plan's model of tensor parallelism (and Megatron) does.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from interop.live.tensor_parallel.analysis import TPPlan


def export_styles(plan: TPPlan) -> dict[str, str]:
    """For ``parallelize_module``: each linear's module path in an export-mode graph -> ``colwise`` / ``rowwise``."""
    out = {}
    for target, spec in plan.params.items():
        if target.endswith(".weight"):
            out[target.rsplit(".", 1)[0]] = "colwise" if spec.dim == 0 else "rowwise"
    return out


class _SumInPlace(torch.autograd.Function):
    """All-reduce (sum) a tensor-parallel group's partial outputs in place; backward: the gradient as it is
    (every rank's partial output contributed to the sum with weight one)."""

    @staticmethod
    def forward(ctx, partial, group):
        # `partial` is the row-parallel matmul's own output (a view of it: to_local), which nothing saves for
        # backward: summing into it adds no buffer. A later in-place use of a saved alias would still be caught
        # by autograd's version counter.
        dist.all_reduce(partial, group=group)
        return partial.view_as(partial)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def row_style():
    """``RowwiseParallel`` for a :class:`~.sharding.RowParallelLinear`: the weight sharded by input features, the
    partial outputs summed (all_reduce), then the bias added whole. (DTensor's own ``RowwiseParallel`` adds a
    replicated bias to the partial sums by dividing it by the degree first: one more kernel per layer and rank,
    which the plan's model of tensor parallelism does not have.)"""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import RowwiseParallel

    class RowwiseBiasAfter(RowwiseParallel):
        def _partition_linear_fn(self, name, module, device_mesh):
            module.register_parameter("weight", nn.Parameter(
                distribute_tensor(module.weight, device_mesh, [Shard(1)], src_data_rank=self.src_data_rank),
                requires_grad=module.weight.requires_grad))

        @staticmethod
        def _prepare_output_fn(output_layouts, use_local_output, mod, outputs, device_mesh):
            # The partial sums all-reduced in place, as the plan's model of tensor parallelism (and Megatron)
            # does: DTensor's Partial -> Replicate goes through the functional all_reduce, which copies its
            # input first (measured +4.4 % on the step). The gradient of a sum is replicated.
            partial = outputs.to_local(grad_placements=[Replicate()])
            out = _SumInPlace.apply(partial, device_mesh.get_group())
            # (distribute_module makes the bias a replicated DTensor: its local tensor is the whole bias)
            return out if mod.bias is None else out + mod.bias.to_local()

    return RowwiseBiasAfter()


def parallel_styles(plan: TPPlan, prefix: str = "") -> dict:
    """``parallelize_module``'s plan for one export-mode block: ``ColwiseParallel`` / :func:`row_style` per
    linear, under ``prefix`` (the block's path in the stage module)."""
    from torch.distributed.tensor.parallel import ColwiseParallel

    return {f"{prefix}{path}": ColwiseParallel() if style == "colwise" else row_style()
            for path, style in export_styles(plan).items()}


__all__ = ["export_styles", "parallel_styles", "row_style"]
