"""Published serving results the serving model is checked against, and the fit of its serving efficiencies.

Each :class:`GoldenRow` is a published configuration as its source states it (model as a
transformers config, rack, parallelism, precision, workload) and the figures it reports
(output tokens/s, TTFT, TPOT). :func:`evaluate` models every row with
:func:`planner.serving.serving_whatif`'s machinery; :func:`fit` solves the serving
efficiencies of one entry of :mod:`planner.serving.fitted` (a chip family, or a generation
with rows of its own) on its fit rows (:data:`FIT_ROWS`), the same factors for every row it
serves. Every other row tests them (:func:`role`). Rows, sources and workloads:
``reference/inference.md`` of the project (the given rows A-D), and the rows found since (E-G:
TensorRT-LLM's Blackwell FP4 and further H200 columns, AWS's Trn2 NxD Inference tutorials).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
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
    "llama3.1-405b": DecoderBlocks(
        name="llama3.1-405b", config_class="LlamaConfig",
        source="meta-llama/Llama-3.1-405B config.json (126 layers, d 16384, FFN 53248, 128 heads, 8 kv heads)",
        arch=dict(vocab_size=128256, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                  num_attention_heads=128, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192}, tie_word_embeddings=False)),
    "qwen3-30b-a3b": DecoderBlocks(
        name="qwen3-30b-a3b", config_class="Qwen3MoeConfig",
        source="Qwen/Qwen3-30B-A3B config.json (48 layers, d 2048, 32 heads of 128, 4 kv heads, 128 experts of FFN "
               "768, top-8)",
        arch=dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                  num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                  num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                  max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)),
}
"""The rows' models, as their transformers configs' numbers."""

TRTLLM = ("NVIDIA TensorRT-LLM docs/source/developer-guide/perf-overview.md @ 03e27c7d (trtllm-bench throughput, "
          "PyTorch backend, Llama-3.3-70B-Instruct-FP8, every request queued at once)")
MLPERF = ("MLCommons inference_results_v4.1 @ a2f5d66d, closed/NVIDIA DGX-H100_H100-SXM-80GBx8_TRT llama2-70b-99 "
          "(TensorRT 10.2, FP8, TP2 x 4; batch limits 896 Offline, 1024 Server); every request asks for up to 1,024 "
          "new tokens (mlcommons/inference language/llama2-70b/SUT.py gen_kwargs max_new_tokens=1024), which a "
          "guaranteed-no-evict engine reserves")
NIM = "NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, Performance (NIM 1.8.0, AIPerf, 5000 in / 500 out)"
TRTLLM_FP4 = ("NVIDIA TensorRT-LLM docs/source/developer-guide/perf-overview.md @ 03e27c7d (trtllm-bench throughput, "
              "PyTorch backend, nvidia/Llama-3.3-70B-Instruct-FP4: NVFP4 weights and activations, FP8 KV cache; DGX "
              "B200 and GB200 NVL72, TP1; every request queued at once; "
              "https://github.com/NVIDIA/TensorRT-LLM/blob/03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d/docs/source/"
              "developer-guide/perf-overview.md)")
NIM_COPY = ("points other than 1 and 25 read from a public copy of the page's table: zivbeker42/llm-guesstimator "
            "tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv (https://github.com/zivbeker42/llm-guesstimator)")
NXDI = ("AWS Neuron docs, NxD Inference tutorials on trn2.48xlarge (aws-neuron/aws-neuron-sdk @ 81ce03ae, "
        "libraries/nxd-inference/tutorials/trn2-llama3.3-70b-tutorial.rst and "
        "trn2-llama3.1-405b-speculative-tutorial.rst, scenario 1 without speculation; "
        "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/nxd-inference/tutorials/): NxD Inference "
        "+ vLLM, BF16, TP 64 NeuronCores at LNC=2 = 16 Trainium2, batch 1, NKI QKV/attention/MLP kernels, sequence "
        "parallelism; LLMPerf, 10,000 input tokens, 50 requests one at a time; published p50 TTFT and inter-token "
        "latency")
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
    prompt_bucket: int | None = None
    """The compiled context-encoding bucket Neuron pads the prompt to (``--context-encoding-buckets``), as the
    source states it: the row is modelled with prompts of that length (the padded prefill is computed)."""

    def modelled_workload(self) -> Workload:
        """The workload the row is modelled with: as published, with each prompt padded to its bucket."""
        if self.prompt_bucket is None:
            return self.workload
        w = self.workload
        return Workload([(max(a, self.prompt_bucket), b) for a, b in w.lengths], requests=w.requests,
                        concurrency=w.concurrency, rate=w.rate, seed=w.seed, max_output_tokens=w.max_output_tokens)


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


def _trtllm(kind: str, tp: int, precision: str, isl: int, osl: int, value: float,
            model: str = "llama3.3-70b") -> GoldenRow:
    # perf-overview's requests per length pair ("Preparing a Dataset"): 3000 at 1k/1k, 1500 at 8k/1k and 1k/8k,
    # 1000 at 32k/1k (1000/1000 is not listed: 1024/1024's 3000, as the given rows).
    requests = {(1000, 1000): 3000, (1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500,
                (32768, 1024): 1000}[isl, osl]
    name = "" if model == "llama3.3-70b" else f"{model} "
    source = TRTLLM if precision == "fp8" else TRTLLM_FP4
    if model != "llama3.3-70b":
        source = source.replace("nvidia/Llama-3.3-70B-Instruct-FP4", "nvidia/Qwen3-30B-A3B-FP4")
    return GoldenRow(f"TRT-LLM {name}{kind.upper()} TP{tp} {isl}/{osl}", model, f"{kind}:{tp}", {"tp": tp}, precision,
                     Workload(isl, osl, requests=requests), {"tokens_per_s_per_chip": value}, source)


FOUND_ROWS: tuple[GoldenRow, ...] = (
    # E. TensorRT-LLM perf-overview, Llama 3.3 70B, the Blackwell NVFP4 columns (B200 and GB200, TP1).
    *(_trtllm(kind, 1, "fp4", isl, osl, v) for kind, values in (("b200", (6920, 6842, 3242, 1362, 274)),
                                                                 ("gb200", (7769, 7751, 3805, 1491, 302)))
      for (isl, osl), v in zip(((1000, 1000), (1024, 1024), (1024, 8192), (8192, 1024), (32768, 1024)), values)),
    # I. The same table's Qwen3 30B A3B (a mixture of experts: 128 experts, top-8) NVFP4 columns, TP1: a model family
    # no factor was fitted on.
    *(_trtllm(kind, 1, "fp4", isl, osl, v, "qwen3-30b-a3b")
      for kind, values in (("b200", (26971, 13497, 5735, 1265)), ("gb200", (22856, 14272, 6201, 1380)))
      for (isl, osl), v in zip(((1000, 1000), (1024, 8192), (8192, 1024), (32768, 1024)), values)),
    # F. The same table's other H200 TP2 FP8 points.
    _trtllm("h200", 2, "fp8", 1024, 1024, 2582),
    _trtllm("h200", 2, "fp8", 1024, 8192, 2009),
    _trtllm("h200", 2, "fp8", 32768, 1024, 120),
    # H. NIM's curve at its other concurrencies (the page of the given rows C; read through a public copy of its table:
    # zivbeker42/llm-guesstimator tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv).
    *(GoldenRow(f"NIM 2xH100 TP2 c{c}", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
                Workload(5000, 500, concurrency=c, requests=10 * c),
                {"ttft_p50": ttft, "tpot_p50": itl, "tokens_per_s": tps}, NIM + "; " + NIM_COPY)
      for c, ttft, itl, tps in ((5, 0.5467, 0.02183, 218.48), (50, 0.83451, 0.05973, 814.37),
                                (100, 7.99625, 0.09291, 917.26))),
    # G. AWS's Trn2 tutorials (LLMPerf inter-token latency p50 as TPOT: the Neuron guide's patch excludes the TTFT).
    # LLMPerf sent 50 identical requests one at a time; five model the same p50 (each runs alone) at a tenth the cost.
    GoldenRow("NxDI trn2 TP64 b1 10000/1500", "llama3.3-70b", "trn2:16", {"tp": 16}, "bfloat16",
              Workload(10000, 1500, concurrency=1, requests=5), {"ttft_p50": 0.81428, "tpot_p50": 0.01966},
              NXDI + "; Llama-3.3-70B-Instruct, context-encoding buckets 2048/4096/8192/12288", engine=STATIC(1),
              prompt_bucket=12288),
    GoldenRow("NxDI trn2 TP64 b1 405B 10000/1785", "llama3.1-405b", "trn2:16", {"tp": 16}, "bfloat16",
              Workload(10000, 1785, concurrency=1, requests=5), {"ttft_p50": 2.44196, "tpot_p50": 0.03793},
              NXDI + "; Llama-3.1-405B-Instruct, context-encoding buckets 2048/4096/10240/12288, p50 output 1,785 "
                     "tokens", engine=STATIC(1), prompt_bucket=10240),
)
"""Published rows found since the given ones, each with its configuration and source: E TensorRT-LLM's
Blackwell NVFP4 columns, I its Qwen3 30B A3B (MoE) NVFP4 columns, F its other H200 points, H NIM's other concurrencies (requests per point: ten times the
concurrency, as the given rows), G AWS's Trn2 tutorials. :data:`FIT_ROWS` says which fit an entry, the others
test."""

ALL_ROWS: tuple[GoldenRow, ...] = ROWS + FOUND_ROWS
"""Every published row the serving model is checked against."""


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
    workload = row.modelled_workload()
    config = configure(shape, spec, parallel=row.parallel, precision=row.precision, prefill=None, decode=None,
                       engine=row.engine, workload=workload)
    est = evaluate_config(shape, spec, config, workload, record=False, calibrated=calibrated)
    m = _metrics(est)
    return Outcome(row, {k: m[k] for k in row.published},
                   {k: (m[k], bound, m[k] <= bound) for k, bound in (row.limits or {}).items()})


def evaluate(rows: Iterable[GoldenRow] = ALL_ROWS, *, calibrated: bool = True) -> list[Outcome]:
    """Model every row."""
    return [evaluate_row(r, calibrated=calibrated) for r in rows]


def role(row: GoldenRow) -> str:
    """``fit (ENTRY)`` for a row an entry of :mod:`planner.serving.fitted` was fitted to, else ``test``."""
    entries = [entry for entry, rows in FIT_ROWS.items() if row in rows]
    return f"fit ({', '.join(entries)})" if entries else "test"


def _summary(errors: Sequence[float], what: str) -> str:
    if not errors:
        return f"no {what} figures"
    return (f"{what}: median {statistics.median(errors):.1%}, largest {max(errors):.1%} over {len(errors)} "
            f"figures")


def table(outcomes: Sequence[Outcome]) -> str:
    """Published vs modelled per metric with each row's role (Markdown), and the median and largest error of the
    fit and of the test figures."""
    names = {"tokens_per_s": "output tok/s", "tokens_per_s_per_chip": "output tok/s/chip", "ttft_p50": "TTFT p50",
             "tpot_p50": "TPOT p50"}
    lines = ["| row | model | rack | parallel | precision | metric | published | modelled | error | role |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {"fit": [], "test": []}
    for o in outcomes:
        r = o.row
        par = " x ".join(f"{k} {v}" for k, v in r.parallel.items())
        kind = role(r)
        for k, pub in r.published.items():
            mod = o.modelled[k]
            err = mod / pub - 1
            errors["test" if kind == "test" else "fit"].append(abs(err))
            fmt = (lambda x: f"{x * 1e3:,.2f} ms") if k.startswith(("ttft", "tpot")) else (lambda x: f"{x:,.0f}")
            lines.append(f"| {r.label} | {r.model} | {r.rack} | {par} | {r.precision} | {names[k]} | {fmt(pub)} | "
                         f"{fmt(mod)} | {err:+.1%} | {kind} |")
        for k, (value, bound, ok) in o.limits_met.items():
            lines.append(f"| {r.label} | {r.model} | {r.rack} | {par} | {r.precision} | {k} <= {bound:g} s | "
                         f"(limit) | {value * 1e3:,.1f} ms | {'met' if ok else 'NOT met'} | {kind} |")
    lines.append("")
    lines.append(f"{_summary(errors['fit'], 'fit')}; {_summary(errors['test'], 'test (out of sample)')}; all "
                 f"{_summary(errors['fit'] + errors['test'], 'published').split(': ', 1)[1]} (all modelled figures "
                 f"are modelled)")
    return "\n".join(lines)


def fit_loss(efficiency: ServingEfficiency, rows: Sequence[GoldenRow]) -> float:
    """Sum over the rows' metrics of log(modelled / published) squared, with ``efficiency`` as its entry."""
    saved = dict(fitted.FITTED)
    fitted.FITTED[efficiency.family] = efficiency
    fitted.serving_efficiency.cache_clear()
    try:
        return sum(math.log1p(e) ** 2 for o in evaluate(rows) for e in o.errors().values())
    finally:
        fitted.FITTED.clear()
        fitted.FITTED.update(saved)
        fitted.serving_efficiency.cache_clear()


_NOTES = {"gemm": "factor on GEMMs' compute time", "gemm_fp4": "factor on FP4 GEMMs' compute time",
          "memory": "factor on kernels' memory time (attention's aside)", "attention": "factor on attention time",
          "iteration": "seconds per engine iteration outside the kernels"}


def _efficiency(family: str, values: dict, rows: Sequence[GoldenRow]) -> ServingEfficiency:
    """The stored entry ``family`` with ``values`` as fitted figures naming ``rows`` (its other figures kept)."""
    fitted_to = "; ".join(r.label for r in rows)
    figs = {k: Figure(v, "s" if k == "iteration" else "", f"fitted to published serving rows ({fitted_to})",
                      "calibrated", f"{_NOTES[k]}; grid search, least squares on log(modelled/published) over those "
                                    f"rows only (planner.serving.golden.fit)")
            for k, v in values.items()}
    return replace(fitted.FITTED[family], **figs)


FIT_GRID = {
    "gpu": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(21)],
            "memory": [round(1.0 + 0.05 * i, 2) for i in range(21)],
            "attention": [round(0.5 + 0.1 * i, 1) for i in range(26)],
            "iteration": [round(0.00025 * i, 5) for i in range(21)]},
    "blackwell": {"gemm_fp4": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                  "attention": [round(0.5 + 0.05 * i, 2) for i in range(41)]},
    "trainium": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                 "memory": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                 "attention": [round(1.0 + 0.5 * i, 1) for i in range(39)],
                 "iteration": [round(0.0005 * i, 4) for i in range(21)]},
    "trn2": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(41)],
             "iteration": [round(0.0005 * i, 4) for i in range(41)]},
}
"""The values each entry's fitted factors may take (grids keep the fit reproducible); an entry's other factors are
not fitted (Blackwell keeps the GPU family's; Trn2 its stated attention and Trainium1's memory factor)."""

FIT_START = {"gpu": {"gemm": 1.25, "memory": 1.0, "attention": 1.2, "iteration": 0.0},
             "blackwell": {"gemm_fp4": 1.35, "attention": 1.0},
             "trainium": {"gemm": 1.9, "memory": 1.0, "attention": 10.0, "iteration": 0.008},
             "trn2": {"gemm": 2.0, "iteration": 0.007}}
"""Where each entry's descent starts (the factors of the previous fit, or those the entry would inherit;
Trainium's time per iteration near the constant gap between its published and its kernels' TPOT)."""


def _labelled(*labels: str) -> tuple[GoldenRow, ...]:
    by_label = {r.label: r for r in ALL_ROWS}
    return tuple(by_label[label] for label in labels)


FIT_ROWS = {"gpu": tuple(r for r in ROWS if r.rack.startswith(("h100", "h200"))),
            "blackwell": _labelled("TRT-LLM B200 TP1 1000/1000", "TRT-LLM B200 TP1 1024/8192",
                                   "TRT-LLM B200 TP1 8192/1024"),
            "trainium": tuple(r for r in ROWS if r.rack.startswith("trn")),
            "trn2": _labelled("NxDI trn2 TP64 b1 10000/1500", "NxDI trn2 TP64 b1 405B 10000/1785")}
"""The rows each entry is fitted to: the GPU family and Trainium1 on all of the given rows of their chips;
Blackwell on three B200 NVFP4 rows (its other B200 rows and every GB200 row test it); Trn2 on both published Trn2
rows (no Trn2 row is left to test it: the Trn1 rows test none of it either)."""


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


__all__ = ["ALL_ROWS", "FIT_GRID", "FIT_ROWS", "FIT_START", "FOUND_ROWS", "MODELS", "ROWS", "GoldenRow", "Outcome",
           "evaluate", "evaluate_row", "fit", "fit_loss", "role", "table"]

