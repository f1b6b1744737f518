"""Rules of PyTorch on CUDA (NVIDIA GPUs): which dtypes its CUDA kernels and the tensor cores take.

Where the CPU (what an emulated slot runs) accepts more than CUDA does, the
rule says so, because that is where a script that runs here would fail on the
real GPU: plain matmuls on float8 or integer tensors, above all.
"""

from __future__ import annotations

from devices.capability import (
    ANY, COMPLEX, FLOAT, FLOAT4, FLOAT8, FLOAT8_FNUZ, GEMM, INTEGER, OP_CLASSES, VECTOR, Rule,
)
from devices.figure import Figure
from devices.sources import BLACKWELL_ULTRA_SOFTMAX, CUDA_PROGRAMMING_GUIDE, FLASHATTENTION3

H100_SMS = 132
H100_EXP_RATE = Figure(
    3.9e12, "exp/s", FLASHATTENTION3.cite("Section 3.1: H100 SXM5, '989 TFLOPS of FP16 matmul but only 3.9 TFLOPS "
                                          "of special functions'"), "published",
    "the special-function units (MUFU.EX2 for softmax's exponentials): 132 SMs x 16 per clock at ~1.83 GHz")


def exp_rate(sms: int, why: str, per_sm: float = 1.0, ultra: bool = False) -> Figure:
    """A GPU's exponentials per second where no figure is published: the H100's per SM (16 per clock per SM,
    :data:`CUDA_PROGRAMMING_GUIDE`) at the H100's clock on ``sms`` SMs, times ``per_sm`` (Blackwell Ultra's
    doubled SFU with ``ultra``)."""
    value = H100_EXP_RATE.value * sms / H100_SMS * per_sm
    sources = [H100_EXP_RATE.source, CUDA_PROGRAMMING_GUIDE.cite("exp2: 16 results per clock per SM")]
    if ultra:
        sources.append(BLACKWELL_ULTRA_SOFTMAX.cite("MUFU.EX2 throughput doubled over Blackwell (about 2x GB300 "
                                                    "over GB200)"))
    return Figure(value, "exp/s", "; ".join(sources), "estimated", why)


BLAS = ("PyTorch aten/src/ATen/native/cuda/Blas.cpp: addmm/mm/bmm on CUDA dispatch floating and complex types "
        "plus Half and BFloat16 only (https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/Blas.cpp)")
SCALED_MM = ("PyTorch torch._scaled_mm, the FP8 GEMM on cuBLASLt (pytorch/pytorch PR #106844, "
             "https://github.com/pytorch/pytorch/pull/106844); compute capability >= 8.9")
INT_MATMUL_ISSUE = ("pytorch/pytorch issue #44428, 'Cuda support for matrix multiplication on Long Tensor' "
                    "(open; cuBLAS has no integer GEMM): https://github.com/pytorch/pytorch/issues/44428")
INT_MM = ("PyTorch torch._int_mm: int8 x int8 -> int32 GEMM on cuBLASLt (CUDA, compute capability >= 8.0)")
NVFP4 = ("NVIDIA Blackwell architecture technical brief (NVFP4/MXFP4 tensor cores, sm_100); PyTorch "
         "torch._scaled_mm takes float4_e2m1fn_x2 with block scales on sm_100 and later")
H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet: FP64, TF32, BF16, FP16, FP8 and INT8 Tensor Cores"
A100_SHEET = "NVIDIA A100 Tensor Core GPU datasheet: FP64, TF32, BF16, FP16 and INT8 Tensor Cores (no FP8)"
CUDA_KERNELS = ("PyTorch's CUDA kernels (aten/src/ATen/native/cuda): elementwise, reduction and copy kernels "
                "dispatch every standard dtype, float64 and complex included")
CC_TABLE = "NVIDIA CUDA GPUs compute capability table (https://developer.nvidia.com/cuda-gpus)"
TF32_NOTE = ("float32 matmuls and convolutions: TF32 tensor cores when torch.backends.cuda.matmul.allow_tf32, "
             "torch.backends.cudnn.allow_tf32 or torch.set_float32_matmul_precision('high'/'medium') allow it "
             "(cuDNN convolutions allow it by default); this run computes them in float32")

_MM_ERROR = "\"addmm_cuda\" not implemented for '{scalar_type}'"

FP8_GEMM_REFUSED = Rule(
    GEMM, FLOAT8 + FLOAT4, "unsupported",
    "CUDA's plain matmul and convolution kernels take no float8/float4 tensors; FP8 GEMMs go through "
    "torch._scaled_mm", f"{BLAS}; {SCALED_MM}", "published", error=_MM_ERROR,
    instead="torch._scaled_mm (per-tensor or row-wise scales; torchao.float8 wraps it)")

INT_GEMM_REFUSED = Rule(
    GEMM, INTEGER, "unsupported", "cuBLAS has no integer GEMM: CUDA matmuls on integer tensors are not implemented",
    f"{INT_MATMUL_ISSUE}; {BLAS}", "published", error=_MM_ERROR,
    instead="cast to float32 (exact while |values| < 2**24), or torch._int_mm for int8")

FNUZ_SCALED_REFUSED = Rule(
    ("scaled_matmul",), FLOAT8_FNUZ + ("float8_e8m0fnu",), "unsupported",
    "the fnuz float8 variants are AMD MI300 formats and e8m0 is a block-scale type; NVIDIA's FP8 GEMMs take "
    "float8_e4m3fn and float8_e5m2 operands", SCALED_MM, "assumption",
    instead="float8_e4m3fn / float8_e5m2 operands")

SCALED_FP8_NATIVE = Rule(
    ("scaled_matmul",), ("float8_e4m3fn", "float8_e5m2"), "native", "FP8 tensor cores through cuBLASLt",
    f"{SCALED_MM}; {H100_SHEET}", "published")

SCALED_FP8_REFUSED_AMPERE = Rule(
    ("scaled_matmul",), ("float8_e4m3fn", "float8_e5m2"), "unsupported",
    "Ampere (sm_80) has no FP8 tensor cores", f"{SCALED_MM}; {A100_SHEET}", "published",
    error="torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+",
    instead="bfloat16 matmuls, or an H100/B200 slot")

SCALED_FP4_NATIVE = Rule(
    ("scaled_matmul",), FLOAT4, "native", "NVFP4/MXFP4 tensor cores (Blackwell, sm_100 and later)", NVFP4,
    "published")

SCALED_FP4_REFUSED = Rule(
    ("scaled_matmul",), FLOAT4, "unsupported", "FP4 tensor cores arrive with Blackwell (sm_100)", NVFP4,
    "published", instead="float8 torch._scaled_mm, or a B200/GB300 slot")

INT8_SCALED_NATIVE = Rule(("scaled_matmul",), ("int8",), "native", "INT8 tensor cores (torch._int_mm)", INT_MM,
                          "published")

OTHER_INT_SCALED_REFUSED = Rule(
    ("scaled_matmul",), INTEGER, "unsupported", "torch._int_mm takes int8 operands only", INT_MM, "published",
    instead="int8 operands")

FP8_VECTOR_AS_CPU = Rule(
    VECTOR, FLOAT8 + FLOAT4, "native",
    "PyTorch's CUDA elementwise and reduction kernels are assumed to accept float8/float4 exactly where its CPU "
    "kernels do (copy, mul, abs, where ...); both refuse arithmetic such as add and sum", CUDA_KERNELS,
    "assumption")

ALL_NATIVE = Rule(
    (ANY,), FLOAT + ("float64",) + COMPLEX + INTEGER + FLOAT8 + FLOAT4, "native",
    "CUDA kernels and tensor cores compute in these dtypes", f"{CUDA_KERNELS}; {BLAS}", "published")


def rules(chip) -> tuple[Rule, ...]:
    """The CUDA rules of a GPU generation, read off its chip record so that a format is stated once: FP8
    tensor cores (sm_89+) where the chip has a ``float8`` peak, FP4 (sm_100+) where it has a ``float4`` one."""
    fp8, fp4 = "float8" in chip.peak, "float4" in chip.peak
    scaled = (FNUZ_SCALED_REFUSED,
              SCALED_FP8_NATIVE if fp8 else SCALED_FP8_REFUSED_AMPERE,
              SCALED_FP4_NATIVE if fp4 else SCALED_FP4_REFUSED,
              INT8_SCALED_NATIVE, OTHER_INT_SCALED_REFUSED)
    return (FP8_GEMM_REFUSED, INT_GEMM_REFUSED) + scaled + (FP8_VECTOR_AS_CPU, ALL_NATIVE)


__all__ = [
    "A100_SHEET", "CC_TABLE", "H100_EXP_RATE", "H100_SHEET", "OP_CLASSES", "TF32_NOTE", "exp_rate", "rules",
]
