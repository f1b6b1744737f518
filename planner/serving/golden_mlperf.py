"""MLPerf Inference closed-division serving rows (section M of the golden rows), each configured from its submission.

Whole systems of independent engines: NVIDIA's v5.1 Blackwell systems in NVFP4 (Llama 2 70B, Llama 3.1 405B and 8B),
its v4.1 H200 in FP8, and one partner's v5.1 H200 Mixtral 8x7B; the engine's limits from each submission's config,
the workload from the dataset and the run's summary (:func:`_mlperf`). Test rows only: no factor is fitted on them.
"""

from __future__ import annotations

from planner.serving.engine import Engine
from planner.serving.golden_models import GoldenRow
from planner.serving.workload import Workload

_MLPERF_V51 = "MLCommons inference_results_v5.1 @ 965182b0 (2025-09-09)"
_MLPERF_V41 = "MLCommons inference_results_v4.1 @ a2f5d66d (2024-08-28)"

_MLPERF_DATASETS = {
    # model: (mean input tokens, samples, the engine's max_output_len, where the lengths come from)
    "llama2-70b": (222, 24576, 1024, "24,576 OpenOrca samples, mean input 222.3 tokens (llama2-70b-99.csv @ 7cd1065d)"),
    "llama3.1-405b": (9429, 8313, 2000, "8,313 samples, mean input 9,428.6 tokens (llama3-1-405b.csv @ 67033bae)"),
    "llama3.1-8b": (871, 13368, 128, "13,368 CNN/DailyMail samples, mean input 870.7 tokens "
                                     "(llama3-1-8b-datacenter.csv @ 7cd1065d)"),
    "mixtral-8x7b": (427, 15000, 1024, "15,000 samples (OpenOrca, GSM8K, MBXP), mean input 427.4 tokens "
                                       "(mixtral-8x7b.csv @ 67033bae)"),
}
"""Each MLPerf benchmark's dataset as the rows state it: the mean prompt length (computed from the MLCommons dataset
by openshift-psap/performance-dashboard mlperf-data/summaries/), the samples (``performance_sample_count``; every
row serves each once, as the v4.1 rows do, where the runs issued the set many times over), and the output limit of
NVIDIA's ``code/<benchmark>/tensorrt/generation_config.json`` (``max_output_len``)."""
_MLPERF_LIMITS = {"llama2-70b": (2.0, 0.2), "llama3.1-405b": (6.0, 0.175), "llama3.1-8b": (2.0, 0.1),
                  "mixtral-8x7b": (2.0, 0.2)}
"""Server's p99 TTFT and TPOT limits per benchmark (seconds), as each summary's ``ttft_latency`` and
``tpot_latency`` state them."""
_MLPERF_NAMES = {"llama2-70b": "", "llama3.1-405b": "405B ", "llama3.1-8b": "8B ", "mixtral-8x7b": "Mixtral "}


def _mlperf(version: str, scenario: str, model: str, kind: str, gpus: int, parallel: dict, precision: str,
            tokens_per_s: float, samples_per_s: float, *, engine: Engine, config: str, results: str,
            rate: float | None = None, submitter: str = "NVIDIA", reserve: bool = False) -> GoldenRow:
    """One MLPerf Inference closed-division row: the system's tokens/s as its summary gives it, the dataset of
    :data:`_MLPERF_DATASETS` with each output the run's tokens per sample (tokens/s over samples/s, as the v4.1
    rows state theirs), Server's arrivals at the summary's ``target_qps`` and its latency limits, the engine of
    the submission's config. ``reserve``: each sequence reserves the output limit (guaranteed-no-evict, as the
    v4.1 H100 rows); else only its length: the v5.1 configs schedule with ``batch_scheduler_policy: max_util``
    (admit while blocks are free, pause on overflow)."""
    isl, samples, max_out, dataset = _MLPERF_DATASETS[model]
    osl = min(round(tokens_per_s / samples_per_s), max_out)
    workload = Workload(isl, osl, requests=samples, rate=rate, max_output_tokens=max_out if reserve else None)
    limits = None
    if scenario == "Server":
        ttft, tpot = _MLPERF_LIMITS[model]
        limits = {"ttft_p99": ttft, "tpot_p99": tpot}
    who = "" if submitter == "NVIDIA" else f" ({submitter})"
    label = f"MLPerf {version} {_MLPERF_NAMES[model]}{scenario} {gpus}x{kind.upper()}{who}"
    repo = _MLPERF_V51 if version == "v5.1" else _MLPERF_V41
    source = (f"{repo}, closed/{submitter} {results}/{scenario}/performance/run_1/mlperf_log_summary.txt "
              f"({tokens_per_s:,} tokens/s, {samples_per_s:,} samples/s"
              + (f", target_qps {rate:g}" if rate is not None else "") + f"); config {config}; {dataset}; "
              f"every request may generate up to {max_out:,} tokens (generation_config.json max_output_len)")
    return GoldenRow(label, model, f"{kind}:{gpus}", parallel, precision, workload, {"tokens_per_s": tokens_per_s},
                     source, limits=limits, engine=engine)


def _mlperf_engine(batch: int, tokens: int | None, kv: float) -> Engine:
    """The engine of an MLPerf config: ``gpu_batch_size``, the runtime's ``max_num_tokens`` (None: not stated,
    the default), ``kvcache_free_gpu_mem_frac``; chunked context first come first served, 32-token blocks."""
    return Engine(max_batch=batch, kv_fraction=kv, **({} if tokens is None else {"max_num_tokens": tokens}))


_V51_CFG = "closed/NVIDIA/configs/{system}/{scenario}/{bench}.py"
_V51_B200, _V51_GB200_4, _V51_GB200_72, _V51_GB300_72 = (
    "B200-SXM-180GBx8", "GB200-NVL72_GB200-186GB_aarch64x4", "GB200-NVL72_GB200-186GB_aarch64x72",
    "GB300-NVL72_GB300-288GB_aarch64x72")


def _v51(scenario: str, model: str, system: str, kind: str, gpus: int, parallel: dict, tokens_per_s: float,
         samples_per_s: float, engine: Engine, rate: float | None = None) -> GoldenRow:
    """A v5.1 NVIDIA row (NVFP4 weights and activations, FP8 KV cache: precision fp4 and kv_cache_dtype fp8);
    ``system`` names its results folder less ``_TRT`` (GB300's configs folder keeps it)."""
    bench = {"llama2-70b": "llama2-70b", "llama3.1-405b": "llama3_1-405b", "llama3.1-8b": "llama3_1-8b"}[model]
    result = {"llama2-70b": "llama2-70b-99", "llama3.1-405b": "llama3.1-405b", "llama3.1-8b": "llama3.1-8b"}[model]
    return _mlperf("v5.1", scenario, model, kind, gpus, parallel, "fp4", tokens_per_s, samples_per_s, engine=engine,
                   config=_V51_CFG.format(system=system + ("_TRT" if kind == "gb300" else ""), scenario=scenario,
                                          bench=bench),
                   results=f"results/{system}_TRT/{result}", rate=rate)



MLPERF_ROWS: tuple[GoldenRow, ...] = (
    # M. MLPerf Inference closed division, NVIDIA's systems (v5.1 Blackwell NVFP4; v4.1 H200 FP8) and one partner's
    # v5.1 H200 Mixtral 8x7B: whole systems of independent engines (TP1 replicas; 405B TP2 x PP2 or TP4 replicas).
    _v51("Offline", "llama2-70b", _V51_B200, "b200", 8, {"tp": 1, "replicas": 8}, 101527, 371.423,
         _mlperf_engine(2048, 3584, 0.95)),
    _v51("Server", "llama2-70b", _V51_B200, "b200", 8, {"tp": 1, "replicas": 8}, 99123.04, 361.30,
         _mlperf_engine(2048, 3584, 0.95), rate=364),
    _v51("Offline", "llama2-70b", _V51_GB200_4, "gb200", 4, {"tp": 1, "replicas": 4}, 51736.9, 187.748,
         _mlperf_engine(2048, 3584, 0.95)),
    _v51("Server", "llama2-70b", _V51_GB200_4, "gb200", 4, {"tp": 1, "replicas": 4}, 49359.61, 178.48,
         _mlperf_engine(2048, 3584, 0.95), rate=182),
    _v51("Offline", "llama3.1-405b", _V51_B200, "b200", 8, {"tp": 2, "pp": 2, "replicas": 2}, 1624.11, 2.49245,
         _mlperf_engine(128, 1536, 0.95)),
    _v51("Server", "llama3.1-405b", _V51_B200, "b200", 8, {"tp": 4, "replicas": 2}, 1240.42, 1.90,
         _mlperf_engine(256, 2048, 0.95), rate=1.9),
    _v51("Offline", "llama3.1-405b", _V51_GB200_72, "gb200", 72, {"tp": 2, "pp": 2, "replicas": 18}, 14774.3,
         22.6462, _mlperf_engine(2048, 1536, 0.95)),
    _v51("Server", "llama3.1-405b", _V51_GB200_72, "gb200", 72, {"tp": 4, "replicas": 18}, 11614.28, 17.72,
         _mlperf_engine(256, 2048, 0.95), rate=17.55),
    _v51("Offline", "llama3.1-405b", _V51_GB300_72, "gb300", 72, {"tp": 2, "replicas": 36}, 16104.1, 25.5809,
         _mlperf_engine(2048, 1536, 0.95)),
    _v51("Server", "llama3.1-405b", _V51_GB300_72, "gb300", 72, {"tp": 2, "replicas": 36}, 12248.42, 19.46,
         _mlperf_engine(2048, 1536, 0.95), rate=19.5),
    _v51("Offline", "llama3.1-8b", _V51_B200, "b200", 8, {"tp": 1, "replicas": 8}, 136752, 1060.23,
         _mlperf_engine(6000, 12000, 0.90)),
    _v51("Server", "llama3.1-8b", _V51_B200, "b200", 8, {"tp": 1, "replicas": 8}, 128540.95, 996.53,
         _mlperf_engine(6000, 12000, 0.90), rate=1000),
    *(_mlperf("v4.1", scenario, "llama2-70b", "h200", 8, {"tp": 1, "replicas": 8}, "fp8", tps, sps,
              engine=_mlperf_engine(batch, None, 0.90), rate=rate, reserve=True,
              results="results/H200-SXM-141GBx8_TRT/llama2-70b-99",
              config=f"closed/NVIDIA/configs/llama2-70b/{scenario}/__init__.py H200_SXM_141GBx8 (FP8, TP1 x 8, "
                     f"gpu_batch_size {batch}, kvcache_free_gpu_mem_frac 0.90; max_num_tokens not in the file: the "
                     f"default budget, as the v4.1 H100 rows)")
      for scenario, tps, sps, batch, rate in (("Offline", 31302.7, 107.477, 806, None),
                                              ("Server", 29228.22, 100.35, 896, 101))),
    *(_mlperf("v5.1", scenario, "mixtral-8x7b", "h200", 8, {"tp": 1, "replicas": 8}, "fp8", tps, sps,
              engine=_mlperf_engine(3072, tokens, 0.90), rate=rate, submitter="ASUSTeK",
              results="results/ESC_N8_H200-SXM-141GBx8_TRT/mixtral-8x7b",
              config=f"closed/ASUSTeK/configs/ESC_N8_H200-SXM-141GBx8/{scenario}/mixtral-8x7b.py (NVIDIA's harness: "
                     f"FP8, FP8 KV cache, TP1 x 8, gpu_batch_size 3072, max_num_tokens {tokens}, "
                     f"kvcache_free_gpu_mem_frac 0.9, chunked context, max_util)")
      for scenario, tps, sps, tokens, rate in (("Offline", 61372.4, 421.086, 9216, None),
                                               ("Server", 59992.81, 408.81, 8192, 410))),
)
"""Section M, in the order the golden table prints it."""


__all__ = ["MLPERF_ROWS"]
