"""Small models of the families trained today, built from configs (nothing downloaded), for the planner tests.

:func:`build` makes one family's model with a tiny config (dropout off, no KV cache, float32): the
Hugging Face causal LMs (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3, Mixtral, GPT-NeoX, Falcon) and
:class:`TitanLlama`, a Llama written as plain modules in torchtitan's style (a dict of layers, rotary
frequencies precomputed as a non-persistent buffer and moved to the input's device in forward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN, LAYERS, HEADS, VOCAB, SEQ = 64, 2, 4, 256, 16

HF_FAMILIES = {
    # family: (config class, model class, its own arguments beyond the shared tiny ones)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 128}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 128,
                                                         "sliding_window": 8}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 128}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 128,
                                                   "head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 128,
                                                      "head_dim": 16, "sliding_window": 8}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 128,
                                                          "head_dim": 16, "sliding_window": 8}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"num_key_value_heads": 4, "intermediate_size": 128,
                                                "pad_token_id": 0}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_key_value_heads": 2, "intermediate_size": 64,
                                                         "num_local_experts": 4, "num_experts_per_tok": 2}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"intermediate_size": 128, "rotary_pct": 0.5}),
    # multi-query attention: one key/value head, broadcast in attention (no enable_gqa)
    "falcon": ("FalconConfig", "FalconForCausalLM", {"multi_query": True}),
    # mixtures of experts with a shared expert; DeepSeek-V3's latent attention (MLA) and sigmoid routing
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {
        "num_key_value_heads": 2, "intermediate_size": 128, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2}),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", {
        "num_key_value_heads": 4, "intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 0, "kv_lora_rank": 16,
        "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_group": 1,
        "topk_group": 1}),
}
FAMILIES = tuple(HF_FAMILIES) + ("titan_llama",)


def hf_config(family: str, **overrides):
    """The family's tiny transformers config (dropout off, no cache)."""
    import transformers

    config_class, _, own = HF_FAMILIES[family]
    args = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                max_position_embeddings=4 * SEQ, use_cache=False, **own)
    args.update(overrides)
    config = getattr(transformers, config_class)(**args)
    for key, value in list(config.to_dict().items()):
        if isinstance(value, float) and ("dropout" in key or "pdrop" in key):
            setattr(config, key, 0.0)
    return config


def build(family: str, **overrides) -> nn.Module:
    """The family's tiny model, float32, seeded (``overrides`` change its config)."""
    torch.manual_seed(0)
    if family == "titan_llama":
        return TitanLlama(TitanArgs(**overrides))
    import transformers

    model = getattr(transformers, HF_FAMILIES[family][1])(hf_config(family, **overrides))
    return model.float()


def tokens(batch: int = 8, seq: int = SEQ, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and next-token targets."""
    data = torch.randint(0, VOCAB, (batch, seq + 1), generator=torch.Generator().manual_seed(seed))
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


# -- a torchtitan-style Llama as plain modules --------------------------------------------------------------


@dataclass
class TitanArgs:
    dim: int = HIDDEN
    n_layers: int = LAYERS
    n_heads: int = HEADS
    n_kv_heads: int = 2
    vocab_size: int = VOCAB
    hidden_dim: int = 128
    max_seq_len: int = 4 * SEQ
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5


def precompute_freqs(dim: int, end: int, theta: float) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(end).float(), freqs)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)  # (end, dim/2, 2): real, as export needs


def apply_rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xr = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = freqs[None, :, None, :, 0], freqs[None, :, None, :, 1]
    a, b = xr[..., 0], xr[..., 1]
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return out.flatten(-2).type_as(x)


class TitanAttention(nn.Module):
    def __init__(self, a: TitanArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = a.n_heads, a.n_kv_heads, a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, a.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, a.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * self.head_dim, a.dim, bias=False)

    def forward(self, x, freqs):
        bs, seq, _ = x.shape
        q = self.wq(x).view(bs, seq, -1, self.head_dim)
        k = self.wk(x).view(bs, seq, -1, self.head_dim)
        v = self.wv(x).view(bs, seq, -1, self.head_dim)
        q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
        rep = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bs, seq, -1))


class TitanFeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TitanBlock(nn.Module):
    def __init__(self, a: TitanArgs):
        super().__init__()
        self.attention = TitanAttention(a)
        self.feed_forward = TitanFeedForward(a.dim, a.hidden_dim)
        self.attention_norm = nn.RMSNorm(a.dim, eps=a.norm_eps)
        self.ffn_norm = nn.RMSNorm(a.dim, eps=a.norm_eps)

    def forward(self, x, freqs):
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))


class TitanLlama(nn.Module):
    """torchtitan's Llama layout: ``tok_embeddings``, ``layers`` (a ModuleDict keyed by index), ``norm``,
    ``output``; the rotary table a non-persistent buffer (rebuilt, not loaded) moved to the activations'
    device in forward, as torchtitan does."""

    def __init__(self, a: TitanArgs):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.register_buffer("freqs", precompute_freqs(a.dim // a.n_heads, a.max_seq_len, a.rope_theta),
                             persistent=False)
        self.layers = nn.ModuleDict({str(i): TitanBlock(a) for i in range(a.n_layers)})
        self.norm = nn.RMSNorm(a.dim, eps=a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1 / math.sqrt(a.dim))

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        freqs = self.freqs[: tokens.shape[1]].to(h.device)
        for layer in self.layers.values():
            h = layer(h, freqs)
        return self.output(self.norm(h))
