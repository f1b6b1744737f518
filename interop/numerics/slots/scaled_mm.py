"""Block-scaled matrix multiplication: ``torch._scaled_mm`` with MX / NVFP4 scales on emulated slots,
and :func:`scaled_matmul` on :class:`QuantizedTensor` operands.

CUDA (sm_100) takes block scales in ``torch._scaled_mm``; the CPU kernel an
emulated slot runs does not. The slot's own ``_scaled_mm`` kernel
(csrc/aten/HybridScaledMm.cpp) holds every call to CUDA's contract and sends
block-scaled ones to ``hybrid::_scaled_mm`` / ``hybrid::_scaled_mm_v2``
(defined here, same schemas as aten's), whose CPU kernels dequantize each
operand exactly (an element times its power-of-two or E4M3 scale is exact in
float32) and multiply in float32: the accumulation every kind in the catalogue
documents for these formats. Scales arrive in CUDA's swizzled layout
(:func:`swizzle`, torchao's ``to_blocked``) or, for v2 with
``SwizzleType.NO_SWIZZLE``, as plain (rows, K / block) matrices.
"""

from __future__ import annotations

import torch

from interop.numerics.maths.elements import E2M1, e8m0_values

# at::blas::ScalingType and SwizzleType (ATen/BlasBackend.h).
TENSOR_WISE, ROW_WISE, BLOCK_1X16, BLOCK_1X32 = 0, 1, 2, 3
NO_SWIZZLE, SWIZZLE_32_4_4 = 0, 1
OUTPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
"""Result dtypes a block-scaled ``_scaled_mm`` produces here."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def swizzle(scales: torch.Tensor) -> torch.Tensor:
    """CUDA's block-scale layout (cuBLAS "1D block scaling factors layout"; torchao ``to_blocked``) of a
    (rows, cols) scale matrix: padded to (128 * ceil(rows / 128), 4 * ceil(cols / 4)), tiles of 128 x 4
    stored 32 x 16 with rows interleaved by 32; returned flat."""
    rows, cols = scales.shape
    row_blocks, col_blocks = _ceil_div(rows, 128), _ceil_div(cols, 4)
    padded = torch.zeros((row_blocks * 128, col_blocks * 4), dtype=scales.dtype, device=scales.device)
    padded[:rows, :cols] = scales
    tiles = padded.view(row_blocks, 128, col_blocks, 4).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1).contiguous()


def unswizzle(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The (rows, cols) scale matrix of a swizzled layout (the inverse of :func:`swizzle`)."""
    row_blocks, col_blocks = _ceil_div(rows, 128), _ceil_div(cols, 4)
    tiles = flat.reshape(row_blocks, col_blocks, 32, 4, 4).transpose(2, 3)
    return tiles.reshape(row_blocks, col_blocks, 128, 4).permute(0, 2, 1, 3).reshape(row_blocks * 128,
                                                                                     col_blocks * 4)[:rows, :cols]


def _operand(data: torch.Tensor, scale: torch.Tensor, swizzled: bool) -> torch.Tensor:
    """float32 (rows, K) values of a row-major block-scaled operand (rows, K) or packed FP4 (rows, K / 2)."""
    rows = data.shape[0]
    if data.dtype == torch.float4_e2m1fn_x2:
        packed = data.contiguous().view(torch.uint8)
        codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(rows, -1)
        values, block = E2M1.decode(codes), 16
    else:
        values, block = data.float(), 32
    k = values.shape[1]
    cols = _ceil_div(k, block)
    scale = unswizzle(scale.reshape(-1), rows, cols) if swizzled else scale.reshape(rows, cols)
    per_block = e8m0_values(scale) if scale.dtype == torch.float8_e8m0fnu else scale.float()
    padded = torch.nn.functional.pad(values, (0, cols * block - k)).view(rows, cols, block)
    return (padded * per_block.unsqueeze(-1)).reshape(rows, cols * block)[:, :k]


def _finish(product: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    if out_dtype not in OUTPUT_DTYPES:
        raise ValueError(f"out_dtype: a block-scaled _scaled_mm produces {', '.join(map(str, OUTPUT_DTYPES))}; "
                         f"got {out_dtype}")
    if bias is not None:
        product = product + bias.float()
    return product.to(out_dtype)


def _scaled_mm_cpu(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                   use_fast_accum=False):
    a = _operand(mat1, scale_a, swizzled=True)
    b = _operand(mat2.t(), scale_b, swizzled=True)
    return _finish(a @ b.t(), bias, out_dtype or torch.bfloat16)


def _tensor_factor(scales, recipes) -> float | torch.Tensor:
    # NVFP4 through v2 may add a per-tensor FP32 scale after the E4M3 block scales.
    factor = 1.0
    for scale, recipe in zip(scales[1:], recipes[1:]):
        if recipe != TENSOR_WISE:
            raise ValueError(f"scale recipes: after a block scale only a TensorWise scale may follow, got {recipes}")
        factor = factor * scale.float().reshape(())
    return factor


def _scaled_mm_v2_cpu(mat1, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias=None,
                      out_dtype=None, contraction_dim=(), use_fast_accum=False):
    if contraction_dim and list(contraction_dim) != [1, 0]:
        raise ValueError(f"contraction_dim: block-scaled scaled_mm contracts mat1's dim 1 with mat2's dim 0; "
                         f"got {list(contraction_dim)}")
    swizzled_a = bool(swizzle_a) and swizzle_a[0] == SWIZZLE_32_4_4
    swizzled_b = bool(swizzle_b) and swizzle_b[0] == SWIZZLE_32_4_4
    a = _operand(mat1, scale_a[0], swizzled=swizzled_a)
    b = _operand(mat2.t(), scale_b[0], swizzled=swizzled_b)
    product = (a @ b.t()) * (_tensor_factor(scale_a, recipe_a) * _tensor_factor(scale_b, recipe_b))
    return _finish(product, bias, out_dtype or torch.bfloat16)


_SCHEMA = ("_scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
           "Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor")
_SCHEMA_V2 = ("_scaled_mm_v2(Tensor self, Tensor mat2, Tensor[] scale_a, int[] recipe_a, int[] swizzle_a, "
              "Tensor[] scale_b, int[] recipe_b, int[] swizzle_b, Tensor? bias, ScalarType? out_dtype, "
              "int[] contraction_dim=[], bool use_fast_accum=False) -> Tensor")
_library: torch.library.Library | None = None


def register() -> None:
    """Define ``hybrid::_scaled_mm`` and ``hybrid::_scaled_mm_v2`` with their CPU kernels (once)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("hybrid", "FRAGMENT")
    library.define(_SCHEMA)
    library.define(_SCHEMA_V2)
    library.impl("_scaled_mm", _scaled_mm_cpu, "CPU")
    library.impl("_scaled_mm_v2", _scaled_mm_v2_cpu, "CPU")
    _library = library


def scaled_matmul(a, b, *, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``a @ b.T`` of two :class:`~interop.numerics.QuantizedTensor` s blocked along their last (K)
    dimension (``b`` laid out like an ``nn.Linear`` weight, (N, K)), accumulated in float32: each
    operand is dequantized exactly (element times scale) and the product is one float32 matmul."""
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"scaled_matmul: the last (K) dimensions differ: {tuple(a.shape)} and {tuple(b.shape)}")
    return (a.dequantize(torch.float32) @ b.dequantize(torch.float32).t()).to(out_dtype)
