"""NVIDIA H200 SXM (Hopper, sm_90): the H100's GH100 die with more HBM; same dtypes per op class."""

from devices.capability_tables import _cuda
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _cuda_numerics as cn

CAPABILITIES = Capabilities(
    kind="h200",
    compute=_cuda.rules(fp8=True, fp4=False),
    cuda=CudaIdentity(
        major=9, minor=0, multi_processor_count=132, l2_cache_size=50 * 2**20,
        source=f"{_cuda.CC_TABLE}; NVIDIA H200 datasheet (same Hopper GH100 compute as H100 SXM5: 132 SMs, 50 MB L2)",
        status="secondary", note="SM count and L2 taken from the H100 SXM5, whose GH100 die the H200 shares"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_NEAREST_ONLY,
    accumulation=cn.accumulation(fp8=True, block_scaled=False),
)
