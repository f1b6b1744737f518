"""Blocks of a model traced on the meta device: parameters, FLOPs, activations and shards against references."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="decoder blocks are built from transformers configs")

from planner import Shard, block_cost, model_blocks  # noqa: E402
from planner.block_pricing import Execution  # noqa: E402
from planner.decoder_blocks import DecoderBlocks  # noqa: E402

SEQ = 256


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=SEQ,
                      tie_word_embeddings=False)
    return cfg, DecoderBlocks(cfg, name="tiny-llama")


def test_blocks_and_parameters_match_the_transformers_model(tiny):
    import torch
    from transformers import AutoModelForCausalLM

    cfg, blocks = tiny
    assert blocks.names == ("embedding", "layers.0", "layers.1", "layers.2", "layers.3", "head")
    assert blocks.layers == range(1, 5)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    assert blocks.parameters() == sum(p.numel() for p in model.parameters())
    # One trace serves every layer of the same shape.
    assert len(blocks.distinct()) == 3


def test_model_flops_match_the_megatron_formula(tiny):
    # Megatron-LM's num_floating_point_operations (causal attention halved), per token:
    # 12 L h^2 (1 + g/a + s/(2h)) + 18 L h f + 6 h V   (SwiGLU: 3 h f parameters per MLP)
    cfg, blocks = tiny
    shard = Shard(seq_len=SEQ)
    modelled = sum(blocks.profile(i, shard).model_flops for i in range(len(blocks))) / SEQ
    L, h, f, a, g, V, s = 4, 256, 512, 8, 4, 1000, SEQ
    head_dim = h // a
    attention_proj = 2 * 2 * h * (a * head_dim) + 2 * 2 * h * (g * head_dim)  # q, o and k, v (fwd FLOPs)
    attention_core = 2 * 2 * s * a * head_dim * (s + 1) / (2 * s)  # causal QK^T and AV
    reference = 3 * (L * (attention_proj + attention_core + 2 * 3 * h * f) + 2 * h * V)
    assert modelled == pytest.approx(reference, rel=0.01)


def test_tensor_parallel_shard(tiny):
    _, blocks = tiny
    full, half = blocks.profile(1, Shard(seq_len=SEQ)), blocks.profile(1, Shard(seq_len=SEQ, tp=2))
    norms = 2 * 256
    assert half.params == (full.params - norms) // 2 + norms  # norms replicated, everything else split
    ops = [c.op for c in half.collectives]
    assert ops.count("all_gather") == 2 and ops.count("reduce_scatter") == 2  # per direction, forward
    assert half.model_flops == pytest.approx(full.model_flops, rel=0.01)  # the same block, cut in two
    # Sequence parallelism: hidden-sized activations are split too.
    assert half.saved_bytes() < 0.6 * full.saved_bytes()
    with pytest.raises(ValueError, match="tp: tensor parallelism 3 does not divide the 8 attention heads"):
        blocks.profile(1, Shard(seq_len=SEQ, tp=3))


def test_recompute_keeps_less(tiny):
    _, blocks = tiny
    p = blocks.profile(1, Shard(seq_len=SEQ, microbatch=2))
    assert p.saved_bytes("full") == p.input_bytes == 2 * SEQ * 256 * 2
    assert p.saved_bytes("full") < p.saved_bytes("selective") < p.saved_bytes("none")
    cost = block_cost(p, "h100")
    assert 0 < cost.recompute("selective") < cost.recompute("full") == cost.forward


def test_context_parallel_attention_is_split(tiny):
    _, blocks = tiny
    one, two = blocks.profile(1, Shard(seq_len=SEQ)), blocks.profile(1, Shard(seq_len=SEQ, cp=2))
    # Each of 2 chips runs half the tokens and half the causal attention pairs; the whole block is the same.
    assert two.model_flops == pytest.approx(one.model_flops, rel=0.02)
    assert [c.op for c in two.collectives if c.group == "cp"] == ["send_recv", "send_recv"]


@pytest.mark.parametrize("cp", [2, 4])
def test_a_context_parallel_ring_runs_cp_kernels_of_the_same_flops(tiny, cp):
    import devices.cost
    from planner.ring_attention import ring_steps

    _, blocks = tiny
    prof = blocks.profile(1, Shard(seq_len=SEQ, cp=cp))
    attention = [r for r in prof.forward + prof.backward if "attention" in devices.cost.classify(r.op)[1]]
    assert len(attention) == 2 and ring_steps(prof.forward[0], prof.shard) is None
    for rec in attention:
        steps = ring_steps(rec, prof.shard)
        kernels = [s for s in steps if "attention" in devices.cost.classify(s[0].op)[1]]
        merges = [s for s in steps if s[0].op == "aten::add"]
        # cp kernels (step 0 causal on the chip's own chunks, then one per peer), and merges per later step:
        # the output in the forward, dq, dk and dv in the backward (Transformer Engine's P2P ring).
        assert len(kernels) == cp and len(merges) == (cp - 1) * (3 if "backward" in rec.op else 1)
        assert kernels[0][0].args["is_causal"] and not any(a.args["is_causal"] for s in kernels[1:] for a in s)
        flops = lambda r: devices.cost.estimate("h100", r.op, r.shapes, r.dtype, out_shapes=r.out_shapes,  # noqa: E731
                                                args=r.args).flops
        # Every form of every step does the same work; together they do the traced op's (causal step 0 counts
        # the diagonal, (L + 1) / L of half of L * L pairs).
        for s in kernels[1:]:
            assert flops(s[0]) == flops(s[1])
        local = SEQ // cp
        assert sum(flops(s[0]) for s in kernels) == pytest.approx(flops(rec), rel=1.0 / local)
    assert block_cost(prof, "h100").forward_attention > 0


def test_fp8_prices_matmuls_at_the_fp8_peak(tiny):
    _, blocks = tiny
    p = blocks.profile(1, Shard(seq_len=2048, microbatch=4))
    bf16 = block_cost(p, "h100", Execution(precision="bfloat16", calibrated=False))
    fp8 = block_cost(p, "h100", Execution(precision="fp8", calibrated=False))
    assert fp8.forward_gemm < bf16.forward_gemm  # faster GEMMs...
    assert fp8.forward_pointwise > bf16.forward_pointwise  # ...plus the scaling and cast passes
    assert fp8.forward_attention == pytest.approx(bf16.forward_attention)  # attention stays in BF16
    with pytest.raises(ValueError, match="precision: unknown training precision .int4.; accepted: bfloat16, fp8"):
        Execution(precision="int4")


def test_moe_experts_routed_evenly_and_sharded():
    from transformers import MixtralConfig

    cfg = MixtralConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, num_local_experts=4, num_experts_per_tok=2)
    blocks = DecoderBlocks(cfg, name="tiny-moe")
    one = blocks.profile(1, Shard(seq_len=SEQ))
    assert not any("grouped_mm" in r.op for r in one.forward + one.backward)
    # Against the dense layer of the same shape: every token runs top-2 experts of 3 h f parameters instead
    # of one MLP, plus the router (h x E); 2 FLOPs per multiply-add, x3 for forward and backward.
    from transformers import LlamaConfig

    dense_cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=4)
    dense = DecoderBlocks(dense_cfg, name="tiny-dense").profile(1, Shard(seq_len=SEQ)).model_flops
    h, f, E = 128, 256, 4
    assert one.model_flops - dense == pytest.approx(SEQ * 6 * ((2 - 1) * 3 * h * f + h * E), rel=0.01)
    ep = blocks.profile(1, Shard(seq_len=SEQ, ep=2))
    assert ep.expert_params == one.expert_params // 2
    assert [c.op for c in ep.collectives] == ["all_to_all", "all_to_all"]
    with pytest.raises(ValueError, match="ep: expert parallelism 3 does not divide the 4 experts"):
        blocks.profile(1, Shard(seq_len=SEQ, ep=3))


def test_presets_and_unknown_names():
    assert {"llama3-8b", "llama3-70b", "llama3.1-405b", "mixtral-8x7b"} <= set(
        __import__("planner", fromlist=["model_presets"]).model_presets())
    with pytest.raises(ValueError, match="model: unknown model 'llama9'; named models: llama3-8b, llama3-70b, "
                                         "llama3.1-405b, mixtral-8x7b, llama3.1-8b, llama3.1-70b, llama2-7b, "
                                         "llama2-13b, llama2-70b, gpt, gpt-tiny, cnn"):
        model_blocks("llama9")


def test_meta_module_is_accepted_and_real_weights_refused(tiny):
    import torch
    from transformers import AutoModelForCausalLM

    cfg, blocks = tiny
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    from_module = model_blocks(model)
    assert from_module.parameters() == blocks.parameters()
    with pytest.raises(ValueError, match="shape-only; build the module on the meta device"):
        model_blocks(torch.nn.Linear(2, 2))
