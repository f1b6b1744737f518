"""The serving model's shape of models whose layers differ: interleaved dense and MoE layers, shared experts, local
(sliding or chunked) attention, against formulas, the published parameter totals and transformers' own modules."""

from __future__ import annotations

import dataclasses
import random

import pytest

from planner.serving.engine import Engine
from planner.serving.golden_models import MODELS, _llama4
from planner.serving.kv_cache import memory
from planner.serving.model_shape import model_shape, sparse_layers
from planner.serving.precision import resolve
from planner.serving.local_keys import LocalKeys

H, I, I_MLP, VOCAB, LAYERS = 5120, 8192, 16384, 202048, 48
ATTENTION = H * (40 + 2 * 8) * 128 + 40 * 128 * H  # q, k, v, o


def _llama4_formula(experts: int, sparse: int) -> tuple[int, int]:
    """(total, active) parameters of a Llama 4 language model with ``sparse`` MoE layers of ``experts`` experts
    (each 3 x H x I, top-1) and a shared expert of the same width, dense layers of MLP 3 x H x I_MLP."""
    expert = 3 * H * I
    dense = 3 * H * I_MLP
    norms = 2 * H * LAYERS + H
    total = (LAYERS * ATTENTION + sparse * (experts + 1) * expert + sparse * H * experts
             + (LAYERS - sparse) * dense + 2 * VOCAB * H + norms)
    active = LAYERS * ATTENTION + sparse * 2 * expert + (LAYERS - sparse) * dense + 2 * VOCAB * H
    return total, active


@pytest.mark.parametrize("model, experts, sparse, published_total", [
    (MODELS["llama4-maverick"], 128, 24, 400e9),
    (_llama4("llama4-scout", "Llama-4-Scout-17B-16E", experts=16, step=1, qk_norm=True), 16, 48, 109e9),
])
def test_llama4_parameters_are_the_formula_and_the_published_totals(model, experts, sparse, published_total):
    shape = model_shape(model)
    assert shape.moe_layers == sparse and shape.experts == experts and shape.topk == 1
    total, active = _llama4_formula(experts, sparse)
    assert (shape.parameters, shape.active_parameters) == (total, active)
    # Meta publishes 400B / 109B total and 17B active (Scout's total counts its vision encoder, ~1B, too: 2 %)
    assert shape.parameters == pytest.approx(published_total, rel=0.02)
    assert shape.active_parameters == pytest.approx(17e9, rel=0.02)


def test_chunked_layers_keep_at_most_the_chunk_in_a_span_keeping_cache():
    shape = model_shape(MODELS["llama4-maverick"])
    assert (shape.local, shape.span, shape.local_layers) == ("chunked", 8192, 36)  # every 4th layer is global
    per_layer = 2 * 8 * 128
    assert shape.kv_elements_per_token() == LAYERS * per_layer
    assert shape.kv_elements_per_token(8192) == LAYERS * per_layer
    assert shape.kv_elements_per_token(32768) == per_layer * (12 + 36 * 8192 / 32768)
    span_engine = Engine(local_cache=True)  # vLLM's hybrid KV cache manager
    kv = memory(shape, "b200", resolve("fp4", "b200"), tp=1, pp=1, ep=4, engine=span_engine, longest_prompt=1024)
    blocks = Engine().block_size
    length = 33792
    assert kv.layer_bytes == per_layer  # one byte per FP8 element
    assert kv.sequence_bytes(length) == per_layer * blocks * (12 * -(-length // blocks) + 36 * (8192 // blocks))
    # TensorRT-LLM (the default engine) allocates every layer for the whole sequence
    whole = memory(shape, "b200", resolve("fp4", "b200"), tp=1, pp=1, ep=4, engine=Engine(), longest_prompt=1024)
    assert whole.sequence_bytes(length) == per_layer * blocks * LAYERS * -(-length // blocks)


def test_tensorrt_llm_attends_the_whole_cache_at_decode_on_chunked_layers_and_the_window_on_sliding_ones():
    # TensorRT-LLM docs/source/features/long-sequence.md: "chunked attention can only be applied to context requests";
    # a sliding window limits what attention reads (a cyclic cache) at every phase. Prompt tokens see the span
    # either way; the simulation tracks decode keys (LocalKeys) only where the span applies at decode.
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.workload import Workload

    def cost(model, rack, precision, **engine):
        shape, spec, workload = model_shape(model), spec_of(rack), Workload(1024, 64, requests=4)
        config = configure(shape, spec, parallel=dict(ep=int(rack.split(":")[1])), precision=precision,
                           prefill=None, decode=None, engine=Engine(**engine), workload=workload)
        return price_pool(shape, spec, config.pools[0], precision, config.engine, workload, name="parallel").cost

    trt, vllm = (cost(MODELS["llama4-maverick"], "b200:4", "fp4", local_cache=flag) for flag in (False, True))
    assert trt.local is None and vllm.local == ("chunked", 8192) and trt.prefill_local and vllm.prefill_local
    oss = cost(MODELS["gpt-oss-120b"], "b200:2", "fp4")
    assert oss.local == ("sliding", 128)
    with pytest.raises(ValueError, match="local_cache: expected True or False"):
        Engine(local_cache="span")


def _brute_keys(kind: str, span: int, position: int) -> int:
    lo = position - position % span if kind == "chunked" else max(0, position - span + 1)
    return position - lo + 1


@pytest.mark.parametrize("kind", ["chunked", "sliding"])
def test_local_attention_pairs_and_decode_keys_are_the_brute_force_counts(kind):
    base = model_shape(MODELS["llama4-maverick"])
    for span in (1, 5, 8):
        shape = dataclasses.replace(base, local=kind, span=span)
        for cached in range(0, 20):
            for queries in range(1, 12):
                want = sum(_brute_keys(kind, span, p) for p in range(cached, cached + queries))
                assert shape.local_pairs(queries, cached) == want
        # the simulation's running sum of decode keys, sequences joining and leaving at random
        keys, running, rng = LocalKeys(kind, span), {}, random.Random(span)
        for step in range(150):
            if rng.random() < 0.3:
                req = len(running) + 1000 * step
                running[req] = (rng.randint(1, 30), step)
                keys.join(req, *running[req])
            if running and rng.random() < 0.2:
                req = rng.choice(list(running))
                del running[req]
                keys.leave(req)
            full = sum(k + step - s0 for k, s0 in running.values())
            local = sum(shape.local_keys(k + step - s0 - 1) for k, s0 in running.values())
            assert full - keys.cut(step) == local == sum(_brute_keys(kind, span, k + step - s0 - 1)
                                                          for k, s0 in running.values())


def test_sparse_layers_follow_each_familys_fields():
    assert sparse_layers({"interleave_moe_layer_step": 2}, 6) == [False, True] * 3  # Llama 4 Maverick
    assert sparse_layers({"moe_layers": [0, 5]}, 6) == [True, False, False, False, False, True]
    assert sparse_layers({"decoder_sparse_step": 1, "mlp_only_layers": [0, 3]}, 5) == [False, True, True, False, True]
    assert sparse_layers({"decoder_sparse_step": 2}, 4) == [False, True, False, True]
    assert sparse_layers({"first_k_dense_replace": 3, "moe_layer_freq": 1}, 5) == [False] * 3 + [True] * 2
    assert sparse_layers({}, 3) == [True] * 3  # Mixtral: every layer


def test_interleaved_layers_are_what_transformers_builds():
    # The reference: the parameters of the language model transformers builds on the meta device from the same
    # config (Llama 4 with MoE every second layer and its dense MLP between; Qwen2-MoE with dense mlp_only_layers).
    import torch
    import transformers

    configs = [
        transformers.Llama4TextConfig(vocab_size=256, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
                                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
                                      attention_chunk_size=8),
        transformers.Qwen2MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                                    num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                    decoder_sparse_step=1, mlp_only_layers=[0, 2]),
    ]
    for config in configs:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        shape = model_shape(config)
        assert shape.moe_layers == 2
        assert shape.parameters == sum(p.numel() for p in model.parameters()), type(config).__name__


def test_two_kinds_of_local_attention_are_refused_by_name():
    from planner.serving.model_shape import local_layers

    with pytest.raises(ValueError, match="model: layers of chunked_attention and sliding_attention"):
        local_layers({"layer_types": ["sliding_attention", "chunked_attention"], "sliding_window": 4,
                      "attention_chunk_size": 8}, 2)
    with pytest.raises(ValueError, match="local: expected"):
        LocalKeys("global", 8)


# -- heads tensor parallelism does not cut: NxD Inference's padding (Engine.head_padding) ------------------------

def test_padding_follows_nxd_inference_s_documented_example():
    # neuronx-distributed-inference modules/attention/gqa.py: tp_degree 32, 56 attention heads -> 64, 8 kv heads
    # replicated to the ranks (counted per chip by kv_heads_per_chip, so the count stays 8)
    base = dataclasses.replace(model_shape(MODELS["llama4-scout"]), heads=56)
    padded = base.padded(32)
    assert (padded.heads, padded.kv_heads) == (64, 8)
    qkv = {g.name: g for g in padded.gemms}
    assert qkv["qkv"].n == (64 + 2 * 8) * 128 and qkv["o"].k == 64 * 128
    assert padded.padded(32) is padded and base.padded(8) is base  # 8 cuts 56 heads and 8 kv heads: unchanged


def test_padding_converts_to_multi_head_where_neither_count_divides_the_other():
    shape = model_shape(MODELS["llama4-scout"])  # 40 heads, 8 kv heads
    padded = shape.padded(12)  # 12 % 8 and 8 % 12: NxD's GQA.CONVERT_TO_MHA
    assert (padded.heads, padded.kv_heads) == (48, 48)


def test_an_engine_without_padding_refuses_the_tp_and_says_which_engine_takes_it():
    from interop import serving_whatif
    from planner.serving import Workload
    from planner.serving.kv_cache import model_bytes

    work = Workload(256, 16, requests=2)
    with pytest.raises(ValueError, match=r"tp: tensor parallelism 16 does not divide the 40 attention heads.*"
                                         r"head_padding=True"):
        serving_whatif(MODELS["llama4-scout"], "trn2:16", workload=work, parallel=dict(tp=16))
    est = serving_whatif(MODELS["llama4-scout"], "trn2:16", workload=work, parallel=dict(tp=16),
                         engine=Engine(head_padding=True))
    # 16 chips of 4 NeuronCores: 64 ranks, 40 heads padded to 64; the 24 padded heads' q and o projections are held
    shape = model_shape(MODELS["llama4-scout"])
    extra = 48 * 2 * 24 * 128 * 5120 * 2  # layers x (q, o) x heads x head dim x hidden x BF16 bytes
    bf16 = resolve("bfloat16", "trn2")
    assert model_bytes(shape.padded(64), bf16) - model_bytes(shape, bf16) == extra
    pool = est.parallel["colocated"]
    assert est.tpot.p50 > 0 and pool["tp"] == 16 and pool["weights_gb"] * 1e9 > model_bytes(shape, bf16) / 16
    with pytest.raises(ValueError, match="head_padding: expected True or False"):
        Engine(head_padding="yes")
    with pytest.raises(ValueError, match="head_padding: the eager engine"):
        Engine(kernels="eager", head_padding=True)
