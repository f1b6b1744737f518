"""Numerics of PyTorch on CUDA (NVIDIA GPUs): rounding, block-scaled formats, GEMM accumulation, with sources.

Kind files take these into their ``Capabilities`` (``rounding=``, ``block_formats=``, ``accumulation=``).
"""

from __future__ import annotations

from devices.capability_numerics import Accumulation, BlockFormat, Rounding
from devices.chips._cuda import TF32_NOTE

ROUND_NEAREST = ("PyTorch c10/util/BFloat16.h and Half.h: float -> bfloat16/half conversions round to nearest even "
                 "(https://github.com/pytorch/pytorch/blob/main/c10/util/BFloat16.h); on CUDA through "
                 "__float2bfloat16/__float2half, round-to-nearest-even per the CUDA Math API "
                 "(https://docs.nvidia.com/cuda/cuda-math-api/)")
CVT_RS = ("NVIDIA PTX ISA 8.7, cvt: .rs (stochastic rounding with a caller-supplied 32-bit rbits operand) for "
          "f32 -> f16x2, bf16x2, e4m3x4/e5m2x4, e2m3x4/e3m2x4 and e2m1x4, sm_100a/sm_103a "
          "(https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cvt)")
CUBLAS_BLOCK = ("cuBLAS documentation, 1D block quantization and block-scaled matmuls (MXFP8 with UE8M0 scales per "
                "32 elements, NVFP4 with UE4M3 scales per 16 elements and an FP32 tensor scale; scale = amax / max "
                "rounded up to a power of two for UE8M0) (https://docs.nvidia.com/cuda/cublas/#d-block-quantization)")
TCGEN05 = ("NVIDIA PTX ISA, tcgen05.mma block_scale: .kind::mxf8f6f4 (E4M3, E5M2, E3M2, E2M3, E2M1 with UE8M0 "
           "scales per 32), .kind::mxf4 / .kind::mxf4nvf4 (E2M1 with UE8M0 per 32 or UE4M3 per 16), FP32 "
           "accumulators (https://docs.nvidia.com/cuda/parallel-thread-execution/#tcgen05-mma); cuTile "
           "mma_scaled table (https://docs.nvidia.com/cuda/cutile-python/generated/cuda.tile.mma_scaled.html)")
TORCHAO_NVFP4 = "torchao 0.18 prototype.mx_formats.nvfp4_quantize (the arithmetic interop.numerics matches bit for bit)"
REDUCED_REDUCTION = ("PyTorch CUDA semantics notes, 'Reduced Precision Reduction in FP16/BF16 GEMMs': cuBLAS may "
                     "reduce split-K partial sums in reduced precision unless "
                     "torch.backends.cuda.matmul.allow_fp16/bf16_reduced_precision_reduction = False "
                     "(https://pytorch.org/docs/stable/notes/cuda.html)")
CUBLASLT_FP8 = ("cuBLAS documentation, cublasLtMatmul FP8: compute type CUBLAS_COMPUTE_32F; "
                "CUBLASLT_MATMUL_DESC_FAST_ACCUM (torch._scaled_mm use_fast_accum=True) trades accumulation precision "
                "for speed (https://docs.nvidia.com/cuda/cublas/#cublasltmatmuldescattributes-t)")
DEEPSEEK_FP8 = ("DeepSeek-V3 technical report, section 3.3.2 (arXiv 2412.19437): FP8 GEMM accumulation on H800 tensor "
                "cores keeps about 14 bits")

ROUNDING_NEAREST_ONLY = Rounding(
    default="nearest", stochastic_scope="none", stochastic_dtypes=(), switch="",
    algorithm="no stochastic rounding instruction before Blackwell", source=ROUND_NEAREST, status="published")

ROUNDING_BLACKWELL = Rounding(
    default="nearest", stochastic_scope="conversion_instructions",
    stochastic_dtypes=("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"),
    switch="PTX cvt.rs in a kernel that chooses it (NVIDIA's NVFP4 training recipe rounds gradients this way); "
           "PyTorch's and cuBLAS's own results round to nearest",
    algorithm="cvt.rs rounds with the kernel's own random bits (rbits); modelled as exactly unbiased stochastic "
              "rounding from the slot's torch generator (an assumption about the bits, not the statistics)",
    source=f"{CVT_RS}; {ROUND_NEAREST}", status="published")


def _block(fmt: str, element: str, rule: str, source: str, status: str, note: str = "") -> BlockFormat:
    return BlockFormat(fmt, 32, element, "e8m0", rule, source, status, note)


BLACKWELL_BLOCK_FORMATS = (
    _block("mxfp8_e4m3", "e4m3", "rceil", f"{CUBLAS_BLOCK}; {TCGEN05}", "published"),
    _block("mxfp8_e5m2", "e5m2", "rceil", f"{CUBLAS_BLOCK}; {TCGEN05}", "published"),
    *(_block(fmt, element, "rceil", TCGEN05, "assumption",
             "the tensor cores take these operands (published); cuBLAS documents its scale rule for the MXFP8 "
             "outputs it writes, and software quantizing FP6/FP4 operands is assumed to use the same rule")
      for fmt, element in (("mxfp6_e3m2", "e3m2"), ("mxfp6_e2m3", "e2m3"), ("mxfp4_e2m1", "e2m1"))),
    BlockFormat("nvfp4", 16, "e2m1", "e4m3 + fp32 tensor scale", "nvfp4", f"{CUBLAS_BLOCK}; {TORCHAO_NVFP4}",
                "published", note="tensor scale = amax / (448 * 6); block scales rounded to E4M3 to nearest"),
)

ACCUMULATE_HALF = Accumulation(
    inputs=("bfloat16", "float16"), accumulator="float32", outputs=("bfloat16", "float16", "float32"),
    source=REDUCED_REDUCTION, status="published",
    note="split-K partial sums may be reduced in the input precision under PyTorch's defaults")

ACCUMULATE_FP32_INPUTS = Accumulation(
    inputs=("float32",), accumulator="float32", outputs=("float32",), source=REDUCED_REDUCTION, status="published",
    note=TF32_NOTE)

ACCUMULATE_FP8 = Accumulation(
    inputs=("float8_e4m3fn", "float8_e5m2"), accumulator="float32", outputs=("bfloat16", "float16", "float32"),
    source=f"{CUBLASLT_FP8}; {DEEPSEEK_FP8}", status="published",
    note="the effective accumulation precision on Hopper FP8 tensor cores is reported at about 14 bits (DeepSeek-V3, "
         "secondary); NVIDIA publishes none, so it is not modelled: slots accumulate in FP32")

ACCUMULATE_BLOCK_SCALED = Accumulation(
    inputs=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "nvfp4"), accumulator="float32",
    outputs=("bfloat16", "float16", "float32"), source=TCGEN05, status="published")


def accumulation(*, fp8: bool, block_scaled: bool) -> tuple[Accumulation, ...]:
    """A generation's GEMM accumulation entries."""
    out = (ACCUMULATE_HALF, ACCUMULATE_FP32_INPUTS)
    if fp8:
        out += (ACCUMULATE_FP8,)
    if block_scaled:
        out += (ACCUMULATE_BLOCK_SCALED,)
    return out


__all__ = ["BLACKWELL_BLOCK_FORMATS", "ROUNDING_BLACKWELL", "ROUNDING_NEAREST_ONLY", "accumulation"]
