"""AWS Trainium3 (Trn3, NeuronCore-v4): dtypes per op class under the Neuron stack (OCP MXFP8/MXFP4)."""

from devices.capability_tables import _neuron as n
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _neuron_numerics as nn

CAPABILITIES = Capabilities(
    kind="trn3",
    compute=(
        n.COMPLEX_REFUSED, n.FLOAT64_REFUSED, n.FNUZ_REFUSED, *n.E8M0_SCALES_ONLY, *n.FLOAT4_MX_ONLY,
        n.SCALED_FP8_MX, n.INT_GEMM_WIDE_REFUSED, n.INT_GEMM_NARROW_CONVERTED, n.INT_SCALED_REFUSED,
        n.INT64_CONVERTED, n.FLOAT_NATIVE,
        n.fp8_native(("float8_e4m3fn", "float8_e5m2"), f"{n.NKI_DTYPES}; {n.error_code('EVRF051')}"),
        n.NARROW_INT_NATIVE,
    ),
    cuda=CudaIdentity(
        major=9, minor=0, multi_processor_count=8, l2_cache_size=None,
        source=f"{n.NC_V4}; AWS Neuron docs, Trainium3 architecture (8 NeuronCore-v4 per chip)",
        status="assumption",
        note="a documented answer, not a GPU's: (9, 0) because float8_e4m3fn/e5m2 GEMMs (the sm_89/sm_90 gate) "
             "are native on NeuronCore-v4 while NVFP4 (the sm_100 gate) is not; multi_processor_count is "
             "NeuronCores per chip"),
    notes=(n.FP32_MATMUL_NOTE,),
    rounding=nn.rounding(fp8=("float8_e4m3fn", "float8_e5m2")),
    block_formats=(*nn.MXFP8, nn.MXFP4),
    accumulation=(nn.accumulate_fp32(("float8_e4m3fn", "float8_e5m2")), nn.ACCUMULATE_FP32_INPUTS,
                  nn.ACCUMULATE_MX),
)
