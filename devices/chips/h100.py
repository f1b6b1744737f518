"""NVIDIA H100 SXM5 (Hopper), as in an HGX H100 8-GPU node (p5.48xlarge).

Capabilities: NVIDIA H100 SXM5 (Hopper, sm_90): dtypes per op class under PyTorch on CUDA.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _cuda
from devices.chips import _cuda_numerics as cn
from devices.sources import (EC2_CAPACITY_BLOCKS, EC2_PRICING, H100_DATASHEET, HPCTECH_H100, KLOCKWOOD_H100,
                             VANTAGE_2026)

_SHEET = H100_DATASHEET.cite("H100 SXM")
_REPRO = f"{HPCTECH_H100.cite()}; {KLOCKWOOD_H100.cite('66.9 TFLOPS')}"
_DENSE = "dense; the datasheet's {} is with 2:4 sparsity"

CHIP = Chip(
    kind="h100",
    name="NVIDIA H100 SXM5",
    vendor="nvidia",
    family="gpu",
    peak={
        "bfloat16": Figure(989e12, "FLOP/s", _SHEET, "published", _DENSE.format("1,979")),
        "float16": Figure(989e12, "FLOP/s", _SHEET, "published", _DENSE.format("1,979")),
        "float8": Figure(1979e12, "FLOP/s", _SHEET, "published", _DENSE.format("3,958")),
        "float32": Figure(67e12, "FLOP/s", _REPRO, "secondary",
                          "non-tensor FP32 (CUDA cores); TF32 tensor-core rate is 494.5 dense"),
        "float64": Figure(67e12, "FLOP/s", _REPRO, "secondary",
                          "FP64 Tensor Core (used by DGEMM); non-tensor FP64 is 34"),
    },
    hbm_capacity=Figure(80e9, "B", _SHEET, "published", "80 GB HBM3 (decimal GB)"),
    hbm_bandwidth=Figure(3.35e12, "B/s", _SHEET, "published", "3.35 TB/s"),
    scale_up_bandwidth=Figure(
        450e9, "B/s", _SHEET, "published",
        "NVLink 4: 900 GB/s is the bidirectional total (18 links x 50 GB/s, 25 GB/s each way); "
        "per direction = 900/2 = 450 GB/s"),
    scale_up_fabric="nvlink4",
    exp_rate=_cuda.H100_EXP_RATE,
    power=Figure(700.0, "W", _SHEET, "published", "up to 700 W (configurable)"),
    prices={
        "on-demand": Figure(
            55.04 / 8, "USD/h", f"{VANTAGE_2026.cite('p5.48xlarge $55.04/h')}; before the cut: "
            f"{EC2_PRICING.cite('p5.48xlarge $98.32/h')}", "secondary",
            "$55.04 per p5.48xlarge-hour / 8 GPUs = $6.88 per GPU-hour after AWS's June 2025 cut ('up to 45 %'); "
            "before it $98.32 / 8 = $12.29"),
        "capacity-block": Figure(39.33 / 8, "USD/h", EC2_CAPACITY_BLOCKS.cite("p5.48xlarge $39.33/h"), "secondary",
                                 "$39.33 per p5.48xlarge-hour / 8 = $4.916 per GPU-hour; us-east-1, before "
                                 "2025-01-01, read through a mirror"),
    },
)


CAPABILITIES = Capabilities(
    kind="h100",
    compute=_cuda.rules(CHIP),
    cuda=CudaIdentity(
        major=9, minor=0, multi_processor_count=132, l2_cache_size=50 * 2**20,
        source=f"{_cuda.CC_TABLE}; NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5: 132 SMs, "
               "50 MB L2)", status="published"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_NEAREST_ONLY,
    accumulation=cn.accumulation(fp8=True, block_scaled=False),
)
