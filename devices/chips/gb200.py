"""NVIDIA GB200: one Blackwell GPU of a GB200 Grace Blackwell Superchip, as in a GB200 NVL72 rack.

A GB200 superchip is one Grace CPU and two Blackwell GPUs; an NVL72 rack holds
36 superchips (72 GPUs) in one NVLink 5 domain.  NVIDIA publishes the rack's
and the superchip's totals, every Tensor Core rate "with sparsity" (2:4, twice
the dense rate); the per-GPU dense figures here are the rack totals divided by
72 GPUs and by 2 for sparsity, and each note shows the arithmetic.  The GB200
GPU runs at up to 1,200 W where an HGX B200 runs at 1,000 W, so its rates are
above :mod:`devices.chips.b200`'s.

Capabilities: NVIDIA GB200 (one Blackwell GPU of a Grace Blackwell superchip, sm_100): as the B200.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _cuda
from devices.chips import _cuda_numerics as cn
from devices.sources import GB200_NVL72_PAGE, KLOCKWOOD_B200, MLPERF_INFERENCE_51, NEXTPLATFORM_GB200, VERDA_GB300

_PAGE = GB200_NVL72_PAGE.cite("per-rack totals")
_KLOCK = KLOCKWOOD_B200.cite("GB200 at 1,200 W")
_VERDA = VERDA_GB300.cite("per-GPU table, GB200 column")
_RACK = 72
_SPARSE = f"rack total / {_RACK} GPUs / 2 (the page's figure is with 2:4 sparsity)"

CHIP = Chip(
    kind="gb200",
    name="NVIDIA GB200 (Blackwell, per GPU)",
    vendor="nvidia",
    family="gpu",
    peak={
        "bfloat16": Figure(360e15 / _RACK / 2, "FLOP/s", _PAGE, "secondary",
                           f"dense: FP16/BF16 360 PFLOPS per NVL72, {_SPARSE} = 2.5 PFLOPS; "
                           f"glennklockwood.com lists 2,500 dense at 1,200 W"),
        "float16": Figure(360e15 / _RACK / 2, "FLOP/s", _PAGE, "secondary",
                          f"dense: FP16/BF16 360 PFLOPS per NVL72, {_SPARSE} = 2.5 PFLOPS"),
        "tf32": Figure(180e15 / _RACK / 2, "FLOP/s", _PAGE, "secondary",
                       f"dense: TF32 180 PFLOPS per NVL72, {_SPARSE} = 1.25 PFLOPS"),
        "float8": Figure(720e15 / _RACK / 2, "FLOP/s", _PAGE, "secondary",
                         f"dense FP8/FP6: 720 PFLOPS per NVL72, {_SPARSE} = 5 PFLOPS"),
        "float4": Figure(1440e15 / _RACK / 2, "FLOP/s", _PAGE, "secondary",
                         f"dense NVFP4: 1,440 PFLOPS per NVL72, {_SPARSE} = 10 PFLOPS"),
        "int8": Figure(720e15 / _RACK / 2, "FLOP/s", _PAGE, "secondary",
                       f"dense INT8: 720 POPS per NVL72, {_SPARSE} = 5 POPS (TOPS counted as FLOP/s)"),
        "float32": Figure(90e12, "FLOP/s", _KLOCK, "secondary", "non-tensor FP32 at 1,200 W"),
        "float64": Figure(45e12, "FLOP/s", _KLOCK, "secondary",
                          "FP64 / FP64 Tensor Core; = the NVL72 page's 3,240 TFLOPS / 72 (FP64 has no sparse rate)"),
    },
    hbm_capacity=Figure(186e9, "B", _PAGE, "secondary",
                        "up to 13.4 TB HBM3e per NVL72 / 72 = 186 GB usable per GPU (192 GB physical; MLPerf "
                        "system descriptions list 'NVIDIA GB200 186 GB')"),
    hbm_bandwidth=Figure(8e12, "B/s", _PAGE, "secondary", "576 TB/s per NVL72 / 72 = 8 TB/s per GPU"),
    scale_up_bandwidth=Figure(
        900e9, "B/s", _PAGE, "secondary",
        "NVLink 5: 130 TB/s per NVL72 / 72 = 1.8 TB/s per GPU, the bidirectional total; "
        "per direction = 1.8e12/2 = 900 GB/s"),
    scale_up_fabric="nvlink5",
    exp_rate=_cuda.exp_rate(148, "no published Blackwell figure: the H100's 16 per clock per SM, taken "
                                  "unchanged for sm_100, on GB200's 148 SMs at the H100's clock"),
    power=Figure(1200.0, "W", f"{MLPERF_INFERENCE_51.cite('GB200-NVL72_GB200-186GB_aarch64x4_TRT.json: GB200 TGP 1200W')}"
                 f"; {_KLOCK}; {_VERDA}", "published",
                 "1,200 W per GPU: NVIDIA's MLPerf system description; both third parties give 1.2 kW too"),
    prices={"capacity-block": Figure(
        1.65e6 / (90 * 24) / 72, "USD/h", NEXTPLATFORM_GB200.cite("P6e-GB200: ~$1.65M per 90 days"), "estimated",
        "~$1.65M per 90 days of a 72-GPU P6e-GB200 UltraServer = ~$764/h = ~$10.6 per GPU-hour; a press estimate, "
        "capacity blocks only (no on-demand rate)")},
)


CAPABILITIES = Capabilities(
    kind="gb200",
    compute=_cuda.rules(CHIP),
    cuda=CudaIdentity(
        major=10, minor=0, multi_processor_count=148, l2_cache_size=None,
        source=f"{_cuda.CC_TABLE}; GB200 superchip listing of 2 x 18,944 CUDA cores (hmc-tech.com, secondary)",
        status="assumption", note="per-GPU SM count taken as the B200's 148; no GB200-specific figure found"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_BLACKWELL,
    block_formats=cn.BLACKWELL_BLOCK_FORMATS,
    accumulation=cn.accumulation(fp8=True, block_scaled=True),
)
