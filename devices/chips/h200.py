"""NVIDIA H200 SXM (Hopper with 141 GB HBM3e), as in an HGX H200 8-GPU node."""

from devices.chip import Chip
from devices.figure import Figure

_SHEET = "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM (https://www.nvidia.com/en-us/data-center/h200/)"
_REPRO = ("third-party spec tables: hmc-tech.com (H200 SXM FP32 66.91 TFLOPS) and "
          "glennklockwood.com/garden/processors/h100 (H200 = H100 compute, FP64 tensor 66.9)")
_DENSE = "dense; the datasheet's {} is with 2:4 sparsity"

CHIP = Chip(
    kind="h200",
    name="NVIDIA H200 SXM",
    vendor="nvidia",
    family="gpu",
    peak={
        "bfloat16": Figure(989e12, "FLOP/s", _SHEET, "published", _DENSE.format("1,979")),
        "float16": Figure(989e12, "FLOP/s", _SHEET, "published", _DENSE.format("1,979")),
        "float8": Figure(1979e12, "FLOP/s", _SHEET, "published", _DENSE.format("3,958")),
        "float32": Figure(67e12, "FLOP/s", _REPRO, "secondary", "non-tensor FP32; same GH100 silicon as H100"),
        "float64": Figure(67e12, "FLOP/s", _REPRO, "secondary",
                          "FP64 Tensor Core (used by DGEMM); non-tensor FP64 is 34"),
    },
    hbm_capacity=Figure(141e9, "B", _SHEET, "published", "141 GB HBM3e (decimal GB)"),
    hbm_bandwidth=Figure(4.8e12, "B/s", _SHEET, "published",
                         "4.8 TB/s; measured device-to-device copy ~4.3 TB/s (read+write) through PyTorch"),
    scale_up_bandwidth=Figure(
        450e9, "B/s", _SHEET, "published",
        "NVLink 4: 900 GB/s is the bidirectional total; per direction = 900/2 = 450 GB/s"),
    scale_up_fabric="nvlink4",
    power=Figure(700.0, "W", _SHEET, "published", "up to 700 W (configurable)"),
    price_per_hour=None,  # specs.md gives no H200 instance price; never invented.
)
