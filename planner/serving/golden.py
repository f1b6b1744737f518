"""Published serving results the serving model is checked against, and the fit of its serving efficiencies.

Each :class:`GoldenRow` is a published configuration as its source states it (model as a
transformers config, rack, parallelism, precision, workload) and the figures it reports
(output tokens/s, TTFT, TPOT). :func:`evaluate` models every row with
:func:`planner.serving.serving_whatif`'s machinery; :func:`fit` solves the serving
efficiencies of one chip family (:mod:`planner.serving.fitted`) on chosen rows, the same
factors for every row of that family. Rows, sources and workloads:
``reference/inference.md`` of the project.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from devices.figure import Figure
from planner.decoder_blocks import DecoderBlocks
from planner.serving import fitted
from planner.serving.engine import Engine
from planner.serving.fitted import ServingEfficiency
from planner.serving.config import configure, spec_of
from planner.serving.run import evaluate as evaluate_config
from planner.serving.model_shape import model_shape
from planner.serving.workload import Workload


def _llama70b(vocab: int, context: int, rope: dict) -> dict:
    return dict(vocab_size=vocab, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=context, rms_norm_eps=1e-5,
                rope_parameters=rope, tie_word_embeddings=False)


_ARCH = "reference/inference.md: Llama 3.3 70B = Llama 3.1 70B; Llama-3-70B; Llama 2 70B (transformers configs)"
MODELS = {
    "llama3.3-70b": DecoderBlocks(name="llama3.3-70b", source=_ARCH, config_class="LlamaConfig", arch=_llama70b(
        128256, 131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "llama3-70b": DecoderBlocks(name="llama3-70b", source=_ARCH, config_class="LlamaConfig", arch=_llama70b(
        128256, 8192, {"rope_type": "default", "rope_theta": 500000.0})),
    "llama2-70b": DecoderBlocks(name="llama2-70b", source=_ARCH, config_class="LlamaConfig", arch=_llama70b(
        32000, 4096, {"rope_type": "default", "rope_theta": 10000.0})),
}
"""The rows' models, as their transformers configs' numbers."""

TRTLLM = ("NVIDIA TensorRT-LLM docs/source/developer-guide/perf-overview.md @ 03e27c7d (trtllm-bench throughput, "
          "PyTorch backend, Llama-3.3-70B-Instruct-FP8, every request queued at once)")
MLPERF = ("MLCommons inference_results_v4.1 @ a2f5d66d, closed/NVIDIA DGX-H100_H100-SXM-80GBx8_TRT llama2-70b-99 "
          "(TensorRT 10.2, FP8, TP2 x 4; batch limits 896 Offline, 1024 Server); every request asks for up to 1,024 "
          "new tokens (mlcommons/inference language/llama2-70b/SUT.py gen_kwargs max_new_tokens=1024), which a "
          "guaranteed-no-evict engine reserves")
NIM = "NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, Performance (NIM 1.8.0, AIPerf, 5000 in / 500 out)"
NEURON = ("AWS Neuron docs, Trn1 inference performance, throughput_data_decoder.csv / latency_data_decoder.csv "
          "(Transformers NeuronX, Neuron 2.18.1, TP 32 NeuronCores, BF16)")


def STATIC(batch: int) -> Engine:
    """A static batch (Transformers NeuronX): ``batch`` prompts prefilled together, then decoded together."""
    return Engine(chunked_prefill=False, max_batch=batch)


@dataclass(frozen=True, slots=True)
class GoldenRow:
    """One published configuration and what it reported."""

    label: str
    model: str
    """A key of :data:`MODELS`."""
    rack: str
    parallel: dict
    precision: str
    workload: Workload
    published: dict
    """Metric -> published value: ``tokens_per_s`` (total), ``tokens_per_s_per_chip``, ``ttft_p50``,
    ``tpot_p50`` (seconds)."""
    source: str
    limits: dict | None = None
    """Metric -> upper bound the run had to meet (``ttft_p99``, ``tpot_p99``), checked, not fitted."""
    engine: Engine = Engine()
    """The engine's limits as the source states them (MLPerf's batch limits, Neuron's static batches)."""


ROWS: tuple[GoldenRow, ...] = (
    GoldenRow("TRT-LLM H100 TP2 1000/1000", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
              Workload(1000, 1000, requests=3000), {"tokens_per_s_per_chip": 2209}, TRTLLM),
    GoldenRow("TRT-LLM H200 TP2 1000/1000", "llama3.3-70b", "h200:2", {"tp": 2}, "fp8",
              Workload(1000, 1000, requests=3000), {"tokens_per_s_per_chip": 2587}, TRTLLM),
    GoldenRow("TRT-LLM H100 TP2 8192/1024", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
              Workload(8192, 1024, requests=1500), {"tokens_per_s_per_chip": 398}, TRTLLM),
    GoldenRow("TRT-LLM H200 TP2 8192/1024", "llama3.3-70b", "h200:2", {"tp": 2}, "fp8",
              Workload(8192, 1024, requests=1500), {"tokens_per_s_per_chip": 537}, TRTLLM),
    GoldenRow("MLPerf v4.1 Offline 8xH100", "llama2-70b", "h100:8", {"tp": 2, "replicas": 4}, "fp8",
              Workload(222, 290, requests=24576, max_output_tokens=1024), {"tokens_per_s": 24524.9}, MLPERF,
              engine=Engine(max_batch=896)),
    GoldenRow("MLPerf v4.1 Server 8xH100", "llama2-70b", "h100:8", {"tp": 2, "replicas": 4}, "fp8",
              Workload(222, 290, requests=24576, rate=75, max_output_tokens=1024), {"tokens_per_s": 21605.79},
              MLPERF, limits={"ttft_p99": 2.0, "tpot_p99": 0.2}, engine=Engine(max_batch=1024)),
    GoldenRow("NIM 2xH100 TP2 c1", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
              Workload(5000, 500, concurrency=1, requests=8),
              {"ttft_p50": 0.40677, "tpot_p50": 0.01858, "tokens_per_s": 51.67}, NIM),
    GoldenRow("NIM 2xH100 TP2 c25", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
              Workload(5000, 500, concurrency=25, requests=250),
              {"ttft_p50": 0.68869, "tpot_p50": 0.03875, "tokens_per_s": 623.4}, NIM),
    GoldenRow("Neuron trn1 TP16 b4 128/1024", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(128, 1024, concurrency=4, requests=4),
              {"tokens_per_s": 140.51, "ttft_p50": 0.12986, "tpot_p50": 0.02838}, NEURON, engine=STATIC(4)),
    GoldenRow("Neuron trn1 TP16 b4 2048/2048", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(2048, 2048, concurrency=4, requests=4),
              {"tokens_per_s": 120.36, "ttft_p50": 1.66112, "tpot_p50": 0.03233}, NEURON, engine=STATIC(4)),
    GoldenRow("Neuron trn1 TP16 b1 128/1024", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(128, 1024, concurrency=1, requests=1),
              {"tokens_per_s": 40.64, "ttft_p50": 0.0532, "tpot_p50": 0.02448}, NEURON, engine=STATIC(1)),
    GoldenRow("Neuron trn1 TP16 b1 2048/2048", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(2048, 2048, concurrency=1, requests=1),
              {"tokens_per_s": 37.70, "ttft_p50": 0.547, "tpot_p50": 0.0262}, NEURON, engine=STATIC(1)),
)
"""The given rows of reference/inference.md (A: TensorRT-LLM, B: MLPerf, C: NIM, D: Neuron)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One row modelled: published and modelled value per metric."""

    row: GoldenRow
    modelled: dict
    limits_met: dict

    def errors(self) -> dict:
        """Metric -> modelled / published - 1."""
        return {k: self.modelled[k] / v - 1 for k, v in self.row.published.items()}


def _metrics(est) -> dict:
    return {"tokens_per_s": est.output_tokens_per_second, "tokens_per_s_per_chip": est.output_tokens_per_second_per_chip,
            "ttft_p50": est.ttft.p50, "tpot_p50": est.tpot.p50, "ttft_p99": est.ttft.p99, "tpot_p99": est.tpot.p99}


def evaluate_row(row: GoldenRow, *, calibrated: bool = True) -> Outcome:
    """Model one row with its stated configuration."""
    shape = model_shape(MODELS[row.model])
    spec = spec_of(row.rack)
    config = configure(shape, spec, parallel=row.parallel, precision=row.precision, prefill=None, decode=None,
                       engine=row.engine, workload=row.workload)
    est = evaluate_config(shape, spec, config, row.workload, record=False, calibrated=calibrated)
    m = _metrics(est)
    return Outcome(row, {k: m[k] for k in row.published},
                   {k: (m[k], bound, m[k] <= bound) for k, bound in (row.limits or {}).items()})


def evaluate(rows: Iterable[GoldenRow] = ROWS, *, calibrated: bool = True) -> list[Outcome]:
    """Model every row."""
    return [evaluate_row(r, calibrated=calibrated) for r in rows]


def table(outcomes: Sequence[Outcome]) -> str:
    """Published vs modelled per metric (Markdown), with the median and largest error."""
    names = {"tokens_per_s": "output tok/s", "tokens_per_s_per_chip": "output tok/s/GPU", "ttft_p50": "TTFT p50",
             "tpot_p50": "TPOT p50"}
    lines = ["| row | model | rack | parallel | precision | metric | published | modelled | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for o in outcomes:
        r = o.row
        par = " x ".join(f"{k} {v}" for k, v in r.parallel.items())
        for k, pub in r.published.items():
            mod = o.modelled[k]
            err = mod / pub - 1
            errors.append(abs(err))
            fmt = (lambda x: f"{x * 1e3:,.2f} ms") if k.startswith(("ttft", "tpot")) else (lambda x: f"{x:,.0f}")
            lines.append(f"| {r.label} | {r.model} | {r.rack} | {par} | {r.precision} | {names[k]} | {fmt(pub)} | "
                         f"{fmt(mod)} | {err:+.1%} |")
        for k, (value, bound, ok) in o.limits_met.items():
            lines.append(f"| {r.label} | {r.model} | {r.rack} | {par} | {r.precision} | {k} <= {bound:g} s | "
                         f"(limit) | {value * 1e3:,.1f} ms | {'met' if ok else 'NOT met'} |")
    lines.append("")
    lines.append(f"median absolute error {statistics.median(errors):.1%}, largest {max(errors):.1%} over "
                 f"{len(errors)} published figures (all modelled figures are modelled)")
    return "\n".join(lines)


def fit_loss(efficiency: ServingEfficiency, rows: Sequence[GoldenRow]) -> float:
    """Sum over the rows' metrics of log(modelled / published) squared, with ``efficiency`` for the family."""
    saved = dict(fitted.FITTED)
    fitted.FITTED[efficiency.family] = efficiency
    fitted.serving_efficiency.cache_clear()
    try:
        return sum(math.log1p(e) ** 2 for o in evaluate(rows) for e in o.errors().values())
    finally:
        fitted.FITTED.clear()
        fitted.FITTED.update(saved)
        fitted.serving_efficiency.cache_clear()


def _efficiency(family: str, values: dict, rows: Sequence[GoldenRow]) -> ServingEfficiency:
    fitted_to = "; ".join(r.label for r in rows)
    notes = {"gemm": "factor on GEMMs' compute time", "memory": "factor on kernels' memory time (attention's aside)",
             "attention": "factor on attention time", "iteration": "seconds per engine iteration outside the kernels"}
    figs = {k: Figure(v, "s" if k == "iteration" else "", f"fitted to published serving rows ({fitted_to})",
                      "calibrated", f"{notes[k]}; grid search, least squares on log(modelled/published) over those "
                                    f"rows only (planner.serving.golden.fit)")
            for k, v in values.items()}
    return ServingEfficiency(family=family, **figs)


FIT_GRID = {
    "gpu": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(21)],
            "memory": [round(1.0 + 0.05 * i, 2) for i in range(21)],
            "attention": [round(0.5 + 0.1 * i, 1) for i in range(26)],
            "iteration": [round(0.00025 * i, 5) for i in range(21)]},
    "trainium": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                 "memory": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                 "attention": [round(1.0 + 0.5 * i, 1) for i in range(39)],
                 "iteration": [round(0.0005 * i, 4) for i in range(21)]},
}
"""The values each family's factors may take (grids keep the fit reproducible)."""

FIT_START = {"gpu": {"gemm": 1.25, "memory": 1.0, "attention": 1.2, "iteration": 0.0},
             "trainium": {"gemm": 1.9, "memory": 1.0, "attention": 10.0, "iteration": 0.008}}
"""Where each family's descent starts (the factors of the previous fit; Trainium's time per iteration near the
constant gap between its published and its kernels' TPOT)."""

FIT_ROWS = {"gpu": tuple(r for r in ROWS if r.rack.startswith(("h100", "h200"))),
            "trainium": tuple(r for r in ROWS if r.rack.startswith("trn"))}
"""The given rows each family is fitted to (all of the given rows of its chips)."""


def fit(family: str, rows: Sequence[GoldenRow] | None = None, grid: dict | None = None,
        start: dict | None = None, progress=None) -> tuple[ServingEfficiency, float]:
    """The family's serving efficiencies minimising :func:`fit_loss` over ``rows`` (default
    :data:`FIT_ROWS`): coordinate descent on :data:`FIT_GRID` from ``start`` (default :data:`FIT_START`), each
    factor in turn stepping to a neighbouring grid value while that lowers the loss, until no factor's
    neighbour does (a coordinate-wise optimum on the grid; each evaluation models every row, so the descent
    asks for neighbours only)."""
    rows = FIT_ROWS[family] if rows is None else tuple(rows)
    grid = grid or FIT_GRID[family]
    start = start or FIT_START[family]
    current = {k: min(grid[k], key=lambda v: abs(v - start[k])) for k in grid}
    best = fit_loss(_efficiency(family, current, rows), rows)
    changed = True
    while changed:
        changed = False
        for name, values in grid.items():
            for step in (1, -1):
                while True:
                    j = values.index(current[name]) + step
                    if not 0 <= j < len(values):
                        break
                    trial = dict(current, **{name: values[j]})
                    loss = fit_loss(_efficiency(family, trial, rows), rows)
                    if progress is not None:
                        progress(trial, loss)
                    if loss >= best - 1e-12:
                        break
                    best, current, changed = loss, trial, True
    return _efficiency(family, current, rows), best


__all__ = ["FIT_GRID", "FIT_ROWS", "FIT_START", "MODELS", "ROWS", "GoldenRow", "Outcome", "evaluate", "evaluate_row", "fit", "fit_loss", "table"]

