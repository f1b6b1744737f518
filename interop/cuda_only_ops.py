"""ATen ops torch implements for CUDA only, and what an emulated slot does with each.

An emulated slot runs the CPU's kernels on the slot's bytes (the zero-copy
fallback), so an op with a CUDA kernel and no CPU kernel has nothing to run
there. Composites that branch on the device type reach such ops on any device
that is not the CPU: ATen's LSTM and GRU cells call ``_thnn_fused_lstm_cell`` /
``_thnn_fused_gru_cell`` for a PrivateUse1 tensor as for a CUDA one.

Each such op of the installed torch is one of:

- :data:`KERNELS`: run by a kernel of ours on an emulated slot (csrc/aten), CUDA's
  own on a cuda-backed slot;
- :data:`REFUSED`: refused on an emulated slot with ``NotImplementedError``
  naming the op, the slot and what to use instead (the fallback raises it before
  anything runs). A key ending in ``*`` covers every op whose name starts so.

:func:`cuda_only_ops` reads the list from torch's own op registry
(``native_functions.yaml``, shipped with torchgen); tests/interop/test_cuda_only_ops.py
checks that every op in it is in one of the two tables, so a new torch cannot
open a silent hole.
"""

from __future__ import annotations

import functools
import os

KERNELS: dict[str, str] = {
    "aten::_thnn_fused_lstm_cell": "the fused LSTM cell (CUDA's math), one op on the slot's timeline",
    "aten::_thnn_fused_lstm_cell_backward_impl": "its backward",
    "aten::_thnn_fused_gru_cell": "the fused GRU cell (CUDA's math), one op on the slot's timeline",
    "aten::_thnn_fused_gru_cell_backward": "its backward",
    "aten::record_stream": "nothing to record: a slot's ops run in order and its allocator frees a block only "
                           "when its tensor dies",
}
"""CUDA-only ops an emulated slot runs with a kernel of ours, and what that kernel is."""

_PUBLIC_OP = ("the public op (torch.nn.functional.conv2d, batch_norm, grid_sample, affine_grid, ctc_loss, "
              "nn.LSTM/GRU...), which takes the CPU's path on a slot")
_SDPA = ("torch.nn.functional.scaled_dot_product_attention, which picks on a slot the kernel the CPU picks "
         "(the fused CUDA attention kernels have no CPU build)")
_DENSE = "keep the weight dense and call torch.nn.functional.linear (2:4 sparse kernels are CUDA-only)"
_OUT_DTYPE = ("the product in the output dtype: torch.mm(a.float(), b.float()) (CUDA's out_dtype= multiplies "
              "half-precision inputs into a float32 result)")
_SYNC_BN = ("nn.BatchNorm*d, whose statistics are per process, or gather the statistics with "
            "torch.distributed.all_reduce (nn.SyncBatchNorm's kernels are CUDA-only)")

REFUSED: dict[str, str] = {
    # cuDNN and MIOpen: torch's public ops choose them for CUDA/ROCm tensors only.
    "aten::cudnn_*": _PUBLIC_OP,
    "aten::_cudnn_*": _PUBLIC_OP,
    "aten::miopen_*": _PUBLIC_OP,
    "aten::_use_cudnn_ctc_loss": "torch.nn.functional.ctc_loss",
    "aten::_use_miopen_ctc_loss": "torch.nn.functional.ctc_loss",
    "aten::_conv_depthwise2d": "torch.nn.functional.conv2d with groups equal to the channels",
    "aten::conv_depthwise3d": "torch.nn.functional.conv3d with groups equal to the channels",
    # Fused attention.
    "aten::_scaled_dot_product_flash_attention": _SDPA,
    "aten::_scaled_dot_product_flash_attention_backward": _SDPA,
    "aten::_scaled_dot_product_efficient_attention": _SDPA,
    "aten::_scaled_dot_product_efficient_attention_backward": _SDPA,
    "aten::_scaled_dot_product_cudnn_attention": _SDPA,
    "aten::_scaled_dot_product_cudnn_attention_backward": _SDPA,
    "aten::_flash_attention_*": _SDPA,
    "aten::_efficient_attention_*": _SDPA,
    "aten::_cudnn_attention_*": _SDPA,
    "aten::_triton_scaled_dot_attention": _SDPA,
    "aten::_triton_multi_head_attention": "torch.nn.MultiheadAttention",
    "aten::_fill_mem_eff_dropout_mask_": "scaled_dot_product_attention with dropout_p",
    # Dropout's CUDA-only helpers.
    "aten::_fused_dropout": "torch.nn.functional.dropout",
    "aten::_masked_scale": "torch.nn.functional.dropout",
    # Normalisation.
    "aten::_fused_rms_norm_backward": "torch.nn.functional.rms_norm (its backward on a slot is the CPU's)",
    "aten::batch_norm_stats": _SYNC_BN,
    "aten::batch_norm_elemt": _SYNC_BN,
    "aten::batch_norm_gather_stats": _SYNC_BN,
    "aten::batch_norm_gather_stats_with_counts": _SYNC_BN,
    "aten::batch_norm_backward_reduce": _SYNC_BN,
    "aten::batch_norm_backward_elemt": _SYNC_BN,
    # Matmuls CUDA alone offers.
    "aten::mm.dtype": _OUT_DTYPE,
    "aten::mm.dtype_out": _OUT_DTYPE,
    "aten::bmm.dtype": _OUT_DTYPE,
    "aten::bmm.dtype_out": _OUT_DTYPE,
    "aten::addmm.dtype": _OUT_DTYPE,
    "aten::addmm.dtype_out": _OUT_DTYPE,
    "aten::baddbmm.dtype": _OUT_DTYPE,
    "aten::baddbmm.dtype_out": _OUT_DTYPE,
    "aten::_scaled_grouped_mm": "torch._scaled_mm on each group",
    "aten::_scaled_grouped_mm_v2": "torch._scaled_mm on each group",
    "aten::_mixed_dtypes_linear": "dequantize the weight, then torch.nn.functional.linear",
    "aten::_convert_weight_to_int4pack": ("the CPU's int4 layout (torch.ops.aten._convert_weight_to_int4pack_for_cpu "
                                          "and _weight_int4pack_mm_for_cpu), or a dequantized weight"),
    "aten::_weight_int4pack_mm": ("the CPU's int4 layout (torch.ops.aten._weight_int4pack_mm_for_cpu), or a "
                                  "dequantized weight"),
    "aten::_cslt_*": _DENSE,
    "aten::_sparse_semi_structured_*": _DENSE,
    "aten::_to_sparse_semi_structured": _DENSE,
    # Random number helpers of CUDA's Philox generator.
    "aten::_philox_*": "torch.rand / torch.randn with a torch.Generator",
}
"""CUDA-only ops an emulated slot refuses, each with what to use instead."""


def instead_for(op: str) -> str | None:
    """What to use instead of ``op`` (``"aten::name"`` or ``"aten::name.overload"``), or None when it is not
    refused."""
    base = op.split(".", 1)[0]
    for key in (op, base):
        if key in REFUSED:
            return REFUSED[key]
    families = [key for key in REFUSED if key.endswith("*") and base.startswith(key[:-1])]
    return REFUSED[max(families, key=len)] if families else None  # the most specific family


def _native_functions_path() -> str:
    import torchgen

    return os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")


_CPU_KEYS = frozenset({"CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
                       "CompositeExplicitAutogradNonFunctional"})


@functools.lru_cache(maxsize=1)
def cuda_only_ops() -> tuple[str, ...]:
    """Every ATen op (``"aten::name"`` or ``"aten::name.overload"``) of the installed torch with a dense CUDA
    kernel and no kernel a CPU tensor reaches, from torch's ``native_functions.yaml``."""
    import yaml

    with open(_native_functions_path()) as f:
        entries = yaml.safe_load(f)
    found = []
    for entry in entries:
        keys = {k.strip() for spec in (entry.get("dispatch") or {}) for k in spec.split(",")}
        if "CUDA" in keys and not keys & _CPU_KEYS:
            found.append("aten::" + entry["func"].split("(", 1)[0])
    return tuple(found)


def install() -> None:
    """Give the fallback the refusal table (at ``import interop``)."""
    from interop import _C

    _C._set_cuda_only_ops(dict(REFUSED))
