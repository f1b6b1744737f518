"""AWS Trainium3, the chip of the Trn3 UltraServer (144 chips on NeuronSwitch-v1).

Capabilities: AWS Trainium3 (Trn3, NeuronCore-v4): dtypes per op class under the Neuron stack (OCP MXFP8/MXFP4).
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _neuron as n
from devices.chips import _neuron_numerics as nn
from devices.sources import TRAINIUM3_DOCS, TRN3_POWER_PRESS

_DOCS = TRAINIUM3_DOCS.cite()

CHIP = Chip(
    kind="trn3",
    name="AWS Trainium3 (Trn3)",
    vendor="aws",
    family="trainium",
    peak={
        "bfloat16": Figure(671e12, "FLOP/s", _DOCS, "published", "dense, 8 NeuronCore-v4; BF16/FP16/TF32 671"),
        "float16": Figure(671e12, "FLOP/s", _DOCS, "published", "dense; docs list BF16/FP16/TF32 together"),
        "float8": Figure(2517e12, "FLOP/s", _DOCS, "published", "dense MXFP8 (microscaling FP8)"),
        "float4": Figure(2517e12, "FLOP/s", _DOCS, "published", "dense MXFP4, same rate as MXFP8"),
        "float32": Figure(183e12, "FLOP/s", _DOCS, "published", "docs: 183 FP32 TFLOPS"),
    },
    hbm_capacity=Figure(144 * 2**30, "B", _DOCS, "published", "144 GiB"),
    hbm_bandwidth=Figure(4.9e12, "B/s", _DOCS, "published", "4.9 TB/s (the NKI architecture guide says 4.7 TB/s)"),
    scale_up_bandwidth=Figure(
        1.28e12, "B/s", TRAINIUM3_DOCS.cite("NeuronLink-v4 2.56 TB/s per device"), "published",
        "2.56 TB/s per chip, read as a bidirectional total like NVIDIA's figures (AWS does not say); "
        "per direction = 2.56e12/2 = 1.28 TB/s; all-to-all through NeuronSwitch-v1 in the UltraServer"),
    scale_up_fabric="neuronlink-v4",
    power=Figure(1000.0, "W", TRN3_POWER_PRESS.cite(), "estimated",
                 "~1 kW, inferred from a remark: AWS's Prasad Kalyanaraman said Trainium3 needs liquid cooling, "
                 "'when a chip goes above 1,000 watts, that's when they require liquid cooling'; no wattage "
                 "confirmed by AWS"),
    unset={"price": "no public Trn3 UltraServer price was found (AWS had announced none when read); left unset "
                    "rather than invented"},
)


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
