"""The published serving rows' models, as their transformers configs' numbers, and the row itself.

:data:`MODELS` maps a row's model name to the :class:`~planner.decoder_blocks.DecoderBlocks` its source's checkpoint
configures (a preset of :mod:`planner.models` where one exists); :class:`GoldenRow` is one published configuration and
what it reported. The rows are in :mod:`planner.serving.golden_rows` (and :mod:`planner.serving.golden_mlperf`).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.decoder_blocks import DecoderBlocks
from planner.models import MODELS as PRESETS
from planner.models import model_blocks
from planner.serving.engine import Engine
from planner.serving.workload import Workload


def _llama70b(vocab: int, context: int, rope: dict) -> dict:
    return dict(vocab_size=vocab, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=context, rms_norm_eps=1e-5,
                rope_parameters=rope, tie_word_embeddings=False)


def _qwen3_moe(name: str, repo: str, *, layers: int, hidden: int, heads: int, ffn: int, expert_ffn: int) -> DecoderBlocks:
    """A Qwen3 MoE model as its Hugging Face config.json gives it: heads of 128, 4 key/value heads, 128 experts,
    top-8, every layer sparse."""
    source = (f"Qwen/{repo} config.json ({layers} layers, "
              f"d {hidden}, {heads} heads of 128, 4 kv heads, 128 experts of FFN {expert_ffn}, top-8)")
    return DecoderBlocks(
        name=name, config_class="Qwen3MoeConfig", source=source,
        arch=dict(vocab_size=151936, hidden_size=hidden, intermediate_size=ffn, moe_intermediate_size=expert_ffn,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=4, head_dim=128,
                  num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  tie_word_embeddings=False))


def _gpt_oss(name: str, layers: int, experts: int, source: str) -> DecoderBlocks:
    """A GPT-OSS model as its config.json gives it: d 2880, 64 query and 8 key/value heads of 64, experts of width
    2880, top-4, a 128-token sliding window on alternate layers, attention biases (its attention sinks, one scalar a
    head, are left out)."""
    arch = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=layers,
                num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=experts,
                num_experts_per_tok=4, sliding_window=128,
                layer_types=["sliding_attention", "full_attention"] * (layers // 2), max_position_embeddings=131072,
                tie_word_embeddings=False, attention_bias=True)
    return DecoderBlocks(name=name, arch=arch, config_class="GptOssConfig", source=source)


_GPT_OSS_CARD = "OpenAI, 'gpt-oss-120b & gpt-oss-20b Model Card' (2025-08-05)"

def _llama4(name: str, repo: str, *, experts: int, step: int, qk_norm: bool) -> DecoderBlocks:
    """A Llama 4 model's language model as its Hugging Face config.json's ``text_config`` gives it: 48 layers, d 5120,
    40 heads of 128, 8 key/value heads, ``experts`` routed experts of FFN 8192 (top-1) and a shared one in every
    ``step``-th layer, a dense MLP of 16384 in the others, chunked attention (8192) in three of every four layers
    (every fourth, without rotary embedding, attends to the whole context)."""
    source = (f"meta-llama/{repo} config.json text_config (48 layers, d 5120, 40 heads of 128, 8 kv heads, "
              f"{experts} experts of FFN 8192 top-1 and a shared expert every {step} layer(s), dense FFN 16384 "
              f"between, attention chunks of 8192 on 3 of 4 layers; as copied in NVIDIA/TensorRT-LLM "
              f"tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py LLAMA_4_MAVERICK_TWO_LAYER_CONFIG, its layers cut to 2)")
    return DecoderBlocks(
        name=name, config_class="Llama4TextConfig", source=source,
        arch=dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                  num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                  num_local_experts=experts, num_experts_per_tok=1, interleave_moe_layer_step=step,
                  attention_chunk_size=8192, no_rope_layer_interval=4, use_qk_norm=qk_norm,
                  max_position_embeddings=1048576 if step == 2 else 10485760, rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=False))


def _deepseek_v3(name: str, repo: str) -> DecoderBlocks:
    """A DeepSeek-V3-architecture model (V3, R1, R1-0528 share it) as its Hugging Face config.json gives it: 61 layers,
    d 7168, 128 heads of multi-head latent attention (query latent 1536, key/value latent 512, per head 128 without
    and 64 with rotary embedding, values of 128), the first 3 layers dense (FFN 18432), the other 58 with 256 routed
    experts of FFN 2048 (top-8) and one shared, one multi-token prediction module (stored, not served here)."""
    source = (f"deepseek-ai/{repo} config.json (61 layers, d 7168, 128 heads, kv_lora_rank 512, q_lora_rank 1536, "
              "qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, first_k_dense_replace 3, intermediate_size "
              "18432, 256 routed experts of moe_intermediate_size 2048 top-8, 1 shared expert, "
              "num_nextn_predict_layers 1, vocabulary 129,280)")
    return DecoderBlocks(
        name=name, config_class="DeepseekV3Config", source=source,
        arch=dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                  num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_routed_experts=256,
                  n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, moe_layer_freq=1,
                  kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                  n_group=8, topk_group=4, norm_topk_prob=True, routed_scaling_factor=2.5,
                  num_nextn_predict_layers=1, max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0,
                  tie_word_embeddings=False))


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
    "llama3.1-8b": DecoderBlocks(name="llama3.1-8b", source=PRESETS["llama3.1-8b"].source,
                                 config_class=PRESETS["llama3.1-8b"].config_class, arch=PRESETS["llama3.1-8b"].arch),
    "qwen3-32b": DecoderBlocks(
        name="qwen3-32b", config_class="Qwen3Config",
        source="Qwen/Qwen3-32B config.json (64 layers, d 5120, FFN 25600, 64 heads of 128, 8 kv heads)",
        arch=dict(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                  num_attention_heads=64, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3-30b-a3b": _qwen3_moe("qwen3-30b-a3b", "Qwen3-30B-A3B", layers=48, hidden=2048, heads=32, ffn=6144,
                                expert_ffn=768),
    "gpt-oss-120b": _gpt_oss("gpt-oss-120b", 36, 128, f"{_GPT_OSS_CARD} and openai/gpt-oss-120b config.json: 36 "
                             "layers, d 2880, 64 query and 8 key/value heads of 64, 128 experts of width 2880, top-4, "
                             "vocabulary 201,088, a 128-token sliding window on alternate layers, attention biases"),
    "gpt-oss-20b": _gpt_oss("gpt-oss-20b", 24, 32, f"{_GPT_OSS_CARD} and openai/gpt-oss-20b config.json: 24 layers, "
                            "32 experts, the 120B's widths; quantization_config mxfp4, modules_to_not_convert: "
                            "self_attn, router, embed_tokens, lm_head"),
    "qwen3-235b-a22b": _qwen3_moe("qwen3-235b-a22b", "Qwen3-235B-A22B", layers=94, hidden=4096, heads=64,
                                  ffn=12288, expert_ffn=1536),
    "llama4-maverick": _llama4("llama4-maverick", "Llama-4-Maverick-17B-128E", experts=128, step=2, qk_norm=False),
    "llama4-scout": _llama4("llama4-scout", "Llama-4-Scout-17B-16E", experts=16, step=1, qk_norm=True),
    "deepseek-r1": _deepseek_v3("deepseek-r1", "DeepSeek-R1-0528"),
    # planner.models' preset (its source there): the MLPerf rows' Mixtral 8x7B.
    "mixtral-8x7b": model_blocks("mixtral-8x7b"),
}
"""The rows' models, as their transformers configs' numbers."""


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
    note: str = ""
    """What a reader of the row must know that its figures do not say: a published figure that contradicts another
    publication (:data:`CONTRADICTED` names those rows and metrics); printed under the table."""

    def modelled_workload(self) -> Workload:
        """The workload the row is modelled with: as published, with each prompt padded to its bucket."""
        if self.prompt_bucket is None:
            return self.workload
        w = self.workload
        return Workload([(max(a, self.prompt_bucket), b) for a, b in w.lengths], requests=w.requests,
                        concurrency=w.concurrency, rate=w.rate, seed=w.seed, max_output_tokens=w.max_output_tokens)


__all__ = ["GoldenRow", "MODELS"]
