"""NVIDIA B200 (Blackwell) as in the HGX B200 8-GPU board, 1,000 W configuration.

Capabilities: NVIDIA B200 (Blackwell, sm_100): FP8 and NVFP4/MXFP4 tensor cores.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _cuda
from devices.chips import _cuda_numerics as cn
from devices.sources import HGX_B200_DATASHEET, MLPERF_INFERENCE_51, VANTAGE_2026, VERDA_GB300, ZDSZERO_B200

_SHEET = HGX_B200_DATASHEET.cite()
_REPRO = f"{VERDA_GB300.cite('B200 FP32 0.075 PFLOPS')}; {ZDSZERO_B200.cite('HGX B200: FP32 75, FP64 37 TFLOPS')}"

CHIP = Chip(
    kind="b200",
    name="NVIDIA B200 (HGX)",
    vendor="nvidia",
    family="gpu",
    peak={
        "bfloat16": Figure(2250e12, "FLOP/s", _SHEET, "published", "dense; 4,500 is with sparsity"),
        "float16": Figure(2250e12, "FLOP/s", _SHEET, "published", "dense; 4,500 is with sparsity"),
        "float8": Figure(4500e12, "FLOP/s", _SHEET, "published", "dense FP8/FP6; 9,000 is with sparsity"),
        "float4": Figure(9000e12, "FLOP/s", _SHEET, "published", "dense NVFP4; 18,000 is with sparsity"),
        "float32": Figure(75e12, "FLOP/s", _REPRO, "secondary",
                          "HGX B200 600 TFLOPS FP32 / 8 GPUs; glennklockwood.com lists 80 for a 1,000 W B200"),
        "float64": Figure(37e12, "FLOP/s", _REPRO, "secondary", "FP64 / FP64 Tensor Core, HGX B200"),
    },
    hbm_capacity=Figure(180e9, "B", _SHEET, "published", "180 GB HBM3e (192 GB physical)"),
    hbm_bandwidth=Figure(7.7e12, "B/s", _SHEET, "published", "7.7 TB/s"),
    scale_up_bandwidth=Figure(
        900e9, "B/s", _SHEET, "published",
        "NVLink 5: 1.8 TB/s is the bidirectional total; per direction = 1.8e12/2 = 900 GB/s"),
    scale_up_fabric="nvlink5",
    exp_rate=_cuda.exp_rate(148, "no published Blackwell figure: the H100's 16 per clock per SM, taken "
                                  "unchanged for sm_100, on B200's 148 SMs at the H100's clock"),
    power=Figure(1000.0, "W", f"{_SHEET}; {MLPERF_INFERENCE_51.cite('B200-SXM-180GBx8_TRT.json: B200 TGP 1000W')}",
                 "published", "up to 1,000 W (MLPerf's system descriptions give the same TGP)"),
    prices={"on-demand": Figure(113.93 / 8, "USD/h", VANTAGE_2026.cite("p6-b200.48xlarge $113.93/h"), "secondary",
                                "$113.93 per p6-b200.48xlarge-hour / 8 GPUs = $14.24 per GPU-hour (2026-04)")},
)


CAPABILITIES = Capabilities(
    kind="b200",
    compute=_cuda.rules(CHIP),
    cuda=CudaIdentity(
        major=10, minor=0, multi_processor_count=148, l2_cache_size=None,
        source=f"{_cuda.CC_TABLE}; B200 18,944 CUDA cores at 128 per SM = 148 SMs (hmc-tech.com B200 listing, "
               "secondary)", status="secondary", note="no L2 figure found; left unset"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_BLACKWELL,
    block_formats=cn.BLACKWELL_BLOCK_FORMATS,
    accumulation=cn.accumulation(fp8=True, block_scaled=True),
)
