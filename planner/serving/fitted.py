"""Serving efficiencies: what a production inference engine adds to the per-op cost model, fitted.

The per-op cost model (``devices.cost``) prices each kernel from the catalogue's peaks
and bandwidths and efficiency curves calibrated on measured matmuls and copies. A
serving engine's kernels and its host loop are not those: FP8 GEMMs reach another
share of the peak, attention over a paged cache another, and every iteration pays
the scheduler, sampling and the host's synchronisation; and a compute-bound GEMM and a
weight-streaming one are not the same share of their roofs. These factors capture that
per chip family (the same for every model, precision and configuration), each a
:class:`devices.Figure` whose note says which published rows it was fitted to
(:mod:`planner.serving.golden`); the rows that test them were not used.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

import devices
from devices.figure import Figure


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingEfficiency:
    """Factors on the fused engine's modelled time for one chip family (None: the cost model as is)."""

    family: str
    gemm: Figure | None = None
    """Factor on GEMMs' compute time (every precision): what a compute-bound prefill reaches."""
    memory: Figure | None = None
    """Factor on every kernel's memory time but attention's: streaming the weights in decode, pointwise ops."""
    attention: Figure | None = None
    """Factor on attention time (prefill and decode, over the paged cache)."""
    iteration: Figure | None = None
    """Seconds every engine iteration pays outside the kernels (scheduling, sampling, host synchronisation)."""

    def figures(self) -> dict[str, Figure]:
        """The fitted figures by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "family" and getattr(self, f.name) is not None}


_GPU_ROWS = ("TRT-LLM H100 TP2 1000/1000; TRT-LLM H200 TP2 1000/1000; TRT-LLM H100 TP2 8192/1024; "
             "TRT-LLM H200 TP2 8192/1024; MLPerf v4.1 Offline 8xH100; MLPerf v4.1 Server 8xH100; "
             "NIM 2xH100 TP2 c1; NIM 2xH100 TP2 c25")
_TRN_ROWS = ("Neuron trn1 TP16 b4 128/1024; Neuron trn1 TP16 b4 2048/2048; Neuron trn1 TP16 b1 128/1024; "
             "Neuron trn1 TP16 b1 2048/2048")
_SOURCES = ("TensorRT-LLM perf-overview @ 03e27c7d, MLPerf Inference v4.1 (mlcommons/inference_results_v4.1 "
            "@ a2f5d66d), NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, AWS Neuron Trn1 inference performance "
            "(aws-neuron-sdk @ 78169c6c)")
_HOW = ("coordinate descent on planner.serving.golden.FIT_GRID from FIT_START, least squares on "
        "log(modelled/published) over every published figure of those rows (planner.serving.golden.fit); other "
        "published rows test it")


def _fitted(value: float, unit: str, rows: str, what: str) -> Figure:
    return Figure(value, unit, f"fitted to published serving rows ({rows}); {_SOURCES}", "calibrated",
                  f"{what}; {_HOW}")


GPU = ServingEfficiency(
    family="gpu",
    gemm=_fitted(1.35, "", _GPU_ROWS, "GEMMs' compute takes 1.35x the cost model's time (FP8 GEMMs of "
                                     "TensorRT-LLM at about 59 % of the FP8 peak where the model assumes 80 %)"),
    memory=_fitted(1.1, "", _GPU_ROWS, "kernels' memory traffic (weight streaming in decode, pointwise ops) takes "
                                       "1.1x the cost model's time"),
    attention=_fitted(1.0, "", _GPU_ROWS, "attention over the paged KV cache as the cost model prices it (its "
                                          "curve is FlashAttention-2's)"),
    iteration=_fitted(0.0005, "s", _GPU_ROWS, "0.5 ms per engine iteration outside the kernels (scheduling and "
                                              "sampling, mostly hidden by CUDA graphs and overlap)"),
)
"""The NVIDIA family's serving efficiencies (Hopper-fitted; applied to every NVIDIA kind)."""

TRAINIUM = ServingEfficiency(
    family="trainium",
    gemm=_fitted(2.0, "", _TRN_ROWS, "GEMMs' compute under Transformers NeuronX on Trainium1 takes 2x the cost "
                                     "model's time (which assumes 70 % of the dense peak): about 35 % of it"),
    memory=_fitted(1.1, "", _TRN_ROWS, "kernels' memory traffic (weight streaming in decode) takes 1.1x the "
                                        "cost model's time"),
    attention=_fitted(12.0, "", _TRN_ROWS, "attention takes 12x the cost model's time: Neuron's decode TPOT "
                                           "grows with the context far faster than its KV reads (28.4 -> 32.3 ms "
                                           "from 128/1024 to 2048/2048 at batch 4)"),
    iteration=_fitted(0.007, "s", _TRN_ROWS, "7 ms per iteration outside the kernels: the near-constant gap "
                                             "between Neuron's published TPOT and its kernels' time, at batch 1 "
                                             "and 4 alike"),
)
"""The Trainium family's serving efficiencies (fitted on Trainium1 rows: the only published Trainium serving
figures among the given rows; applied to every Trainium kind)."""

FITTED: dict[str, ServingEfficiency] = {"gpu": GPU, "trainium": TRAINIUM}
"""Fitted serving efficiencies by chip kind or family (a kind's entry wins over its family's); each figure's
note says what it was fitted to."""


@lru_cache(maxsize=None)
def serving_efficiency(kind: str) -> ServingEfficiency | None:
    """A kind's serving efficiencies: its own, else its family's, else None."""
    chip = devices.chip(kind)
    return FITTED.get(chip.kind) or FITTED.get(chip.family)


__all__ = ["FITTED", "GPU", "TRAINIUM", "ServingEfficiency", "serving_efficiency"]
