"""Step-level efficiencies: what a training framework's kernels add to the per-op cost model.

The per-op cost model (``devices.cost``) prices each aten op as eager PyTorch
runs it, calibrated on measured matmuls and copies. A training framework at
scale runs other kernels: FP8 GEMMs (which reach a smaller fraction of their
peak than BF16 ones), fused pointwise kernels (one kernel where eager PyTorch
runs several), fused attention. These factors multiply the modelled time of
an op class on a chip family; they are the same for every model and every
configuration, fitted once (see :mod:`interop.planning.golden`), each a
:class:`devices.Figure` whose note says what it was fitted to.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Iterator

import devices
from devices.figure import Figure

_POINTWISE = ("elementwise", "norm", "norm_backward", "copy", "reduction", "softmax", "softmax_backward",
              "creation", "index", "embedding", "loss", "unknown")
_ATTENTION = ("attention", "attention_backward")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEfficiency:
    """Factors on modelled op time per op class for one chip family (None: the cost model as is)."""

    family: str
    matmul_fp8: Figure | None = None
    """Factor on FP8 matmul time (the cost model prices FP8 at the BF16-calibrated fraction of FP8 peak)."""
    attention: Figure | None = None
    """Factor on fused attention time (forward and backward)."""
    pointwise: Figure | None = None
    """Factor on everything outside matmuls and attention (elementwise, norms, copies, reductions):
    kernel fusion in training frameworks."""
    tp_overlap: Figure | None = None
    """Fraction of the tensor-parallel communication beside a GEMM that overlapping hides
    (None: all of it that the GEMM's duration allows)."""

    def factor(self, category: str, dtype: str) -> Figure | None:
        """The factor for an op of ``category`` computing in ``dtype``, or None."""
        if category == "matmul":
            return self.matmul_fp8 if dtype.startswith("float8") else None
        if category in _ATTENTION:
            return self.attention
        if category in _POINTWISE:
            return self.pointwise
        return None

    def figures(self) -> dict[str, Figure]:
        """The fitted figures by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "family" and getattr(self, f.name) is not None}


FITTED: dict[str, StepEfficiency] = {}
"""Fitted efficiencies per chip family (filled by :mod:`interop.planning.golden`'s fit; see its notes)."""


@lru_cache(maxsize=None)
def step_efficiency(kind: str) -> StepEfficiency | None:
    """The step efficiencies of a chip kind: its family's fitted factors, or None where none was fitted."""
    return FITTED.get(devices.chip(kind).family)


@contextmanager
def use(efficiencies: dict[str, StepEfficiency]) -> Iterator[None]:
    """Price with other step efficiencies (by family) inside the block (fitting, tests)."""
    from interop.planning import block_cost

    saved = dict(FITTED)
    FITTED.clear()
    FITTED.update(efficiencies)
    step_efficiency.cache_clear()
    block_cost.cache_clear()
    try:
        yield
    finally:
        FITTED.clear()
        FITTED.update(saved)
        step_efficiency.cache_clear()
        block_cost.cache_clear()


__all__ = ["FITTED", "StepEfficiency", "step_efficiency", "use"]
