"""AWS Trainium2, the chip of trn2.48xlarge and the Trn2 UltraServer."""

from devices.chip import Chip
from devices.figure import Figure
from devices.sources import TRAINIUM2_DOCS

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
    power=None,
    price_per_hour=None,  # no trn2 on-demand price was found; never invented.
)
