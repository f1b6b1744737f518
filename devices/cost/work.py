"""The device work of one op (FLOPs and bytes moved), and the byte-counting helpers every op family shares.

:mod:`devices.cost.flops` (compute-heavy families, and the dispatcher
:func:`~devices.cost.flops.count`) and :mod:`devices.cost.traffic`
(memory-bound families) both build :class:`Work` with these helpers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from devices.cost import shapes as sh

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Work:
    """The device work of one op, before any chip is involved."""

    category: str
    """The op family from :func:`devices.cost.op_families.classify`."""
    flops: float = 0.0
    """Floating-point operations (multiply-add = 2)."""
    bytes: float = 0.0
    """Bytes read plus bytes written in HBM."""
    gemm: tuple[int, int, int] | None = None
    """(M, N, K) of one GEMM, for the size-dependent matmul efficiency."""
    keys_per_query: float = 0.0
    """Attention: mean number of keys each query attends to (drives its efficiency)."""
    scores: float = 0.0
    """Attention: (query, key) scores over every head, each one exponential of the softmax."""
    by_default: bool = False
    """True when the op was not recognised (or its shapes not understood) and only bytes were counted."""
    note: str = ""
    """Why a by-default count was used."""
    launches: int = 1
    """Kernel launches the op issues (a multi-tensor op's launch rule may need several, an empty one none)."""
    sources: tuple = ()
    """Figures the count itself used (:class:`devices.figure.Figure`; the multi-tensor launch rule)."""


def default_work(shapes: Sequence[Shape], itemsize: int, out_shapes: Sequence[Shape] | None,
                 note: str) -> Work:
    """Bytes-only work: inputs read once, outputs written once.

    Without ``out_shapes`` the output is taken to be as large as the largest
    input (the shape of most unrecognised ops: elementwise, in-place, copies).
    """
    outs = list(out_shapes) if out_shapes is not None else [max(shapes, key=sh.numel)] if shapes else []
    return Work("unknown", 0.0, float((sh.total(shapes) + sh.total(outs)) * itemsize),
                by_default=True, note=note)


def moved_bytes(ins: Sequence[Shape], outs: Sequence[Shape], itemsize: int) -> float:
    return float((sh.total(ins) + sh.total(outs)) * itemsize)


def outputs(out_shapes: Sequence[Shape] | None, inferred: Sequence[Shape]) -> list[Shape]:
    """The output shapes the caller gave, else the ones a rule inferred."""
    return list(out_shapes) if out_shapes is not None else list(inferred)


__all__ = ["Shape", "Work", "default_work", "moved_bytes", "outputs"]
