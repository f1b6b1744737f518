"""TensorRT-LLM 1.0's throughput tables (section V of the golden rows): the earlier release of the perf-overview.

The release the later tables (sections B, E, L, R) replaced published other models, cuts and lengths: Llama 3.1 8B on
one H100 or H200 (FP8), Llama 3.3 70B on one B200, GB200 (NVFP4) or H200 (FP8) and two H100, Llama 3.1 405B on four
B200 or GB200 (NVFP4) and eight H200 or H100 (FP8), and Qwen3 30B A3B on one B200 or GB200 (NVFP4), each at ten
length pairs from 128/128 to 20000/2000. Every row is modelled with the engine ``trtllm-bench throughput`` computes
for it (:func:`planner.serving.trtllm_bench.trtllm_bench_engine`: the page's ``llm_options`` set no limits) and tests
the fitted serving efficiencies; none is fitted. A row repeating a fit row's configuration and lengths (Llama 3.3 70B
B200 TP1 and H100 TP2 at 1000/1000, Qwen3 30B A3B B200 TP1 at 1000/1000) is left out, so no fit row is tested again
under another release's figure. The page's mixture-of-experts columns cut "TP8" or "TP4" under ``enable_attention_dp``
(Qwen3 235B, Llama 4 Maverick and Scout, DeepSeek R1) do not state their expert-parallel degree, and Scout's
checkpoints are not among the page's models: those columns are not rows here.

This release reports each run's total output tokens per second over all its GPUs ("Total Output Throughput
(tokens/sec)"), not per GPU as the later one does: the rows publish ``tokens_per_s``.
"""

from __future__ import annotations

from planner.serving.golden_models import MODELS, GoldenRow
from planner.serving.model_shape import model_shape
from planner.serving.precision import resolve
from planner.serving.trtllm_bench import trtllm_bench_engine
from planner.serving.workload import Workload

TRTLLM_V1 = ("NVIDIA TensorRT-LLM docs/source/performance/perf-overview.md @ 00f37686 (release 1.0: 'NEW for v1.0'; "
             "trtllm-bench throughput, PyTorch backend, every request queued at once, llm_options setting CUDA graphs "
             "with padding and no limits; 'Total Output Throughput (tokens/sec)' of the run, all its GPUs; "
             "https://github.com/NVIDIA/TensorRT-LLM/blob/00f37686aa854010d68bcbd0f4ab000221541ca6/docs/source/"
             "performance/perf-overview.md)")

V1_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (500, 2000): 3000, (1000, 1000): 3000,
               (1000, 2000): 1500, (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (20000, 2000): 1000}
"""The page's requests per length pair ("Preparing a Dataset", ``$num_requests``)."""

V1_CHECKPOINTS = {("llama3.1-8b", "fp8"): "nvidia/Llama-3.1-8B-Instruct-FP8",
                  ("llama3.3-70b", "fp8"): "nvidia/Llama-3.3-70B-Instruct-FP8",
                  ("llama3.3-70b", "fp4"): "nvidia/Llama-3.3-70B-Instruct-FP4",
                  ("llama3.1-405b", "fp8"): "nvidia/Llama-3.1-405B-Instruct-FP8",
                  ("llama3.1-405b", "fp4"): "nvidia/Llama-3.1-405B-Instruct-FP4",
                  ("qwen3-30b-a3b", "fp4"): "nvidia/Qwen3-30B-A3B-FP4"}
"""The page's checkpoint of each (model, precision) it lists (its "FP4 Models" and "FP8 Models")."""

V1_PAIRS = tuple(V1_REQUESTS)
"""The length pairs of the page's tables, in their order (those of :data:`V1_REQUESTS`)."""

V1_TABLES: dict[tuple[str, str, int, str], tuple[int, ...]] = {
    # (model, kind, tensor-parallel GPUs, precision): total output tokens/s at each of V1_PAIRS, as the page gives them
    ("llama3.1-8b", "h200", 1, "fp8"): (27911, 26221, 18027, 20770, 17744, 16828, 3538, 12194, 3902, 1804),
    ("llama3.1-8b", "h100", 1, "fp8"): (28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351),
    ("llama3.3-70b", "b200", 1, "fp4"): (11147, 9922, 6831, 7762, 7007, 6271, 1339, 4783, 1459, 665),
    ("llama3.3-70b", "gb200", 1, "fp4"): (12189, 11309, 7849, 9028, 7326, 6513, 1450, 5646, 1602, 755),
    ("llama3.3-70b", "h200", 1, "fp8"): (3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283),
    ("llama3.3-70b", "h100", 2, "fp8"): (6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437),
    ("llama3.1-405b", "b200", 4, "fp4"): (6281, 8020, 6345, 6244, 5209, 4933, 749, 4212, 1048, 672),
    ("llama3.1-405b", "gb200", 4, "fp4"): (6740, 8151, 6608, 6540, 5389, 5135, 797, 4407, 1112, 739),
    ("llama3.1-405b", "h200", 8, "fp8"): (3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505),
    ("llama3.1-405b", "h100", 8, "fp8"): (3627, 4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345),
    ("qwen3-30b-a3b", "b200", 1, "fp4"): (39827, 37844, 24953, 27817, 25828, 22051, 6251, 17554, 6142, 2944),
    ("qwen3-30b-a3b", "gb200", 1, "fp4"): (24107, 31311, 26337, 20604, 17481, 17177, 6595, 14719, 5908, 3203),
}

V1_LEFT_OUT = {("llama3.3-70b", "b200", 1000, 1000), ("llama3.3-70b", "h100", 1000, 1000),
               ("qwen3-30b-a3b", "b200", 1000, 1000)}
"""(model, kind, isl, osl) of the cells that repeat a fit row's configuration and lengths (see the module doc)."""


def _v1_row(model: str, kind: str, tp: int, precision: str, isl: int, osl: int, value: int) -> GoldenRow:
    shape = model_shape(MODELS[model])
    engine = trtllm_bench_engine(shape, kind, resolve(precision, kind), tp=tp, isl=isl, osl=osl)
    source = f"{TRTLLM_V1}; checkpoint {V1_CHECKPOINTS[model, precision]}, TP{tp}"
    return GoldenRow(f"TRT-LLM 1.0 {model} {kind.upper()} TP{tp} {isl}/{osl}", model, f"{kind}:{tp}", {"tp": tp},
                     precision, Workload(isl, osl, requests=V1_REQUESTS[isl, osl]), {"tokens_per_s": value},
                     source + "; the engine trtllm-bench computes (planner.serving.trtllm_bench)", engine=engine)


TRTLLM_V1_ROWS: tuple[GoldenRow, ...] = tuple(
    _v1_row(model, kind, tp, precision, isl, osl, value)
    for (model, kind, tp, precision), values in V1_TABLES.items()
    for (isl, osl), value in zip(V1_PAIRS, values)
    if (model, kind, isl, osl) not in V1_LEFT_OUT)
"""V: TensorRT-LLM 1.0's throughput tables, test rows only (see the module doc)."""


__all__ = ["TRTLLM_V1", "TRTLLM_V1_ROWS", "V1_CHECKPOINTS", "V1_LEFT_OUT", "V1_PAIRS", "V1_REQUESTS", "V1_TABLES"]
