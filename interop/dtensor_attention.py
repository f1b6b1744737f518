"""DTensor sharding rules for the attention kernel an emulated slot runs.

``F.scaled_dot_product_attention`` on a slot runs the CPU's fused kernel,
``aten::_scaled_dot_product_flash_attention_for_cpu``, where a GPU runs
``_scaled_dot_product_flash_attention``. DTensor has sharding rules for the GPU's
kernels only, so tensor-parallel attention (PyTorch's FSDP + TP example, torchtitan)
failed on a hybrid mesh with "does not have a sharding strategy registered", although
the same code runs on GPUs. The CPU kernel takes the same q, k, v and returns the same
output and log-sum-exp, so it gets the GPU kernel's rules: everything replicated,
sharded by heads (tensor parallelism) or by batch. Registered when DTensor's own
rules are imported; a CPU mesh gains them too.
"""

from __future__ import annotations

FORWARD = "_scaled_dot_product_flash_attention_for_cpu"
BACKWARD = "_scaled_dot_product_flash_attention_for_cpu_backward"


def register(matrix_ops) -> None:
    """Register both rules (``matrix_ops``: ``torch.distributed.tensor._ops._matrix_ops``, just imported)."""
    import torch
    from torch.distributed.tensor._op_schema import OpStrategy, RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy
    from torch.distributed.tensor.placement_types import Replicate, Shard

    aten = torch.ops.aten

    def placements(outputs: int, tensors: int) -> list[list]:
        # [outputs..., tensor inputs...]: replicated, sharded by heads (dim 1), sharded by batch (dim 0)
        return [[placement] * (outputs + tensors) for placement in (Replicate(), Shard(1), Shard(0))]

    def no_mask(op_schema, name: str) -> None:
        if op_schema.kwargs_schema.get("attn_mask") is not None:
            raise NotImplementedError(f"aten::{name} with attn_mask on DTensors: only is_causal or no mask has "
                                      "a sharding rule (as for CUDA's flash attention)")

    def tensor_inputs(op_schema) -> int:
        return sum(isinstance(a, OpStrategy) for a in op_schema.args_schema)

    @register_op_strategy(getattr(aten, FORWARD).default, schema_info=RuntimeSchemaInfo(3))
    def forward_strategy(op_schema):
        no_mask(op_schema, FORWARD)
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema,
                                               placements(2, tensor_inputs(op_schema)), input_index=2)

    @register_op_strategy(getattr(aten, BACKWARD).default, schema_info=RuntimeSchemaInfo(6))
    def backward_strategy(op_schema):
        no_mask(op_schema, BACKWARD)
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema,
                                               placements(3, tensor_inputs(op_schema)), input_index=3)


def install() -> None:
    """Register the rules once DTensor's matrix rules are imported (now, if they are)."""
    from interop.import_hooks import after_import

    after_import("torch.distributed.tensor._ops._matrix_ops", register)
