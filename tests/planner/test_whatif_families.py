"""What-ifs cut public model families beyond the common decoder: each one's layers traced as its decoder calls
them (Gemma 3's per-type rotary tables, BLOOM's ALiBi, OPT's nested decoder and mask-counted positions, Gemma 2's
own attention, a multimodal config's language model, Llama 4's complex rotary table and unmarked (in, out)
experts written dense and priced routed, HunYuan's derived head size), and cut by Megatron's rules at tp=2 where
a family holds more than projections per head (OLMo 2's full-width q/k norms, GPT-OSS's attention sinks and
expert biases, DeepSeek's multi-head latent attention, Qwen3-Next's gated delta net).

Reference: the transformers model itself, built from the same config on the meta device: every traced layer holds
exactly that layer's parameters, and the embedding its token (and learned position) table; at tp=2 a rank holds
half of every parameter but those Megatron keeps whole, named per family below."""

from __future__ import annotations

import copy
import re

import pytest

from planner.decoder_blocks import DecoderBlocks
from planner.profile import Shard

transformers = pytest.importorskip("transformers", reason="the families' configs come from transformers")

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)


def _configs():
    gemma3_text = dict(SMALL, layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    return {
        "gemma3_text": transformers.Gemma3TextConfig(**gemma3_text),
        "gemma3 (multimodal: its text model)": transformers.Gemma3Config(text_config=gemma3_text),
        "gemma2": transformers.Gemma2Config(**SMALL),
        "opt": transformers.OPTConfig(vocab_size=128, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                                      num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64),
        "bloom": transformers.BloomConfig(vocab_size=128, hidden_size=64, n_layer=2, n_head=4),
        "falcon": transformers.FalconConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, alibi=True, new_decoder_architecture=False,
                                            multi_query=False, parallel_attn=False, bias=True),
        "olmo2": transformers.Olmo2Config(**_NO_HEAD_DIM),
        "gpt_oss": transformers.GptOssConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2,
                                             layer_types=["sliding_attention", "full_attention"], sliding_window=8),
        "deepseek_v3": transformers.DeepseekV3Config(
            vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=2,
            topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
            qk_nope_head_dim=16, v_head_dim=16),
        "qwen3_next": transformers.Qwen3NextConfig(
            **SMALL, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
            num_experts_per_tok=2, layer_types=["linear_attention", "full_attention"], linear_num_value_heads=4,
            linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16),
        "llama4": transformers.Llama4TextConfig(**SMALL, intermediate_size_mlp=128, num_local_experts=4,
                                                num_experts_per_tok=1),
        "hunyuan_v1_dense": transformers.HunYuanDenseV1Config(**_NO_HEAD_DIM),
        # Llama 4 Maverick's layout: a dense MLP of its own width, then a sparse layer
        "llama4_interleaved": transformers.Llama4TextConfig(**SMALL, intermediate_size_mlp=96, num_local_experts=4,
                                                            num_experts_per_tok=1, interleave_moe_layer_step=2),
    }


_NO_HEAD_DIM = {k: v for k, v in SMALL.items() if k != "head_dim"}
CONFIGS = _configs()

KEPT_WHOLE = {
    # Megatron keeps whole: the layer norms, row-parallel biases, routers, MLA's down-projections into its latents
    # and their norms, norms of one head's width; OLMo 2's q/k norms span every head and are cut with them.
    "olmo2": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "gpt_oss": ("layernorm", "o_proj.bias", "router.", "experts.down_proj_bias"),
    "deepseek_v3": ("layernorm", "q_a_proj", "kv_a_proj_with_mqa", "mlp.gate."),
    "qwen3_next": ("layernorm", "linear_attn.norm", "q_norm", "k_norm", "mlp.gate.", "shared_expert_gate"),
    "llama4": ("layernorm", "router."),
    "hunyuan_v1_dense": ("layernorm",),
}
"""Parameters a tensor-parallel rank holds whole (by name); a rank holds half of every other one at tp=2."""


def _reference_model(config):
    import torch

    text = copy.deepcopy(config.get_text_config())
    if getattr(text, "head_dim", 0) is None:  # HunYuan's default leaves it to be derived: hidden / heads
        text.head_dim = text.hidden_size // text.num_attention_heads
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(text)


@pytest.mark.parametrize("family", list(CONFIGS))
def test_every_layer_is_traced_with_the_models_own_parameters(family):
    config = CONFIGS[family]
    # experts' grouped GEMMs run in bfloat16 only (float32 experts would be priced as written: kernels="eager")
    moe = family in ("gpt_oss", "deepseek_v3", "qwen3_next", "llama4", "llama4_interleaved")
    blocks = DecoderBlocks(config, dtype="bfloat16" if moe else "float32")
    text = config.get_text_config()
    model = _reference_model(config)
    parts = DecoderBlocks.parts(model)
    shard = Shard(microbatch=1, seq_len=16)
    for i, layer in enumerate(parts["layers"], start=1):
        profile = blocks.profile(i, shard)
        assert profile.params == sum(p.numel() for p in layer.parameters()), (family, i)
        assert profile.forward and profile.backward, (family, i)
    embedding = parts["embed"].weight.numel() + (sum(p.numel() for p in parts["positions"].parameters())
                                                 if parts["positions"] is not None else 0)
    assert blocks.profile(0, shard).params == embedding
    assert blocks.num_layers == text.num_hidden_layers


@pytest.mark.parametrize("family", list(KEPT_WHOLE))
def test_a_tensor_parallel_rank_holds_megatrons_share(family):
    blocks = DecoderBlocks(CONFIGS[family], dtype="bfloat16")
    shard = Shard(microbatch=1, seq_len=16, tp=2, sequence_parallel=False)
    for i, layer in enumerate(DecoderBlocks.parts(_reference_model(CONFIGS[family]))["layers"], start=1):
        total = sum(p.numel() for p in layer.parameters())
        kept = sum(p.numel() for n, p in layer.named_parameters() if any(k in n for k in KEPT_WHOLE[family]))
        assert blocks.profile(i, shard).params == (total - kept) // 2 + kept, (family, i)


def test_experts_written_dense_are_priced_routed_and_say_so():
    # Llama 4 refuses transformers' grouped_mm and writes its experts dense (every expert on every token, the
    # router's scores zeroing the rest). Reference: the layer's forward GEMMs as a routed stack runs them, 16 tokens
    # through the attention projections, the router and the shared expert, 16 x top-1 through the routed experts.
    blocks = DecoderBlocks(CONFIGS["llama4"], dtype="bfloat16")
    profile = blocks.profile(1, Shard(microbatch=1, seq_len=16))
    assert "refuse transformers' grouped_mm" in profile.note and "priced routed (top-1 of 4)" in profile.note
    dense = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 64 * 4 + 3 * 64 * 128  # q, k, v, o; router; shared gate, up, down
    routed = 64 * 256 + 128 * 64  # an expert's gate_up and down
    mm = [r.shapes for r in profile.forward if r.op.split(".")[0] in ("aten::mm", "aten::bmm", "aten::_grouped_mm")]
    flops = sum(2 * a[-2] * a[-1] * b[-1] * (a[0] if len(a) == 3 else 1) for a, b in mm)
    assert flops == 2 * 16 * dense + 2 * 16 * 1 * routed
    # the elementwise ops on the experts' copies of the tokens (scaled inputs, activation, their gradients) run on
    # the 16 routed pairs, not on 4 experts x 16 tokens: no record keeps a tensor of every expert's copy
    records = profile.forward + profile.backward
    every = [r.op for r in records for shape in r.shapes + (r.out_shapes or ()) if shape[:2] == (4, 16)
             and len(shape) == 3]
    # the inputs scaled by the router's scores (forward and its gradient): 16 rows, not 64
    scaled = [r.shapes for r in records if r.op.startswith("aten::mul") and any(x[1:] == (1,) for x in r.shapes)]
    assert not every and scaled and all(x[0] == 16 for shapes in scaled for x in shapes), (every, scaled)


def test_only_an_moe_models_sparse_layers_exchange_tokens_over_ep():
    # Llama 4 with MoE every second layer, ep=2: the dense first layer issues no all-to-all and says nothing of
    # experts; the sparse second one exchanges its tokens' hidden states (top-1) both ways, forward and backward.
    blocks = DecoderBlocks(CONFIGS["llama4_interleaved"], dtype="bfloat16")
    shard = Shard(microbatch=1, seq_len=16, ep=2)
    dense, sparse = blocks.profile(1, shard), blocks.profile(2, shard)
    assert not [c for c in dense.collectives if c.op == "all_to_all"] and "MoE" not in dense.note
    routed = 16 * 1 * 64 * 2  # tokens x top-1 x hidden x bfloat16
    assert [(c.op, c.nbytes, c.phase, c.calls) for c in sparse.collectives if c.op == "all_to_all"] == [
        ("all_to_all", routed, "forward", 2), ("all_to_all", routed, "backward", 2)]
    assert "MoE: 4 experts, top-1" in sparse.note


def test_a_state_space_model_is_refused_by_name():
    config = transformers.FalconH1Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)
    with pytest.raises(ValueError, match="model: falcon_h1 has state-space \\(Mamba\\) layers"):
        DecoderBlocks(config)


@pytest.mark.parametrize("model_type, varying", [
    ("gemma4_text", "head_dim 256/512"),  # transformers' per-layer config: sliding and global layers differ
    ("dots3_note_text", "num_attention_heads 64/128; num_key_value_heads 64/128"),
    ("gemma3n_text", "intermediate_size a list of 35 (16384)"),  # a width a layer, which its modules index
])
def test_layers_of_different_shapes_are_refused_by_name_in_both_what_ifs(model_type, varying):
    # Before: transformers' AmbiguousGlobalPerLayerAttributeError, or a TypeError on a list, from deep inside.
    import interop
    from planner.serving import Workload, serving_whatif

    message = re.escape(f"model: {model_type} gives its layers' shapes per layer ({varying}); a what-if prices")
    config = transformers.CONFIG_MAPPING[model_type]()
    with pytest.raises(ValueError, match=message):
        DecoderBlocks(config)
    with pytest.raises(ValueError, match=message):
        interop.whatif(model_type, "h100:8", global_batch=8, seq_len=512)
    with pytest.raises(ValueError, match=message):
        serving_whatif(model_type, "h100:8", workload=Workload(256, 32, requests=8))


def test_a_cut_a_family_does_not_take_is_refused_by_name_and_left_out_of_the_default_layout():
    # GPT-OSS's grouped GEMM needs 16-byte strides: 24 expert columns cut 2 ways are 12 bf16 elements (24 bytes), so
    # the tp=2 trace fails inside torch. Before: that RuntimeError escaped whatif, on any rack where the default
    # layout tried tp=2. Now an asked-for tp=2 is a ValueError naming the cut; the default layout leaves it out.
    import interop

    config = transformers.GptOssConfig(vocab_size=256, hidden_size=64, intermediate_size=24, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                       num_experts_per_tok=2)
    with pytest.raises(ValueError, match=r"parallel: gpt_oss's block layers\.0 cannot be traced cut as tp=2 .*"
                                         r"RuntimeError: Expected mat_a stride"):
        interop.whatif(config, "h100:8", global_batch=8, seq_len=128, parallel=dict(tp=2))
    est = interop.whatif(config, "h100:8", global_batch=8, seq_len=128)
    assert est.parallel["tp"] == 1 and est.seconds > 0
    # the same refusal, remembered: asked again, no second trace
    blocks = DecoderBlocks(config)
    with pytest.raises(ValueError, match="cannot be traced cut as tp=2"):
        blocks.profile(1, Shard(microbatch=1, seq_len=128, tp=2))
    traced = blocks._trace
    blocks._trace = lambda *a: pytest.fail("traced again")
    with pytest.raises(ValueError, match="cannot be traced cut as tp=2"):
        blocks.profile(1, Shard(microbatch=1, seq_len=128, tp=2))
    blocks._trace = traced


def test_a_family_that_does_not_build_on_meta_is_a_value_error_naming_it():
    # DBRX's default config lacks what its own attention reads (transformers' AttributeError): named, not raised raw
    import interop

    with pytest.raises(ValueError, match="model: dbrx's block embedding does not build or run on the meta device .*"
                                         "AttributeError: 'DbrxAttentionConfig' object has no attribute 'rope_theta'"):
        interop.whatif("dbrx", "h100:8", global_batch=8, seq_len=128)
    # a family whose whole model (built for the layers' signatures) fails in its own constructor
    with pytest.raises(ValueError, match="model: qwen4_exp_text's block layers.0 does not build or run on the meta "
                                         "device .*TypeError: unsupported operand"):
        interop.whatif("qwen4_exp_text", "h100:8", global_batch=8, seq_len=128)


def test_a_default_config_transformers_cannot_build_is_a_value_error_naming_the_model():
    from planner.models import transformers_config

    with pytest.raises(ValueError, match="model: transformers cannot build its default 'gemma4_assistant' config "
                                         "\\(StrictDataclassClassValidationError: .*hidden_size_per_layer_input"):
        transformers_config("gemma4_assistant")


def test_a_linear_attention_layer_is_traced_without_a_causal_mask_matrix():
    # eager hands full-attention layers the materialised causal mask; Qwen3-Next's decoder hands its gated delta
    # net layers none (a recurrent layer takes only a padding mask): given the matrix, its forward fails
    import interop  # noqa: F401 -- eager expands composites as a slot (PrivateUse1) does: the extension registers it

    blocks = DecoderBlocks(CONFIGS["qwen3_next"], dtype="bfloat16", kernels="eager")
    shard = Shard(microbatch=1, seq_len=16)
    linear, full = blocks.profile(1, shard), blocks.profile(2, shard)
    assert linear.forward and full.forward and linear.params != full.params


def test_a_tensor_parallelism_that_does_not_divide_the_linear_attention_heads_is_refused_up_front():
    # the search skips a layout check_shard refuses; one it lets through must trace
    blocks = DecoderBlocks(CONFIGS["qwen3_next"], dtype="bfloat16")
    blocks.check_shard(Shard(seq_len=16, tp=2))
    with pytest.raises(ValueError, match="tp: tensor parallelism 4 does not divide linear_num_key_heads=2 of"):
        blocks.check_shard(Shard(seq_len=16, tp=4))
