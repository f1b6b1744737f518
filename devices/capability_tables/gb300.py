"""NVIDIA GB300 (Blackwell Ultra, sm_103): FP8/NVFP4 tensor cores; FP64 and INT8 cut to a trickle."""

from devices.capability_tables import _cuda
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _cuda_numerics as cn

CAPABILITIES = Capabilities(
    kind="gb300",
    compute=_cuda.rules(fp8=True, fp4=True),
    cuda=CudaIdentity(
        major=10, minor=3, multi_processor_count=160, l2_cache_size=None,
        source="NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra' (160 SMs); datacrunch.io B300 vs B200 "
               "comparison ('B300 is SM103')", status="secondary", note="no L2 figure found; left unset"),
    notes=(_cuda.TF32_NOTE,
           "float64 runs but at 1.25 TFLOPS (Blackwell Ultra has essentially no FP64) and int8 GEMMs at 0.165 POPS: "
           "see the catalogue's peak figures"),
    rounding=cn.ROUNDING_BLACKWELL,
    block_formats=cn.BLACKWELL_BLOCK_FORMATS,
    accumulation=cn.accumulation(fp8=True, block_scaled=True),
)
