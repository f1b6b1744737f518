"""AWS Trainium4 (announced, not shipping): every figure is projected from Trainium3.

re:Invent 2025 gave only relative multipliers over Trn3: at least 3x FP8, at
least 6x FP4, 4x memory bandwidth, 2x memory capacity (the last not
confirmed), and NVLink Fusion so Trn4 and NVIDIA GPUs share one fabric.  The
numbers below apply those multipliers to :mod:`devices.chips.trn3`; rates
with no announced multiplier (BF16, FP16, FP32) take the FP8 one, an
assumption stated in each note.  The multipliers are lower bounds ("at
least"), so these figures are too.

Capabilities: AWS Trainium4 (announced, not shipping): assumed to compute in what Trainium3 does (every rule projected).
"""

from dataclasses import replace

from devices.capability import Capabilities
from devices.chip import Chip
from devices.figure import Figure
from devices.chips import trn3 as _trn3
from devices.sources import NVLINK_PAGE, TRAINIUM3_ANNOUNCEMENT

_ANNOUNCED = TRAINIUM3_ANNOUNCEMENT.cite("Trainium4: relative multipliers over Trainium3")


def _times(fig: Figure, factor: float, what: str) -> Figure:
    return fig.derive(factor, f"derived: {factor:g}x Trn3 {what}", source=_ANNOUNCED)


def _assumed(fig: Figure, what: str) -> Figure:
    return fig.derive(3.0, f"assumed: 3x Trn3 {what}; no {what} figure was announced, so the FP8 "
                           f"multiplier (>= 3x) is applied; a lower bound would be Trn3's own rate",
                      source=_ANNOUNCED)


CHIP = Chip(
    kind="trn4",
    name="AWS Trainium4 (Trn4, projected)",
    vendor="aws",
    family="trainium",
    peak={
        "bfloat16": _assumed(_trn3.CHIP.peak["bfloat16"], "BF16"),
        "float16": _assumed(_trn3.CHIP.peak["float16"], "FP16"),
        "float8": _times(_trn3.CHIP.peak["float8"], 3.0, "MXFP8 (announced: >= 3x FP8)"),
        "float4": _times(_trn3.CHIP.peak["float4"], 6.0, "MXFP4 (announced: >= 6x FP4)"),
        "float32": _assumed(_trn3.CHIP.peak["float32"], "FP32"),
    },
    hbm_capacity=_trn3.CHIP.hbm_capacity.derive(
        2.0, "derived: 2x Trn3 144 GiB = 288 GiB; the 2x is NOT confirmed", source=_ANNOUNCED),
    hbm_bandwidth=_times(_trn3.CHIP.hbm_bandwidth, 4.0, "HBM bandwidth (announced: 4x)"),
    scale_up_bandwidth=Figure(
        1.8e12, "B/s", NVLINK_PAGE.cite("sixth-generation NVLink (Rubin) 3.6 TB/s per GPU"), "projected",
        "assumed NVLink 6 class for Trn4's NVLink Fusion port: 3.6 TB/s bidirectional per chip -> "
        "1.8 TB/s per direction; AWS announced NVLink Fusion support, not a bandwidth"),
    scale_up_fabric="nvlink-fusion",
    power=None,
    unset={"power": "Trainium4 is announced, not shipping: no power figure was announced or estimated",
           "price": "Trainium4 is announced, not shipping: no price exists"},
)


_BASIS = "projected from Trainium3: no Trainium4 data-type documentation exists yet"


def _projected(entry):
    return replace(entry, status="projected" if entry.status != "assumption" else "assumption",
                   source=f"{entry.source} ({_BASIS})")


CAPABILITIES = Capabilities(
    kind="trn4",
    compute=tuple(replace(rule, status="projected" if rule.status != "assumption" else "assumption",
                          source=f"{rule.source} ({_BASIS})") for rule in _trn3.CAPABILITIES.compute),
    cuda=replace(_trn3.CAPABILITIES.cuda, status="assumption",
                 note=f"{_trn3.CAPABILITIES.cuda.note}; {_BASIS}, NeuronCores per chip assumed equal to Trn3's"),
    notes=_trn3.CAPABILITIES.notes,
    rounding=replace(_trn3.CAPABILITIES.rounding, status="projected", source=f"{_trn3.CAPABILITIES.rounding.source} ({_BASIS})"),
    block_formats=tuple(_projected(entry) for entry in _trn3.CAPABILITIES.block_formats),
    accumulation=tuple(_projected(entry) for entry in _trn3.CAPABILITIES.accumulation),
)
