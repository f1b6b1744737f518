"""AWS Trainium2, the chip of trn2.48xlarge and the Trn2 UltraServer.

Capabilities: AWS Trainium2 (Trn2, NeuronCore-v3): dtypes per op class under the Neuron stack.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _neuron as n
from devices.chips import _neuron_numerics as nn
from devices.sources import SEMIANALYSIS_TRN2, TRAINIUM2_DOCS

_DOCS = TRAINIUM2_DOCS.cite()
_ERA = "Neuron docs v2.29 era; v2.21 listed 655 BF16 / 1,287 FP8"

CHIP = Chip(
    kind="trn2",
    name="AWS Trainium2 (Trn2)",
    vendor="aws",
    family="trainium",
    peak={
        "bfloat16": Figure(667e12, "FLOP/s", _DOCS, "published", f"dense, 8 NeuronCore-v3; {_ERA}"),
        "float16": Figure(667e12, "FLOP/s", _DOCS, "published", "dense; docs list BF16/FP16/TF32 together"),
        "float8": Figure(1299e12, "FLOP/s", _DOCS, "published", f"dense FP8; {_ERA}"),
        "float32": Figure(181e12, "FLOP/s", _DOCS, "published", "docs: 181 FP32 TFLOPS"),
    },
    hbm_capacity=Figure(96 * 2**30, "B", _DOCS, "published", "96 GiB, 4 HBM stacks"),
    hbm_bandwidth=Figure(2.9e12, "B/s", _DOCS, "published", "2.9 TB/s (the NKI guide of one release says 3 TB/s)"),
    scale_up_bandwidth=Figure(
        640e9, "B/s", TRAINIUM2_DOCS.cite("NeuronLink-v3 1.28 TB/s per chip"),
        "published",
        "1.28 TB/s per chip across all its NeuronLinks (1,024 GB/s inside a trn2.48xlarge + 256 GB/s of "
        "UltraServer rings), read as a bidirectional total like NVIDIA's figures (AWS does not say); "
        "per direction = 1.28e12/2 = 640 GB/s"),
    scale_up_fabric="neuronlink-v3",
    power=Figure(500.0, "W", SEMIANALYSIS_TRN2.cite("about 500 W per Trainium2"), "estimated",
                 "~500 W: a third party's estimate; AWS publishes no Trainium2 power"),
    unset={"price": "no AWS price for trn2 instances was read from a vendor page, and third-party figures "
                    "conflict; left unset rather than invented"},
)


CAPABILITIES = Capabilities(
    kind="trn2",
    compute=(
        n.COMPLEX_REFUSED, n.FLOAT64_REFUSED, n.FNUZ_REFUSED, n.E4M3FN_REFUSED, n.E8M0_REFUSED, n.FLOAT4_REFUSED,
        n.SCALED_FP8_UNDOCUMENTED, n.INT_GEMM_WIDE_REFUSED, n.INT_GEMM_NARROW_CONVERTED, n.INT_SCALED_REFUSED,
        n.INT64_CONVERTED, n.FLOAT_NATIVE, n.fp8_native(("float8_e5m2",), n.NC_V3), n.NARROW_INT_NATIVE,
    ),
    cuda=CudaIdentity(
        major=8, minor=0, multi_processor_count=8, l2_cache_size=None,
        source=f"{n.NC_V3}; AWS Neuron docs, Trainium2 architecture (8 NeuronCore-v3 per chip)",
        status="assumption",
        note="a documented answer, not a GPU's: (8, 0) is the capability whose feature gates libraries check "
             "(BF16, TF32) the chip meets without meeting the next one (float8_e4m3fn GEMMs, sm_89: Trn2 "
             "refuses F8E4M3FN); multi_processor_count is NeuronCores per chip"),
    notes=(n.FP32_MATMUL_NOTE,),
    rounding=nn.rounding(fp8=("float8_e5m2",)),
    accumulation=(nn.accumulate_fp32(("float8_e5m2",)), nn.ACCUMULATE_FP32_INPUTS),
)
