"""AWS Trainium (first generation), the chip of trn1.32xlarge.

Capabilities: AWS Trainium (Trn1, NeuronCore-v2): dtypes per op class under the Neuron stack.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _neuron as n
from devices.chips import _neuron_numerics as nn
from devices.sources import EC2_CAPACITY_BLOCKS, TRAINIUM_DOCS, TRN1_ARCH_2024, TRN1_PRICES_2023, TRN1_PRICES_2024

_DOCS = TRAINIUM_DOCS.cite()

CHIP = Chip(
    kind="trn1",
    name="AWS Trainium (Trn1)",
    vendor="aws",
    family="trainium",
    peak={
        "bfloat16": Figure(190e12, "FLOP/s", _DOCS, "published", "dense; docs: 190 FP16/BF16/cFP8/TF32 TFLOPS"),
        "float16": Figure(190e12, "FLOP/s", _DOCS, "published", "dense; docs: 190 FP16/BF16/cFP8/TF32 TFLOPS"),
        "float8": Figure(190e12, "FLOP/s", _DOCS, "published", "cFP8 runs at the BF16 rate on NeuronCore-v2"),
        "int8": Figure(380e12, "FLOP/s", _DOCS, "published", "380 INT8 TOPS (integer ops counted as FLOP/s)"),
        "float32": Figure(47.5e12, "FLOP/s", _DOCS, "published", "docs: 47.5 FP32 TFLOPS"),
    },
    hbm_capacity=Figure(32 * 2**30, "B", _DOCS, "published", "32 GiB"),
    hbm_bandwidth=Figure(820 * 2**30, "B/s", _DOCS, "published",
                         "820 GiB/s (current docs say GiB/s; v2.9 docs said 820 GB/sec)"),
    scale_up_bandwidth=Figure(
        192 * 2**30, "B/s", TRN1_ARCH_2024.cite("NeuronLink-v2 device-to-device 384 GiB/s per device on trn1.32xlarge"),
        "published",
        "384 GiB/s per chip on trn1.32xlarge (768 on trn1n.32xlarge: the trn1n-instance preset), read as a "
        "bidirectional total like NVIDIA's NVLink figures (AWS does not say); per direction = 384/2 = 192 GiB/s. "
        "16 chips per instance in a 2D torus (4x4; the page once said 4D hypercube, the same graph)"),
    scale_up_fabric="neuronlink-v2",
    power=None,
    prices={
        "on-demand": Figure(
            21.50 / 16, "USD/h", TRN1_PRICES_2023.cite("trn1.32xlarge $21.50/h on demand"), "published",
            "$21.50 per trn1.32xlarge-hour / 16 chips = $1.344 per chip-hour; the Neuron file's on-demand rate as of "
            "2023-02-27 (replaced by the reserved-effective rate in 2024-09)"),
        "reserved-effective": Figure(
            8.197 / 16, "USD/h", TRN1_PRICES_2024.cite("trn1.32xlarge $8.197/h"), "published",
            "$8.197 per trn1.32xlarge-hour / 16 chips = $0.512 per chip-hour; reserved-instance effective rate, "
            "N. Virginia, as of 2024-09-16: the basis of Neuron's performance-per-dollar figures"),
        "capacity-block": Figure(
            15.49 / 16, "USD/h", EC2_CAPACITY_BLOCKS.cite("trn1.32xlarge $15.49/h"), "secondary",
            "$15.49 per trn1.32xlarge-hour / 16 chips = $0.968 per chip-hour; Melbourne, rates before 2025-01-01, "
            "read through a mirror of AWS's page"),
    },
    unset={"power": "AWS publishes no Trainium (Trn1) board power, and no third-party figure was found; left "
                    "unset rather than invented (energy figures of trn1 racks say so)"},
)


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
