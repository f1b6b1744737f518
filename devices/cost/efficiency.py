"""Efficiency parameters and curves: how far below its roofline an op runs.

Every parameter is a :class:`devices.figure.Figure`.  Status says how it was
obtained: ``calibrated`` (solved from a measurement, see
:mod:`devices.cost.calibration`), ``published``/``secondary`` (read from a
source), or ``projected`` (an assumption; the note says so).  Chips take
their family's parameters; a kind may override single fields in
:data:`KIND_OVERRIDES`.

The curves are hyperbolic in size, ``e_max * x / (x + x_half)``, which keeps
modelled time non-decreasing in size: the memory curve amounts to a fixed
latency per transfer, the matmul curve to padding each GEMM dimension by
``half_dim``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from devices.cost import calibration
from devices.figure import Figure
from devices.sources import CUDA_GRAPHS_BLOG, FLASHATTENTION3, H100_DATASHEET, LAUNCH_MEASUREMENT

_FA3 = FLASHATTENTION3.cite("Figs. 5-6: FlashAttention-2 on H100 SXM5, head dim 128, seq 512-16k")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostParams:
    """The efficiency figures of one chip kind (all dimensionless unless a unit is stated)."""

    matmul_efficiency: Figure
    """Fraction of dense peak a large GEMM reaches (the curve's asymptote)."""
    matmul_half_dim: Figure
    """GEMM dimension at which that dimension alone halves efficiency: e = e_max * prod(d / (d + half))."""
    attention_efficiency: Figure
    """Fraction of dense peak fused attention's forward reaches at long sequences."""
    attention_half_keys: Figure
    """Mean keys per query at which forward attention runs at half its asymptote."""
    attention_backward_efficiency: Figure
    """As attention_efficiency, for the fused backward."""
    attention_backward_half_keys: Figure
    """As attention_half_keys, for the fused backward."""
    vector_fraction: Figure
    """Non-matmul arithmetic rate (vector/CUDA cores) as a fraction of the dense BF16 peak."""
    memory_efficiency: Figure
    """Fraction of HBM bandwidth a large streaming transfer reaches."""
    memory_latency: Figure
    """Seconds (unit "s"): the curve reaches half of memory_efficiency at bandwidth * latency bytes."""
    gather_efficiency: Figure
    """Factor on memory efficiency for gathers/scatters (scattered rows, partial bursts)."""
    launch_overhead: Figure
    """Seconds (unit "s") added to every op that runs a kernel."""


def _assumed(value: float, unit: str, why: str) -> Figure:
    # An assumption is a projection in the catalogue's vocabulary (figure.py:
    # "derived from announcements or an assumption").
    return Figure(value, unit, "assumption (hybrid-interop cost model)", "projected", why)


_GPU_LAUNCH = Figure(
    4e-6, "s",
    f"typical CUDA kernel launch cost: {LAUNCH_MEASUREMENT.cite('4-6 us per launch in a launch-and-sync loop')}; "
    f"{CUDA_GRAPHS_BLOG.cite('a few microseconds per launch')}",
    "secondary", "lower end of the measured 4-6 us: PyTorch launches asynchronously, so part overlaps")
_GPU_HALF_DIM = _assumed(
    64.0, "", "a GEMM dimension of 64 (the smallest Hopper wgmma tile edge) runs at half that "
              "dimension's efficiency; tile padding and pipeline fill grow as dimensions shrink")
_GPU_LATENCY = _assumed(
    0.5e-6, "s", "~0.5 us of HBM latency to cover (Little's law): a transfer reaches half its "
                 "asymptotic bandwidth at bandwidth * 0.5 us bytes (~2.4 MB on an H200)")
_GATHER = _assumed(0.5, "", "gathers/scatters of short rows use half of each memory burst")
_ATTENTION = Figure(0.379, "", _FA3, "calibrated",
                    "fitted e_max * s/(s+h) to the forward TFLOP/s, causal and non-causal (s = mean keys "
                    "per query), 7% rms error: e_max 0.379 of 989 TFLOP/s; PyTorch's flash SDPA backend "
                    "runs FlashAttention-2")
_ATTENTION_HALF = Figure(209.0, "", _FA3, "calibrated", "h of the forward fit (keys per query)")
_ATTENTION_BWD = Figure(0.333, "", _FA3, "calibrated",
                        "fitted e_max * s/(s+h) to the backward TFLOP/s (non-causal), 0.3% rms error: "
                        "e_max 0.333 of 989 TFLOP/s")
_ATTENTION_BWD_HALF = Figure(274.0, "", _FA3, "calibrated", "h of the backward fit (keys per query)")


def _gpu_params() -> CostParams:
    # Calibrated against the H200, whose figures the anchors were measured on.
    from devices.chip import chip

    h200 = chip("h200")
    return CostParams(
        matmul_efficiency=calibration.fit_matmul_efficiency(h200.peak_for("bfloat16"), _GPU_HALF_DIM, _GPU_LAUNCH),
        matmul_half_dim=_GPU_HALF_DIM,
        attention_efficiency=_ATTENTION,
        attention_half_keys=_ATTENTION_HALF,
        attention_backward_efficiency=_ATTENTION_BWD,
        attention_backward_half_keys=_ATTENTION_BWD_HALF,
        vector_fraction=Figure(67.0 / 989.0, "", H100_DATASHEET.cite("H100 SXM: FP32 (non-tensor) 67 TFLOP/s, "
                                                                     "dense BF16 tensor 989 TFLOP/s"), "published",
                               "derived: 67/989; taken for every NVIDIA part"),
        memory_efficiency=calibration.fit_memory_efficiency(h200.hbm_bandwidth, _GPU_LATENCY, _GPU_LAUNCH),
        memory_latency=_GPU_LATENCY,
        gather_efficiency=_GATHER,
        launch_overhead=_GPU_LAUNCH,
    )


def _trainium_params() -> CostParams:
    same = "no public Trainium figure; the NVIDIA value is taken"
    return CostParams(
        matmul_efficiency=_assumed(0.70, "", "Trainium large-GEMM fraction of dense peak: no public measured "
                                             "figure; set below the H200's calibrated ~0.8"),
        matmul_half_dim=_assumed(128.0, "", "Trainium's tensor engine is a 128x128 systolic array: a "
                                            "dimension of 128 fills one pass"),
        attention_efficiency=_assumed(_ATTENTION.value, "", f"{same} (FlashAttention-2 fit)"),
        attention_half_keys=_assumed(_ATTENTION_HALF.value, "", same),
        attention_backward_efficiency=_assumed(_ATTENTION_BWD.value, "", same),
        attention_backward_half_keys=_assumed(_ATTENTION_BWD_HALF.value, "", same),
        vector_fraction=_assumed(0.0625, "", "vector/scalar engines at 1/16 of the tensor engine's dense BF16 "
                                             "rate: no public figure; the same order as NVIDIA's CUDA cores"),
        memory_efficiency=_assumed(0.85, "", "HBM streaming efficiency a little below the H200's measured ~0.9; "
                                             "no public Trainium copy measurement"),
        memory_latency=_assumed(_GPU_LATENCY.value, "s", same),
        gather_efficiency=_GATHER,
        launch_overhead=_assumed(2e-6, "s", "per-op dispatch on Trainium: ops run inside compiled Neuron "
                                            "graphs, so no per-op host launch; ~2 us of engine "
                                            "synchronisation and DMA setup assumed, no public figure"),
    )


_FAMILIES = {"gpu": _gpu_params, "trainium": _trainium_params}

KIND_OVERRIDES: dict[str, dict[str, Figure]] = {}
"""Per-kind replacements of single :class:`CostParams` fields (none yet: no
per-part measurement exists beyond the H200 anchors the GPU family is fitted to)."""


@lru_cache(maxsize=None)
def params_for(kind: str, family: str) -> CostParams:
    """The efficiency parameters of a chip kind of a family (``"gpu"`` or ``"trainium"``)."""
    try:
        base = _FAMILIES[family]()
    except KeyError:
        raise ValueError(f"family: no cost parameters for {family!r}; accepted: {', '.join(_FAMILIES)}") from None
    overrides = KIND_OVERRIDES.get(kind)
    return replace(base, **overrides) if overrides else base


def matmul_efficiency(p: CostParams, m: int, n: int, k: int) -> float:
    """Fraction of dense peak a (M, N, K) GEMM reaches."""
    h = p.matmul_half_dim.value
    return (p.matmul_efficiency.value * calibration.dim_factor(m, h)
            * calibration.dim_factor(n, h) * calibration.dim_factor(k, h))


ATTENTION_CURVE_HEAD_DIM = 128
"""The head dim of the measurements :data:`_ATTENTION` and :data:`_ATTENTION_BWD` were fitted on."""


def head_dim_factor(rate: float, exp_rate: float, flops_per_score: float, backward: bool) -> float:
    """Attention's time at its head dim over the fitted curve's (head dim 128, where the factor is 1).

    A fused kernel spends on each score its MMA work (``flops_per_score``: 4 x head dim forward, 10 x backward,
    at ``rate``) and one exponential at the special-function rate ``exp_rate``; the curve, measured at head dim
    128, holds both, so a smaller head dim does less MMA work per exponential and runs further below its MMA
    rate. The form reproduces FlashAttention-3's own H100 figures (its Fig. 5: head dim 64 at 0.75 of head dim
    128's TFLOP/s, where it gives 0.75 with the 989 TFLOP/s MMA and 3.9 T exponentials a second) and
    FlashAttention-2's (0.88 published, 0.86 here at its 0.379 of peak)."""
    at_curve = (10.0 if backward else 4.0) * ATTENTION_CURVE_HEAD_DIM
    return (1.0 + rate / (exp_rate * flops_per_score)) / (1.0 + rate / (exp_rate * at_curve))


def attention_efficiency(p: CostParams, keys_per_query: float, backward: bool) -> float:
    """Fraction of dense peak fused attention reaches with this many keys per query."""
    if backward:
        e, h = p.attention_backward_efficiency.value, p.attention_backward_half_keys.value
    else:
        e, h = p.attention_efficiency.value, p.attention_half_keys.value
    return e * calibration.dim_factor(keys_per_query, h)


def memory_efficiency(p: CostParams, bandwidth: float, moved: float) -> float:
    """Fraction of HBM bandwidth a transfer of ``moved`` bytes reaches."""
    return p.memory_efficiency.value * calibration.dim_factor(moved, bandwidth * p.memory_latency.value)
