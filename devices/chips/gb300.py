"""NVIDIA GB300 (Blackwell Ultra), one GPU of a GB300 NVL72 rack.

Capabilities: NVIDIA GB300 (Blackwell Ultra, sm_103): FP8/NVFP4 tensor cores; FP64 and INT8 cut to a trickle.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _cuda
from devices.chips import _cuda_numerics as cn
from devices.sources import GB300_NVL72_PAGE, KLOCKWOOD_B300, MLPERF_INFERENCE_51, VERDA_GB300

_VENDOR = GB300_NVL72_PAGE.cite("per-GPU figures")
_VERDA = VERDA_GB300.cite("per-GPU table, GB300 column")
_KLOCK = KLOCKWOOD_B300.cite("HGX B300: FP64 1.25 TFLOPS")

CHIP = Chip(
    kind="gb300",
    name="NVIDIA GB300 (Blackwell Ultra, per GPU)",
    vendor="nvidia",
    family="gpu",
    peak={
        "bfloat16": Figure(2500e12, "FLOP/s", _VENDOR, "secondary", "dense"),
        "float16": Figure(2500e12, "FLOP/s", _VENDOR, "secondary", "dense"),
        "float8": Figure(5000e12, "FLOP/s", _VENDOR, "secondary", "dense FP8/FP6"),
        "float4": Figure(15000e12, "FLOP/s", _VENDOR, "secondary", "dense NVFP4"),
        "float32": Figure(80e12, "FLOP/s", _VERDA, "secondary", "0.080 PFLOPS FP32"),
        # Blackwell Ultra cut INT8 and FP64 sharply; listed so the fallbacks
        # (int8 -> float8, float64 -> float32) cannot overstate them.
        "int8": Figure(165e12, "FLOP/s", _VERDA, "secondary", "0.165 POPS dense INT8 (cut vs B200's 4.5 POPS)"),
        "float64": Figure(1.25e12, "FLOP/s", _KLOCK, "secondary",
                          "HGX B300 figure; Blackwell Ultra has 'essentially no FP64'"),
    },
    hbm_capacity=Figure(279e9, "B", _VENDOR, "secondary", "279 GB usable (288 GB physical HBM3e)"),
    hbm_bandwidth=Figure(8e12, "B/s", _VENDOR, "secondary", "8 TB/s"),
    scale_up_bandwidth=Figure(
        900e9, "B/s", f"{_VENDOR}; NVLink 5 1.8 TB/s per GPU, NVL72 130 TB/s aggregate", "secondary",
        "NVLink 5: 1.8 TB/s is the bidirectional total; per direction = 900 GB/s (72 x 1.8 TB/s = 130 TB/s)"),
    scale_up_fabric="nvlink5",
    exp_rate=_cuda.exp_rate(148, "Blackwell Ultra's doubled MUFU.EX2 on GB200's figure (NVIDIA measures about "
                                  "2x GB300 over GB200)", per_sm=2.0, ultra=True),
    power=Figure(1400.0, "W", f"{MLPERF_INFERENCE_51.cite('GB300-NVL72_GB300-288GB_aarch64x72_TRT.json: GB300 TGP 1400W')}"
                 f"; {_VENDOR}", "published", "1,400 W per GPU (NVIDIA's MLPerf system description; the product page "
                                            "gives 1.4 kW max TDP)"),
    unset={"price": "no public GB300 instance or capacity-block price was found; left unset rather than invented"},
)


CAPABILITIES = Capabilities(
    kind="gb300",
    compute=_cuda.rules(CHIP),
    cuda=CudaIdentity(
        major=10, minor=3, multi_processor_count=160, l2_cache_size=None,
        source="NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra' (160 SMs); datacrunch.io B300 vs B200 "
               "comparison ('B300 is SM103')", status="secondary", note="no L2 figure found; left unset"),
    notes=(_cuda.TF32_NOTE,
           "float64 runs but at 1.25 TFLOPS (Blackwell Ultra has essentially no FP64) and int8 GEMMs at 0.165 POPS: "
           "see the catalogue's peak figures"),
    rounding=cn.ROUNDING_BLACKWELL,
    block_formats=cn.BLACKWELL_BLOCK_FORMATS,
    accumulation=cn.accumulation(fp8=True, block_scaled=True),
)
