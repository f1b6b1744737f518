"""NVIDIA A100 SXM4 80 GB (Ampere), as in a DGX A100 / HGX A100 8-GPU node.

Every compute figure is dense.  NVIDIA's datasheet prints each Tensor Core
rate twice, dense and "with sparsity" (2:4 structured sparsity, twice the
dense number); the sparse ones (624 BF16, 312 TF32, 1,248 INT8) are never
used here.  The A100 has no FP8 or FP4 path: FP8 and FP4 data are costed at
the BF16 rate by :meth:`devices.chip.Chip.peak_for`'s fallback rules.

Capabilities: NVIDIA A100 SXM4 (Ampere, sm_80): no FP8 tensor cores, so torch._scaled_mm refuses float8.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _cuda
from devices.chips import _cuda_numerics as cn
from devices.sources import A100_DATASHEET, EC2_CAPACITY_BLOCKS, VANTAGE_FIXTURE

_SHEET = A100_DATASHEET.cite("A100 80GB SXM column")
_DENSE = "dense; the datasheet's {} is with 2:4 sparsity"

CHIP = Chip(
    kind="a100",
    name="NVIDIA A100 SXM4 80GB",
    vendor="nvidia",
    family="gpu",
    peak={
        "bfloat16": Figure(312e12, "FLOP/s", _SHEET, "secondary", _DENSE.format("624")),
        "float16": Figure(312e12, "FLOP/s", _SHEET, "secondary", _DENSE.format("624")),
        "tf32": Figure(156e12, "FLOP/s", _SHEET, "secondary", "TF32 Tensor Core, " + _DENSE.format("312")),
        "int8": Figure(624e12, "FLOP/s", _SHEET, "secondary",
                       "INT8 Tensor Core TOPS counted as FLOP/s, " + _DENSE.format("1,248")),
        "float32": Figure(19.5e12, "FLOP/s", _SHEET, "secondary", "non-tensor FP32 (CUDA cores)"),
        "float64": Figure(19.5e12, "FLOP/s", _SHEET, "secondary",
                          "FP64 Tensor Core (used by DGEMM); non-tensor FP64 is 9.7"),
    },
    hbm_capacity=Figure(80e9, "B", _SHEET, "secondary", "80 GB HBM2e (decimal GB)"),
    hbm_bandwidth=Figure(2.039e12, "B/s", _SHEET, "secondary",
                         "2,039 GB/s for the SXM4 80GB (the PCIe 80GB card has 1,935 GB/s)"),
    scale_up_bandwidth=Figure(
        300e9, "B/s", _SHEET, "secondary",
        "NVLink 3: 600 GB/s is the bidirectional total (12 links x 50 GB/s, 25 GB/s each way); "
        "per direction = 600/2 = 300 GB/s"),
    scale_up_fabric="nvlink3",
    exp_rate=_cuda.exp_rate(108, "108 SMs x 16 per clock at the A100's 1,410 MHz boost: 2.44e12 (the H100's "
                                  "per-SM figure scaled by SMs and clock)", per_sm=1410 / 1830),
    power=Figure(400.0, "W", _SHEET, "secondary", "max TDP 400 W (SXM4)"),
    prices={
        "on-demand": Figure(21.958 / 8, "USD/h", VANTAGE_FIXTURE.cite("p4d.24xlarge $21.958/h"), "secondary",
                            "$21.958 per p4d.24xlarge-hour / 8 GPUs = $2.745 per GPU-hour; weak: an aggregator's "
                            "value held in a test fixture, not re-read"),
        "capacity-block": Figure(14.75 / 8, "USD/h", EC2_CAPACITY_BLOCKS.cite("p4d.24xlarge $14.75/h"), "secondary",
                                 "$14.75 per p4d.24xlarge-hour / 8 = $1.844 per GPU-hour; Ohio, before 2025-01-01, "
                                 "read through a mirror"),
    },
)


CAPABILITIES = Capabilities(
    kind="a100",
    compute=_cuda.rules(CHIP),
    cuda=CudaIdentity(
        major=8, minor=0, multi_processor_count=108, l2_cache_size=40 * 2**20,
        source=f"{_cuda.CC_TABLE}; NVIDIA A100 Tensor Core GPU architecture whitepaper (108 SMs, 40 MB L2)",
        status="published"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_NEAREST_ONLY,
    accumulation=cn.accumulation(fp8=False, block_scaled=False),
)
