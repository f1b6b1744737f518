"""NVIDIA A100 SXM4 (Ampere, sm_80): no FP8 tensor cores, so torch._scaled_mm refuses float8."""

from devices.capability_tables import _cuda
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _cuda_numerics as cn

CAPABILITIES = Capabilities(
    kind="a100",
    compute=_cuda.rules(fp8=False, fp4=False),
    cuda=CudaIdentity(
        major=8, minor=0, multi_processor_count=108, l2_cache_size=40 * 2**20,
        source=f"{_cuda.CC_TABLE}; NVIDIA A100 Tensor Core GPU architecture whitepaper (108 SMs, 40 MB L2)",
        status="published"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_NEAREST_ONLY,
    accumulation=cn.accumulation(fp8=False, block_scaled=False),
)
