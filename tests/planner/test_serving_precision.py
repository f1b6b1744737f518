"""Serving precisions of a mixed checkpoint (planner.serving.precision): GPT-OSS's MXFP4 experts apart from its BF16
attention, embedding and head, and the KV cache in the dtype the engine sets, priced where each is consumed (weight
bytes, the experts' grouped GEMM, the ranks' exchange, the KV cache), and the errors for malformed ones."""

from __future__ import annotations

import pytest

import devices
import devices.cost
from planner.serving import Engine, Workload, serving_whatif
from planner.serving.config import configure, price_pool, spec_of
from planner.serving.golden_rows import GPT_OSS_BLACKWELL, GPT_OSS_HOPPER, MODELS
from planner.serving.iteration import PARTS
from planner.serving.kv_cache import model_bytes
from planner.serving.model_shape import model_shape
from planner.serving.precision import resolve

MXFP4 = 4.25 / 8  # bytes per element: 4-bit E2M1 and one 8-bit E8M0 scale per 32 elements (OCP MX v1.0)


def test_the_experts_and_the_kv_cache_resolve_apart_from_the_dense_gemms():
    hopper = resolve(GPT_OSS_HOPPER, "h200")
    assert (hopper.name, hopper.weight_bytes, hopper.kv_dtype, hopper.kv_bytes) == ("bfloat16", 2.0, "bfloat16", 2)
    e = hopper.expert_gemms  # weight-only MXFP4: the weights stream at 4.25 bits, the MMA runs at the BF16 rate
    assert (e.name, e.gemm_dtype, e.peak_key, e.weight_bytes, e.input_bytes, e.block_format) == (
        "bfloat16", "bfloat16", "bfloat16", MXFP4, 2.0, "mxfp4_e2m1")
    blackwell = resolve(GPT_OSS_BLACKWELL, "b200")
    assert (blackwell.name, blackwell.kv_dtype, blackwell.kv_bytes) == ("bfloat16", "float8_e4m3fn", 1)
    e = blackwell.expert_gemms  # MXFP4 x FP8: the FP8 rate
    assert (e.name, e.peak_key, e.weight_bytes, e.input_bytes) == ("fp8", "float8", MXFP4, 1.0)
    w4a4 = resolve("bfloat16,experts=mxfp4", "b200").expert_gemms  # both operands MXFP4: the FP4 rate
    assert (w4a4.name, w4a4.weight_bytes, w4a4.input_bytes, w4a4.block_format) == ("fp4", MXFP4, MXFP4, "mxfp4_e2m1")
    plain = resolve("fp8", "h100")  # a name alone is what it was: one precision for every GEMM
    assert plain.expert_gemms is plain and plain.input_bytes == plain.weight_bytes == 1.0
    assert resolve("fp8,kv=bfloat16", "h100").kv_bytes == 2
    assert hopper.describe() == ("bfloat16, experts 4.25-bit mxfp4_e2m1 weights x bfloat16 activations, "
                                 "KV cache bfloat16")


@pytest.mark.parametrize("model, gib", [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)])
def test_the_weights_of_a_mixed_checkpoint_are_its_published_size(model, gib):
    # Reference: the gpt-oss model card's checkpoint sizes (OpenAI, 'gpt-oss-120b & gpt-oss-20b Model Card', Table 1:
    # 60.8 GiB and 12.8 GiB, MXFP4 experts and BF16 everything else) and its parameter counts (116.8B, 20.9B). Within
    # 0.5 %: the shape leaves out the experts' biases and the attention sinks (under 0.1 % of the parameters).
    shape = model_shape(MODELS[model])
    assert shape.parameters / 1e9 == pytest.approx({"gpt-oss-120b": 116.8, "gpt-oss-20b": 20.9}[model], rel=0.005)
    assert model_bytes(shape, resolve(GPT_OSS_HOPPER, "h100")) / 2**30 == pytest.approx(gib, rel=0.005)
    # Every weight in BF16 (the model before mixed checkpoints) is 3-4x that.
    assert model_bytes(shape, resolve("bfloat16", "h100")) > 3 * gib * 2**30


def test_the_experts_grouped_gemm_streams_mxfp4_weights_at_the_bf16_rate_and_the_cache_is_bf16():
    # On H200 TP1: the experts' grouped GEMM moves BF16 activations, 4.25-bit weights and BF16 outputs and computes at
    # the BF16 peak with the GPU family's GEMM factor (no expert factor: that is FP4's); the dense GEMMs stay BF16;
    # the KV cache holds 2 bytes an element. Reference: devices.estimate of the same shapes.
    shape, spec, workload = model_shape(MODELS["gpt-oss-120b"]), spec_of("h200:1"), Workload(1024, 64, requests=8)
    config = configure(shape, spec, parallel=dict(tp=1), precision=GPT_OSS_HOPPER, prefill=None, decode=None,
                       engine=Engine(), workload=workload)
    priced = price_pool(shape, spec, config.pools[0], GPT_OSS_HOPPER, config.engine, workload, name="parallel")
    cost, eff = priced.cost, priced.cost.efficiency
    assert priced.kv.layer_bytes == 2 * shape.kv_heads * shape.head_dim * 2
    n, experts = 2 * 2880, 128
    for m in (512, 4):  # a prefill's rows an expert, a decode batch's few
        parts = dict.fromkeys(PARTS, 0.0)
        cost._gemm(parts, m, shape.hidden, n, times=experts, grouped=True)
        one = devices.estimate("h200", "aten::mm", [(m, shape.hidden), (shape.hidden, n)], "bfloat16")
        compute = one.compute_seconds * eff.gemm.value * experts
        true = m * shape.hidden * 2 + shape.hidden * n * MXFP4 + m * n * 2
        stream = devices.cost.estimate_kernel("h200", "bfloat16", bytes=one.bytes * experts).memory_seconds
        memory = stream * true / one.bytes * eff.memory.value
        assert parts["compute"] + parts["memory"] == pytest.approx(max(compute, memory), rel=1e-12)
    assert cost._expert_weight_seconds() == pytest.approx(
        3 * 2880 * 2880 * MXFP4 / devices.chip("h200").hbm_bandwidth.value, rel=1e-12)


def test_a_mixed_checkpoint_serves_end_to_end_and_reports_what_it_ran():
    est = serving_whatif(MODELS["gpt-oss-20b"], "h100:1", workload=Workload(1000, 100, requests=64),
                         precision=GPT_OSS_HOPPER)
    assert est.parallel["precision"] == GPT_OSS_HOPPER
    assert est.parallel["colocated"]["precision"].startswith("bfloat16, experts 4.25-bit mxfp4_e2m1 weights")
    assert 12 < est.parallel["colocated"]["weights_gb"] < 15  # 12.8 GiB = 13.7 GB of checkpoint on one H100


@pytest.mark.parametrize("precision, kind, match", [
    ("bfloat16,experts=mxfp4", "h100", "precision experts= activations: h100 has neither NVFP4 nor MXFP4"),
    ("bfloat16,experts=int4", "h100", "precision experts=: unknown expert weights 'int4'; accepted: .*mxfp4, nvfp4"),
    ("bfloat16,experts=fp8/fp4", "b200", "precision experts=: fp4 activations are narrower than fp8 weights"),
    ("bfloat16,experts=fp4/bfloat16", "h100", "precision experts= weights: h100 has neither NVFP4 nor MXFP4"),
    ("bfloat16,kv=fp4", "h100", "precision kv=: unknown KV cache dtype 'fp4'; accepted: bfloat16, fp8, float32"),
    ("bfloat16,kv=fp8", "a100", "precision kv=: a100 has no native FP8 matmul"),
    ("bfloat16,kv=fp8,kv=bfloat16", "h100", "precision: 'kv=bfloat16' of .* is not experts=WEIGHTS"),
    ("bfloat16,moe=fp4", "h100", "precision: 'moe=fp4' of .* is not experts=WEIGHTS"),
    ("int3,experts=mxfp4", "h100", "precision: unknown 'int3'"),
])
def test_a_malformed_mixed_precision_names_the_argument(precision, kind, match):
    with pytest.raises(ValueError, match=match):
        resolve(precision, kind)
