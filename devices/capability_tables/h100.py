"""NVIDIA H100 SXM5 (Hopper, sm_90): dtypes per op class under PyTorch on CUDA."""

from devices.capability_tables import _cuda
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _cuda_numerics as cn

CAPABILITIES = Capabilities(
    kind="h100",
    compute=_cuda.rules(fp8=True, fp4=False),
    cuda=CudaIdentity(
        major=9, minor=0, multi_processor_count=132, l2_cache_size=50 * 2**20,
        source=f"{_cuda.CC_TABLE}; NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5: 132 SMs, "
               "50 MB L2)", status="published"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_NEAREST_ONLY,
    accumulation=cn.accumulation(fp8=True, block_scaled=False),
)
