"""Measured anchors and the fits that turn them into efficiency figures.

The cost model's large-size efficiencies for NVIDIA parts are not guessed:
they are solved from measurements so that the model reproduces them exactly
(:data:`devices.sources.H200_MEASUREMENTS`, not a published document).  Each fitted value comes back
as a :class:`devices.figure.Figure` with status ``"calibrated"`` whose note
shows the arithmetic.
"""

from __future__ import annotations

from devices.figure import Figure
from devices.sources import H200_MEASUREMENTS

H200_MATMUL = Figure(
    783.5e12, "FLOP/s",
    H200_MEASUREMENTS.cite("8192^3 bf16 matmul through PyTorch on random data, 769-798 TFLOP/s"),
    "secondary", "midpoint of the measured 769-798 TFLOP/s range")
"""The H200 matmul anchor (midpoint of the measured range)."""

MATMUL_ANCHOR_N = 8192
"""Edge of the square matmul the anchor was measured on."""

H200_COPY = Figure(
    4.3e12, "B/s",
    H200_MEASUREMENTS.cite("device-to-device copy ~4.3 TB/s counting read+write (~90% of 4.8 TB/s)"),
    "secondary", "bytes read + bytes written per second")
"""The H200 device-to-device copy anchor."""

COPY_ANCHOR_BYTES = 4 * 2**30
"""Size of the copy the anchor is applied at: 4 GiB, large enough that the
size-dependent part of the memory curve is negligible (the measurement's own
size is not recorded; a bandwidth test uses a large buffer)."""


def dim_factor(d: float, half: float) -> float:
    """Per-dimension GEMM efficiency ``d / (d + half)``: 1/2 at ``d == half``, -> 1 for large d."""
    return d / (d + half) if d > 0 else 0.0


def fit_matmul_efficiency(peak: Figure, half_dim: Figure, overhead: Figure) -> Figure:
    """Large-GEMM fraction of dense peak that reproduces :data:`H200_MATMUL` exactly.

    Solves ``overhead + 2 n^3 / (peak * e * f(n)^3) = 2 n^3 / anchor`` for
    ``e``, with ``f`` the per-dimension factor of the matmul curve.
    """
    n = MATMUL_ANCHOR_N
    flops = 2.0 * n**3
    compute = flops / H200_MATMUL.value - overhead.value
    shape = dim_factor(n, half_dim.value) ** 3
    value = flops / (peak.value * compute * shape)
    return Figure(
        value, "", f"calibrated to {H200_MATMUL.source}", "calibrated",
        f"fitted: e = 2n^3 / (peak * (2n^3/anchor - overhead) * f(n)^3), n={n}, "
        f"peak={peak.value / 1e12:.4g} TFLOP/s ({peak.source}), anchor={H200_MATMUL.value / 1e12:.4g} TFLOP/s, "
        f"overhead={overhead.value * 1e6:.3g} us, f(n)^3={shape:.4f} (half_dim={half_dim.value:g}) "
        f"-> {value:.4f}; applied to every NVIDIA part (no per-part measurement)")


def fit_memory_efficiency(bandwidth: Figure, latency: Figure, overhead: Figure) -> Figure:
    """Large-transfer fraction of HBM bandwidth that reproduces :data:`H200_COPY` exactly.

    The memory curve is ``e * b / (b + bandwidth * latency)``, so a transfer
    of ``b`` bytes takes ``(b + bandwidth * latency) / (bandwidth * e)``;
    solved for ``e`` at a :data:`COPY_ANCHOR_BYTES` copy (``2 *`` that moved).
    """
    moved = 2.0 * COPY_ANCHOR_BYTES
    memory_time = moved / H200_COPY.value - overhead.value
    value = (moved + bandwidth.value * latency.value) / (bandwidth.value * memory_time)
    return Figure(
        value, "", f"calibrated to {H200_COPY.source}", "calibrated",
        f"fitted: e = (b + bw*latency) / (bw * (b/anchor - overhead)), b={moved:.4g} B moved "
        f"(a 4 GiB copy), bw={bandwidth.value / 1e12:.4g} TB/s ({bandwidth.source}), "
        f"anchor={H200_COPY.value / 1e12:.4g} TB/s -> {value:.4f}; applied to every NVIDIA part")
