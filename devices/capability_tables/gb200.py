"""NVIDIA GB200 (one Blackwell GPU of a Grace Blackwell superchip, sm_100): as the B200."""

from devices.capability_tables import _cuda
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _cuda_numerics as cn

CAPABILITIES = Capabilities(
    kind="gb200",
    compute=_cuda.rules(fp8=True, fp4=True),
    cuda=CudaIdentity(
        major=10, minor=0, multi_processor_count=148, l2_cache_size=None,
        source=f"{_cuda.CC_TABLE}; GB200 superchip listing of 2 x 18,944 CUDA cores (hmc-tech.com, secondary)",
        status="assumption", note="per-GPU SM count taken as the B200's 148; no GB200-specific figure found"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_BLACKWELL,
    block_formats=cn.BLACKWELL_BLOCK_FORMATS,
    accumulation=cn.accumulation(fp8=True, block_scaled=True),
)
