"""The engine ``trtllm-bench throughput`` runs when it is given no batch limits: TensorRT-LLM's perf-overview rows.

TensorRT-LLM's published throughput tables (docs/source/developer-guide/perf-overview.md) run ``trtllm-bench
throughput`` with an ``llm_options`` file that sets neither ``max_batch_size`` nor ``max_num_tokens`` nor chunked
prefill. trtllm-bench then computes both limits from the model, the GPUs' memory and the dataset's mean lengths, and
runs without chunked prefill, raising the token budget so the longest prompt fits whole beside a full batch
(NVIDIA/TensorRT-LLM ``tensorrt_llm/bench/benchmark/utils/general.py:get_settings``,
``tensorrt_llm/bench/build/build.py:get_benchmark_engine_settings``, ``tensorrt_llm/bench/build/tuning.py:
calc_engine_setting`` and ``finetune_setting``). :func:`trtllm_bench_engine` is that computation, so a row of those
tables is modelled with the limits its run had, and a new model or length pair gets its own.

The limits are its heuristic's, not the memory's: its "engine size" is the checkpoint's safetensors element count
times the bytes per element of the weights' format (an NVFP4 weight is stored as one uint8 element per two values
plus one FP8 scale per 16, so the count is about half the parameters), the KV cache's bytes per token count
``max(tp, kv heads)`` heads (a latent-attention model's too: :func:`bench_kv_heads`), and the device memory is what NVML reports (the catalogue's capacity here). The KV
cache that actually holds sequences is still :mod:`planner.serving.kv_cache`'s.
"""

from __future__ import annotations

import math

import devices
from planner.serving.engine import DEFAULT_KV_FRACTION, Engine
from planner.serving.model_shape import ModelShape
from planner.serving.precision import Precision

TUNED = ("bfloat16", "fp8", "fp4")
"""Serving precisions whose checkpoint format trtllm-bench's heuristic is tuned for (``TUNED_QUANTS``: no
quantization, FP8, NVFP4); any other, and a mixed checkpoint (experts in a format of their own, as GPT-OSS's MXFP4
experts: ``W4A16_MXFP4`` / ``W4A8_MXFP4_FP8``), takes TensorRT-LLM's ``BuildConfig`` defaults
(:data:`UNTUNED_LIMITS`)."""

UNTUNED_LIMITS = (2048, 8192)
"""``BuildConfig.max_batch_size`` and ``max_num_tokens``: the limits for a format the heuristic does not know."""

_GIB = 1024 ** 3


def stored_elements(shape: ModelShape, precision: Precision) -> float:
    """The checkpoint's safetensors element count (``huggingface_hub``'s ``parameter_count`` summed over dtypes):
    the layers' GEMM weights in the precision's storage (NVFP4: half an element per value and a scale per 16), the
    embeddings, head, norms and routers as they are; the modules a run does not load (:attr:`ModelShape.
    unloaded_params`: multi-token prediction) are in the checkpoint, so in the count."""
    gemm = shape.gemm_params + shape.unloaded_params  # multi-token prediction layers: GEMMs in the main's format
    rest = shape.parameters - shape.gemm_params
    if precision.name == "fp4":
        gemm = gemm / 2 + gemm / 16
    return gemm + rest


def heuristic_limits(shape: ModelShape, kind: str, precision: Precision, *, tp: int, pp: int, isl: float,
                     osl: float, kv_fraction: float = DEFAULT_KV_FRACTION) -> tuple[int, int]:
    """``calc_engine_setting``'s ``(max_batch_size, max_num_tokens)`` for ``tp x pp`` GPUs of ``kind`` and a dataset
    of mean lengths ``isl`` / ``osl`` (with expert parallelism trtllm-bench is given ``--tp`` = the ranks)."""
    if precision.name not in TUNED or getattr(precision, "experts", None) is not None:
        return UNTUNED_LIMITS
    if isl <= 0 or osl <= 0:
        raise ValueError(f"isl, osl: mean input and output lengths must be positive, got {isl!r}, {osl!r}")
    weight_bytes = {"bfloat16": 2.0, "fp8": 1.0, "fp4": 0.5}[precision.name]
    gpus = tp * pp
    engine_gib = stored_elements(shape, precision) * weight_bytes / _GIB
    available = devices.chip(kind).hbm_capacity.value / _GIB * gpus - engine_gib
    if available <= 0:
        raise ValueError(f"tp: {gpus} {kind} cannot hold {shape.name} in {precision.name} "
                         f"({engine_gib:,.1f} GiB by trtllm-bench's count)")
    kv_heads, head_size = bench_kv_heads(shape)
    per_token = 2 * shape.layers * max(tp, kv_heads) * head_size * precision.kv_bytes / _GIB
    requests = available * kv_fraction / (per_token * (isl + osl))
    raw_batch = min(requests, 4096) / pp
    raw_tokens = min(raw_batch * (1 + isl / osl), 32768)
    return (_finetuned(raw_batch, 64, ((256, 32), (1024, 128), (math.inf, 256))),
            _finetuned(raw_tokens, 2048, ((4096, 256), (8192, 512), (math.inf, 1024))))


def bench_kv_heads(shape: ModelShape) -> tuple[int, int]:
    """(key/value heads, head size) as trtllm-bench's ``ModelConfig`` reads them from the checkpoint's config:
    ``num_key_value_heads`` and ``head_dim`` (else hidden / heads). Its heuristic at 03e27c7d knows no latent cache:
    a latent-attention config (DeepSeek's: 128 key/value heads, no ``head_dim``) is counted as that many heads of
    hidden / heads (56), 2 x 128 x 56 = 14,336 elements a token and layer against the latent's 576."""
    if shape.latent is None:
        return shape.kv_heads, shape.head_dim
    return shape.kv_heads, int(getattr(shape.blocks, "head_dim", None) or shape.hidden // shape.heads)


def _finetuned(raw: float, floor: int, steps: tuple[tuple[float, int], ...]) -> int:
    """``finetune_setting``'s rounding: up to a multiple of the step of the first range ``raw`` lies below, at least
    ``floor`` (batch: 32 below 256, 128 below 1,024, then 256, at least 64; tokens: 256 below 4,096, 512 below
    8,192, then 1,024, at least 2,048)."""
    step = next(step for below, step in steps if raw < below)
    return max(floor, step * math.ceil(raw / step))


def trtllm_bench_engine(shape: ModelShape, kind: str, precision: Precision, *, tp: int, pp: int = 1,
                        isl: float, osl: float, longest_prompt: int | None = None,
                        kv_fraction: float = DEFAULT_KV_FRACTION) -> Engine:
    """The engine ``trtllm-bench throughput`` configures (see the module doc): the heuristic's batch limit, no
    chunked prefill, and a token budget of at least the longest prompt plus a full batch."""
    batch, tokens = heuristic_limits(shape, kind, precision, tp=tp, pp=pp, isl=isl, osl=osl, kv_fraction=kv_fraction)
    longest = int(math.ceil(isl)) if longest_prompt is None else int(longest_prompt)
    return Engine(max_batch=batch, max_num_tokens=max(tokens, longest + batch), chunked_prefill=False,
                  kv_fraction=kv_fraction)


__all__ = ["TUNED", "UNTUNED_LIMITS", "bench_kv_heads", "heuristic_limits", "stored_elements", "trtllm_bench_engine"]
