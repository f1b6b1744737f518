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

from dataclasses import dataclass, fields, replace
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
    fitted_on: tuple[str, ...] = ()
    """The chip kinds whose published rows the factors were fitted to; the family's other kinds inherit them
    (:meth:`inherited`), and every figure that shows them says so."""
    matmul: Figure | None = None
    """Factor on matmul time in BF16/FP16/FP32 (and in FP8 where :attr:`matmul_fp8` is unset): the stack's
    GEMMs against the cost model's GEMM efficiency curve."""
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
    collectives: Figure | None = None
    """Factor on the modelled time of every collective among the family's chips: the stack's collective
    library against the alpha-beta model of the links (``collectives.estimate``). None: the model as is."""
    collective_latency: Figure | None = None
    """Seconds (unit "s") the stack adds per step of a collective over the group's chips (n - 1 steps for an
    all-gather, reduce-scatter or all-to-all over n chips, 2(n - 1) for an all-reduce, 1 for a send): its
    synchronisation between steps, beyond the links' hop latency. None: none."""

    def factor(self, category: str, dtype: str) -> Figure | None:
        """The factor for an op of ``category`` computing in ``dtype``, or None."""
        if category == "matmul":
            if dtype.startswith("float8") and self.matmul_fp8 is not None:
                return self.matmul_fp8
            return self.matmul
        if category in _ATTENTION:
            return self.attention
        if category in _POINTWISE:
            return self.pointwise
        return None

    def figures(self) -> dict[str, Figure]:
        """The fitted figures by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), Figure)}

    def inherited(self, kind: str) -> bool:
        """True when ``kind`` uses these factors without rows of its own (a Trn3 taking the Trn1 fit)."""
        return bool(self.fitted_on) and devices.chip(kind).kind not in self.fitted_on

    def label(self, kind: str) -> str:
        """How ``kind``'s step efficiencies were obtained, for reports: ``fitted on h100 rows`` or
        ``inherited from the trainium family (fitted on trn1 rows)``."""
        on = "/".join(self.fitted_on) or "published"
        if self.inherited(kind):
            return f"inherited from the {self.family} family (fitted on {on} rows)"
        return f"{self.family} family, fitted on {on} rows"


_MEGATRON = ("NVIDIA Megatron-Bridge, docs/performance-summary.md, 25.11 container, FP8 current scaling, "
             "sequence length 8192 (https://github.com/NVIDIA-NeMo/Megatron-Bridge)")
_H100_ROWS = "Llama3 8B on 8, Llama3 70B on 64 and Llama3.1 405B on 1,024 DGX-H100"
_FIT = ("fitted by planner.golden.fit (coordinate search on its grid, least squares on "
        "log(modelled/published) tokens/s/GPU) to the three DGX-H100 rows only; the DGX-GB200 rows test it")


def _fitted(value: float, what: str, rows: str = _H100_ROWS, how: str = _FIT) -> Figure:
    return Figure(value, "", f"fitted to Megatron-Bridge tokens/s/GPU ({rows}); {_MEGATRON}", "calibrated",
                  f"{what}; {how}")


GPU = StepEfficiency(
    family="gpu", fitted_on=("h100",),
    matmul_fp8=_fitted(1.15, "FP8 GEMMs take 1.15x the cost model's time (which prices them at the "
                             "BF16-calibrated share of the FP8 peak): about 70 % of FP8 peak on H100"),
    attention=_fitted(0.5, "fused attention takes 0.5x the FlashAttention-2 curve's time: the framework "
                           "runs cuDNN / FlashAttention-3-class kernels (FA3 reports 1.5-2.0x FA2); the fit "
                           "sits at the grid's physical bound 0.5. Rows of stacks that run FlashAttention-2 "
                           "(torchtitan, NeMo's 2024 containers) are priced without it (planner.golden.STACK_ATTENTION)"),
    overlap=_fitted(0.4, "40 % of the communication running beside compute is hidden; the rest costs "
                         "compute time (collective kernels share SMs and HBM bandwidth)"),
)
"""The GPU family's fitted step efficiencies (Hopper-fitted; applied to every NVIDIA kind without its own)."""

GB200 = StepEfficiency(
    family="gb200", fitted_on=("gb200",),
    matmul_fp8=_fitted(1.6, "GB200 FP8 GEMMs take 1.6x the cost model's time (the family's cost model is "
                            "calibrated on a Hopper part): about 50 % of GB200's FP8 peak",
                       rows="Llama3 8B on 8 DGX-GB200",
                       how="fitted by planner.golden.fit_kind to that row alone (the GB200 row with "
                           "the least communication); the 70B and 405B DGX-GB200 rows test it"),
    attention=GPU.attention, overlap=GPU.overlap)
"""GB200's own FP8 GEMM factor; its other factors are the GPU family's."""

_FOUND = ("NVIDIA Megatron-Bridge, docs/performance-summary.md @97ad8cc6f, 25.11 container, FP8 current scaling, "
          "sequence length 8192 (https://github.com/NVIDIA-NeMo/Megatron-Bridge)")

B200 = replace(
    GB200, family="b200", fitted_on=("b200",),
    matmul_fp8=Figure(1.45, "", f"fitted to Megatron-Bridge tokens/s/GPU (Llama3 8B on 8 DGX-B200); {_FOUND}",
                      "calibrated", "B200 FP8 GEMMs take 1.45x the cost model's time (about 55 % of B200's FP8 peak, "
                                    "between Hopper's 70 % and GB200's 50 %); fitted by planner.golden.fit_kind to that "
                                    "row alone; the 405B DGX-B200 rows (25.11, 25.09) and the 25.09 8B row test it"))
"""B200's own FP8 GEMM factor (its 8-GPU row); its other factors are the GPU family's."""

GB300 = replace(
    GB200, family="gb300", fitted_on=("gb300",),
    matmul_fp8=Figure(1.15, "", f"fitted to Megatron-Bridge tokens/s/GPU (Llama3 8B on 8 DGX-GB300); {_FOUND}",
                      "calibrated", "GB300 FP8 GEMMs take 1.15x the cost model's time, as Hopper's (Blackwell Ultra "
                                    "at 1,400 W holds its clocks where GB200 at 1,200 W reaches 1.6x); fitted by "
                                    "planner.golden.fit_kind to that row alone; the 70B and 405B DGX-GB300 rows test it"))
"""GB300's own FP8 GEMM factor (its 8-GPU row); its other factors are the GPU family's."""

_NEURON_221 = ("AWS Neuron documentation, 'Trn1/Trn1n Training Performance', table training_data_decoder.csv "
               "(aws-neuron/aws-neuron-sdk general/benchmarks/trn1/) @752349fd3de5aaa6eb69690955eeaa7d43fcd082, "
               "Neuron SDK Release 2.21.0, December 20th 2024")
_TRN1_ROWS = ("llama2-7b 16 nodes (Neuron 2.21.0), llama2-13b 32 nodes (Neuron 2.21.0), "
              "llama2-70b 32 nodes (Neuron 2.21.0)")
_TRN1_FIT = ("exhaustive search of planner.golden_neuron.FIT_GRID, least squares on log(modelled/published) "
             "tokens/s per chip over the three Neuron 2.21.0 rows only (planner.golden_neuron.fit); the table's "
             "other rows (releases 2.16.0-2.24.0) test it")


def _trn1(value: float, what: str, unit: str = "") -> Figure:
    return Figure(value, unit, f"fitted to AWS's Trn1 training throughput, tokens/s per chip ({_TRN1_ROWS}); "
                               f"{_NEURON_221}", "calibrated", f"{what}; {_TRN1_FIT}")


TRAINIUM = StepEfficiency(
    family="trainium", fitted_on=("trn1",),
    matmul=_trn1(1.25, "Trainium BF16 GEMMs take 1.25x the cost model's time (whose Trainium GEMM efficiency, 70 % "
                       "of peak, is an assumption): about 56 % of peak on large GEMMs"),
    collectives=_trn1(0.5, "Neuron's collectives take 0.5x the bandwidth time collectives.estimate models on the "
                           "trn1 torus and EFA (its algorithms for a torus sub-group use one link per chip); the fit "
                           "sits at the grid's physical bound 0.5"),
    collective_latency=_trn1(45e-6, "Neuron's collectives add 45 us per ring step over the group's chips "
                                    "(synchronisation between steps): what makes tensor parallelism over a whole "
                                    "trn1.32xlarge (TP=32 NeuronCores) slower per chip than TP=8", "s"),
    overlap=Figure(0.0, "", "assumption (hybrid-interop step model): NeuronX Distributed Llama examples "
                            "(aws-neuron/neuronx-distributed examples/training/llama)", "projected",
                   "no communication is hidden behind compute: NeuronX Distributed issues its collectives in the "
                   "compiled graph between the GEMMs that produce and consume them (not fitted: three rows fit three "
                   "factors)"),
)
"""The Trainium family's step efficiencies, fitted on Trn1 (Neuron 2.21.0 rows); Trn2, Trn3 and Trn4 inherit
them, labelled inherited wherever they show (:meth:`StepEfficiency.label`). Attention and pointwise work keep
the cost model's figures (no factor: the rows do not separate them)."""

FITTED: dict[str, StepEfficiency] = {"gpu": GPU, "gb200": GB200, "b200": B200, "gb300": GB300,
                                     "trainium": TRAINIUM}
"""Fitted efficiencies by chip kind or family (a kind's entry wins over its family's); each figure's note
says what it was fitted to."""


@lru_cache(maxsize=None)
def step_efficiency(kind: str) -> StepEfficiency | None:
    """The step efficiencies of a chip kind: its own fitted factors, else its family's, else None."""
    chip = devices.chip(kind)
    return FITTED.get(chip.kind) or FITTED.get(chip.family)


def collective_factors(kinds) -> dict[str, tuple[float, float]]:
    """Kind -> (factor on its collectives' modelled time, seconds added per step) where fitted
    (:attr:`StepEfficiency.collectives`, :attr:`StepEfficiency.collective_latency`)."""
    out = {}
    for kind in kinds:
        eff = step_efficiency(kind)
        if eff is not None and (eff.collectives is not None or eff.collective_latency is not None):
            out[kind] = (eff.collectives.value if eff.collectives is not None else 1.0,
                         eff.collective_latency.value if eff.collective_latency is not None else 0.0)
    return out


__all__ = ["B200", "FITTED", "GB200", "GB300", "GPU", "TRAINIUM", "StepEfficiency", "collective_factors", "step_efficiency"]
