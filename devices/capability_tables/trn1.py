"""AWS Trainium (Trn1, NeuronCore-v2): dtypes per op class under the Neuron stack."""

from devices.capability_tables import _neuron as n
from devices.capability import Capabilities, CudaIdentity
from devices.capability_tables import _neuron_numerics as nn

CAPABILITIES = Capabilities(
    kind="trn1",
    compute=(
        n.COMPLEX_REFUSED, n.FLOAT64_REFUSED, n.FNUZ_REFUSED, n.E4M3FN_REFUSED, n.E8M0_REFUSED, n.FLOAT4_REFUSED,
        n.SCALED_FP8_UNDOCUMENTED, n.INT_GEMM_WIDE_REFUSED, n.INT_GEMM_NARROW_CONVERTED, n.INT_SCALED_REFUSED,
        n.INT64_CONVERTED, n.FLOAT_NATIVE, n.fp8_native(("float8_e5m2",), n.DATA_TYPES), n.NARROW_INT_NATIVE,
    ),
    cuda=CudaIdentity(
        major=8, minor=0, multi_processor_count=2, l2_cache_size=None,
        source=f"{n.DATA_TYPES}; AWS Neuron docs, Trainium architecture (2 NeuronCore-v2 per chip)",
        status="assumption",
        note="a documented answer, not a GPU's: (8, 0) is the capability whose feature gates libraries check "
             "(BF16, TF32) the chip meets without meeting the next one (float8_e4m3fn GEMMs, sm_89); "
             "multi_processor_count is NeuronCores per chip"),
    notes=(n.FP32_MATMUL_NOTE,),
    rounding=nn.rounding(fp8=("float8_e5m2",)),
    accumulation=(nn.accumulate_fp32(("float8_e5m2",)), nn.ACCUMULATE_FP32_INPUTS),
)
