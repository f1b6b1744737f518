"""AWS Trainium (first generation), the chip of trn1.32xlarge."""

from devices.chip import Chip
from devices.figure import Figure
from devices.sources import EC2_PRICING, TRAINIUM_DOCS, TRN1_ARCH

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
        192e9, "B/s", TRN1_ARCH.cite("NeuronLink-v2 384 GB/s per chip"), "published",
        "384 GB/s per chip, read as a bidirectional total like NVIDIA's NVLink figures (AWS does not say); "
        "per direction = 384/2 = 192 GB/s. 16 chips per trn1.32xlarge in a 4D hypercube"),
    scale_up_fabric="neuronlink-v2",
    power=None,
    price_per_hour=Figure(
        21.50 / 16, "USD/h", EC2_PRICING.cite("trn1.32xlarge $21.50/h"), "secondary",
        "$21.50/h per instance of 16 chips -> $1.34375/h per chip; a default the user can override"),
)
