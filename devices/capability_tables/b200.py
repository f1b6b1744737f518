"""NVIDIA B200 (Blackwell, sm_100): FP8 and NVFP4/MXFP4 tensor cores."""

from devices.capability_tables import _cuda
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _cuda_numerics as cn

CAPABILITIES = Capabilities(
    kind="b200",
    compute=_cuda.rules(fp8=True, fp4=True),
    cuda=CudaIdentity(
        major=10, minor=0, multi_processor_count=148, l2_cache_size=None,
        source=f"{_cuda.CC_TABLE}; B200 18,944 CUDA cores at 128 per SM = 148 SMs (hmc-tech.com B200 listing, "
               "secondary)", status="secondary", note="no L2 figure found; left unset"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_BLACKWELL,
    block_formats=cn.BLACKWELL_BLOCK_FORMATS,
    accumulation=cn.accumulation(fp8=True, block_scaled=True),
)
