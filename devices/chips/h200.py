"""NVIDIA H200 SXM (Hopper with 141 GB HBM3e), as in an HGX H200 8-GPU node.

The H200 is the H100's GH100 silicon with more and faster memory: its compute
rates, NVLink 4 port and 700 W envelope are the H100's, so they are derived
from :mod:`devices.chips.h100` (factor 1, each citing both datasheets) rather
than restated; only the memory figures are its own.

Capabilities: NVIDIA H200 SXM (Hopper, sm_90): the H100's GH100 die with more HBM; same dtypes per op class.
"""

from devices.capability import Capabilities, CudaIdentity
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import _cuda
from devices.chips import _cuda_numerics as cn
from devices.chips.h100 import CHIP as _H100
from devices.sources import EC2_CAPACITY_BLOCKS, H200_DATASHEET, MLPERF_INFERENCE_41, VANTAGE_FIXTURE

_SHEET = H200_DATASHEET.cite("H200 SXM")
_SAME = "same GH100 silicon as H100 SXM; the H200 datasheet lists the same figure"


def _same(fig: Figure) -> Figure:
    return fig.derive(1.0, f"{fig.note}; {_SAME}", status=fig.status, source=_SHEET)


CHIP = Chip(
    kind="h200",
    name="NVIDIA H200 SXM",
    vendor="nvidia",
    family="gpu",
    peak={key: _same(fig) for key, fig in _H100.peak.items()},
    hbm_capacity=Figure(141e9, "B", _SHEET, "published", "141 GB HBM3e (decimal GB)"),
    hbm_bandwidth=Figure(4.8e12, "B/s", _SHEET, "published",
                         "4.8 TB/s; measured device-to-device copy ~4.3 TB/s (read+write) through PyTorch"),
    scale_up_bandwidth=_same(_H100.scale_up_bandwidth),
    scale_up_fabric=_H100.scale_up_fabric,
    exp_rate=_same(_H100.exp_rate),
    power=Figure(700.0, "W", MLPERF_INFERENCE_41.cite("H200-SXM-141GBx8_TRT.json: 'H200 TGP 700W'"), "published",
                 "700 W total graphics power (the H100 SXM's, as the H200 datasheet implies)"),
    prices={
        "on-demand": Figure(63.296 / 8, "USD/h", VANTAGE_FIXTURE.cite("p5en.48xlarge $63.296/h"), "secondary",
                            "$63.296 per p5en.48xlarge-hour / 8 GPUs = $7.912 per GPU-hour; weak: an aggregator's "
                            "value held in a test fixture, not re-read"),
        "capacity-block": Figure(43.26 / 8, "USD/h", EC2_CAPACITY_BLOCKS.cite("8 x H200 $43.26/h"), "secondary",
                                 "$43.26 per 8-GPU instance-hour / 8 = $5.408 per GPU-hour; Ohio, before "
                                 "2025-01-01, read through a mirror (the instance name was lost there)"),
    },
)


CAPABILITIES = Capabilities(
    kind="h200",
    compute=_cuda.rules(CHIP),
    cuda=CudaIdentity(
        major=9, minor=0, multi_processor_count=132, l2_cache_size=50 * 2**20,
        source=f"{_cuda.CC_TABLE}; NVIDIA H200 datasheet (same Hopper GH100 compute as H100 SXM5: 132 SMs, 50 MB L2)",
        status="secondary", note="SM count and L2 taken from the H100 SXM5, whose GH100 die the H200 shares"),
    notes=(_cuda.TF32_NOTE,),
    rounding=cn.ROUNDING_NEAREST_ONLY,
    accumulation=cn.accumulation(fp8=True, block_scaled=False),
)
