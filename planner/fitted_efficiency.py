"""Step-level efficiencies: what a training framework's kernels add to the per-op cost model.

The per-op cost model (``devices.cost``) prices each aten op as eager PyTorch
runs it, calibrated on measured matmuls and copies. A training framework at
scale runs other kernels: FP8 GEMMs (which reach a smaller fraction of their
peak than BF16 ones), fused pointwise kernels (one kernel where eager PyTorch
runs several), fused attention. These factors multiply the modelled time of
an op class on a chip family; they are the same for every model and every
configuration, fitted once (see :mod:`planner.golden`), each a
:class:`devices.Figure` whose note says what it was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

import devices
from devices.figure import Figure

_POINTWISE = ("elementwise", "norm", "norm_backward", "copy", "reduction", "softmax", "softmax_backward",
              "creation", "index", "embedding", "loss", "unknown")
_ATTENTION = ("attention", "attention_backward")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEfficiency:
    """Factors on modelled op time per op class for one chip family (None: the cost model as is)."""

    family: str
    """The chip family (or kind) the factors belong to."""
    matmul_fp8: Figure | None = None
    """Factor on FP8 matmul time (the cost model prices FP8 at the BF16-calibrated fraction of FP8 peak)."""
    attention: Figure | None = None
    """Factor on fused attention time (forward and backward)."""
    pointwise: Figure | None = None
    """Factor on everything outside matmuls and attention (elementwise, norms, copies, reductions):
    kernel fusion in training frameworks."""
    overlap: Figure | None = None
    """Share of the communication running beside compute that overlapping hides (TP beside GEMMs, FSDP
    and ZeRO gathers and reduce-scatters beside blocks, DP reduction beside backward); the rest costs
    compute time (collective kernels take SMs and memory bandwidth). None: all of it."""

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


_MEGATRON = ("NVIDIA Megatron-Bridge, docs/performance-summary.md, 25.11 container, FP8 current scaling, "
             "sequence length 8192 (https://github.com/NVIDIA-NeMo/Megatron-Bridge)")
_H100_ROWS = "Llama3 8B on 8, Llama3 70B on 64 and Llama3.1 405B on 1,024 DGX-H100"
_FIT = ("fitted by planner.golden.fit (coordinate search on its grid, least squares on "
        "log(modelled/published) tokens/s/GPU) to the three DGX-H100 rows only; the DGX-GB200 rows test it")


def _fitted(value: float, what: str, rows: str = _H100_ROWS, how: str = _FIT) -> Figure:
    return Figure(value, "", f"fitted to Megatron-Bridge tokens/s/GPU ({rows}); {_MEGATRON}", "calibrated",
                  f"{what}; {how}")


GPU = StepEfficiency(
    family="gpu",
    matmul_fp8=_fitted(1.15, "FP8 GEMMs take 1.15x the cost model's time (which prices them at the "
                             "BF16-calibrated share of the FP8 peak): about 70 % of FP8 peak on H100"),
    attention=_fitted(0.5, "fused attention takes 0.5x the FlashAttention-2 curve's time: the framework "
                           "runs cuDNN / FlashAttention-3-class kernels (FA3 reports 1.5-2.0x FA2); the fit "
                           "sits at the grid's physical bound 0.5"),
    overlap=_fitted(0.4, "40 % of the communication running beside compute is hidden; the rest costs "
                         "compute time (collective kernels share SMs and HBM bandwidth)"),
)
"""The GPU family's fitted step efficiencies (Hopper-fitted; applied to every NVIDIA kind without its own)."""

GB200 = StepEfficiency(
    family="gb200",
    matmul_fp8=_fitted(1.6, "GB200 FP8 GEMMs take 1.6x the cost model's time (the family's cost model is "
                            "calibrated on a Hopper part): about 50 % of GB200's FP8 peak",
                       rows="Llama3 8B on 8 DGX-GB200",
                       how="fitted by planner.golden.fit_kind to that row alone (the GB200 row with "
                           "the least communication); the 70B and 405B DGX-GB200 rows test it"),
    attention=GPU.attention, overlap=GPU.overlap)
"""GB200's own FP8 GEMM factor; its other factors are the GPU family's."""

FITTED: dict[str, StepEfficiency] = {"gpu": GPU, "gb200": GB200}
"""Fitted efficiencies by chip kind or family (a kind's entry wins over its family's); each figure's note
says what it was fitted to. Trainium has none: no published Trainium training throughput was found."""


@lru_cache(maxsize=None)
def step_efficiency(kind: str) -> StepEfficiency | None:
    """The step efficiencies of a chip kind: its own fitted factors, else its family's, else None."""
    chip = devices.chip(kind)
    return FITTED.get(chip.kind) or FITTED.get(chip.family)


__all__ = ["FITTED", "StepEfficiency", "step_efficiency"]
