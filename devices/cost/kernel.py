"""The cost of one kernel that is not an ATen op: a compiled graph's fused kernel or a Triton launch.

Such a kernel has no name the op families know; it is costed from what it
itself reads, writes and computes, as its launcher counts them::

    seconds = max(vector FLOPs / vector rate + matmul FLOPs / (peak * e_matmul(M, N, K)),
                  bytes / (bandwidth * e_memory(bytes))) + launch overhead

with the same catalogue figures and efficiency curves as an ATen op
(:mod:`devices.cost.model`), so a fused kernel and the eager ops it replaces
are priced alike: fusion shows as fewer bytes and fewer launches.

The matmul efficiency is read at the kernel's *equivalent GEMM*: a square
output of the kernel's matmul output elements (M = N = sqrt(outputs)) and the
K that gives its matmul FLOPs (K = FLOPs / (2 M N)). A tiled kernel's own tile
sizes are not the GEMM a chip's library would see; the whole problem is.
"""

from __future__ import annotations

import math
from functools import lru_cache

from devices.cost import efficiency as eff
from devices.cost.model import Estimate
from devices.dtypes import dtype_name
from devices.figure import Figure

KERNEL_CATEGORY = "kernel"
"""The :attr:`Estimate.category` of every kernel estimate."""


def equivalent_gemm(matmul_flops: float, matmul_outputs: float) -> tuple[int, int, int] | None:
    """(M, N, K) of the square GEMM with ``matmul_outputs`` output elements and ``matmul_flops`` FLOPs."""
    if matmul_flops <= 0 or matmul_outputs <= 0:
        return None
    side = max(1, round(math.sqrt(matmul_outputs)))
    return side, side, max(1, round(matmul_flops / (2.0 * side * side)))


def estimate_kernel(kind: str, dtype: object, *, bytes: float, flops: float = 0.0, matmul_flops: float = 0.0,
                    matmul_outputs: float = 0.0, name: str = "kernel") -> Estimate:
    """Modelled cost of one kernel on a chip of ``kind``.

    ``bytes``: what the kernel's loads and stores move in HBM; ``flops``: its
    vector (non-matmul) arithmetic; ``matmul_flops`` and ``matmul_outputs``:
    the FLOPs of its matrix products (multiply-add = 2) and the output elements
    they produce; ``dtype``: the dtype its data is in (the peak is read for it);
    ``name``: the kernel's name, kept as :attr:`Estimate.op`.

    >>> e = estimate_kernel("h100", "float32", bytes=3 * 4 * (1 << 20))   # a 1 Mi-element vector add
    >>> e.bound, e.bytes
    ('memory', 12582912.0)
    """
    for label, value in (("bytes", bytes), ("flops", flops), ("matmul_flops", matmul_flops),
                         ("matmul_outputs", matmul_outputs)):
        if not isinstance(value, (int, float)) or value < 0 or value != value:
            raise ValueError(f"{label}: expected a non-negative number, got {value!r}")
    return _estimate_kernel(kind, dtype if type(dtype) is str else dtype_name(dtype), float(bytes), float(flops),
                            float(matmul_flops), float(matmul_outputs), name)


@lru_cache(maxsize=1 << 14)
def _estimate_kernel(kind: str, dtype: str, moved: float, flops: float, matmul_flops: float,
                     matmul_outputs: float, name: str) -> Estimate:
    from devices.chip import chip as lookup

    chip = lookup(kind)
    dtype = dtype_name(dtype)
    p = eff.params_for(chip.kind, chip.family)
    peak_fig = chip.peak_for(dtype)
    bw_fig = chip.hbm_bandwidth
    sources: list[Figure] = []

    compute = 0.0
    if flops > 0 or matmul_flops > 0:
        sources.append(peak_fig)
        bf16 = chip.peak_for("bfloat16")
        vector = min(p.vector_fraction.value * bf16.value, peak_fig.value)
        sources += [p.vector_fraction, bf16]
        compute = flops / vector
        gemm = equivalent_gemm(matmul_flops, matmul_outputs)
        if matmul_flops > 0:
            # As for aten::mm: the tensor engine, or the vector path where that is faster.
            rate = vector * p.matmul_efficiency.value
            if gemm is not None:
                rate = max(peak_fig.value * eff.matmul_efficiency(p, *gemm), rate)
            compute += matmul_flops / rate
            sources += [p.matmul_efficiency, p.matmul_half_dim]

    memory = 0.0
    if moved > 0:
        sources += [bw_fig, p.memory_efficiency, p.memory_latency]
        memory = moved / (bw_fig.value * eff.memory_efficiency(p, bw_fig.value, moved))

    overhead = p.launch_overhead.value
    sources.append(p.launch_overhead)
    roof = max(compute, memory)
    bound = "overhead" if overhead > roof else "compute" if compute >= memory else "memory"
    total_flops = flops + matmul_flops
    projected = (peak_fig.projected and total_flops > 0) or (bw_fig.projected and moved > 0) or (
        chip.projected and not total_flops and not moved)
    return Estimate(
        seconds=roof + overhead, flops=total_flops, bytes=moved, bound=bound, kind=chip.kind, op=name, dtype=dtype,
        projected=bool(projected), estimated_by_default=False, sources=tuple(dict.fromkeys(sources)),
        category=KERNEL_CATEGORY, compute_seconds=compute, memory_seconds=memory, overhead_seconds=overhead)


def cache_clear() -> None:
    """Forget cached kernel estimates (devices.cost.cache_clear calls this)."""
    _estimate_kernel.cache_clear()
