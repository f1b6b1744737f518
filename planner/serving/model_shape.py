"""A decoder model's serving shape, from its architecture numbers (no torch, no trace).

What an inference engine moves and multiplies: the GEMMs of one layer (attention
projections, the MLP or the experts), the attention heads and their KV cache, the
embedding and the LM head. :func:`model_shape` reads them from what
:func:`planner.models.model_blocks` resolves (a preset's numbers, a
transformers config, a meta module's config), so ``hybrid serving`` never imports
torch. Families: Llama-style gated MLPs (Llama, Mistral, Qwen2/3, Gemma, ...),
GPT-2-style MLPs, and mixtures of experts (Mixtral, Qwen-MoE) with shared experts;
layers of sliding-window attention keep at most the window in their KV cache.
Multi-head latent attention (DeepSeek) is not modelled and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.models import model_blocks

_NON_GATED = frozenset({"gpt2", "gpt_neo", "gptj", "gpt_neox", "gpt_bigcode", "opt", "bloom", "falcon", "phi",
                        "starcoder2", "codegen", "biogpt", "xglm"})
"""transformers model types whose MLP is up-projection, activation, down-projection (two GEMMs)."""
_CONFIG_TYPES = {"LlamaConfig": "llama", "MixtralConfig": "mixtral", "MistralConfig": "mistral",
                 "Qwen2Config": "qwen2", "GPT2Config": "gpt2"}
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOPK = ("num_experts_per_tok", "moe_topk", "top_k")


@dataclass(frozen=True, slots=True)
class Gemm:
    """One weight matrix of a layer as a GEMM ``(tokens, k) x (k, n)``."""

    name: str
    k: int
    n: int
    split: str
    """How tensor parallelism cuts it: ``column`` (n / tp) or ``row`` (k / tp)."""
    experts: int = 0
    """For an expert GEMM: the number of experts holding one of these (0: a dense GEMM)."""

    def local(self, tp: int) -> tuple[int, int]:
        """(k, n) on one of ``tp`` chips."""
        return (self.k, self.n // tp) if self.split == "column" else (self.k // tp, self.n)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What serving a decoder model moves and computes (see the module doc)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gemms: tuple[Gemm, ...]
    """The GEMMs of one layer (experts' GEMMs carry their expert count)."""
    experts: int = 0
    topk: int = 0
    tied: bool = False
    """LM head tied to the embedding (held once)."""
    position_embeddings: int = 0
    """Rows of a learned position embedding (GPT-2), else 0."""
    sliding_layers: int = 0
    """Layers whose attention sees only the last :attr:`window` tokens."""
    window: int = 0
    extra_params: int = 0
    """Parameters outside the GEMMs, the embeddings and the head (norms, biases, routers)."""
    source: str = ""
    blocks: object = field(default=None, compare=False, repr=False)
    """The :class:`~planner.blocks.ModelBlocks` it was read from (its transformers config builds the model
    when the eager engine's ops are traced)."""

    # -- sizes ---------------------------------------------------------------------------

    @property
    def layer_gemm_params(self) -> int:
        """Weight elements in one layer's GEMMs (every expert counted)."""
        return sum(g.k * g.n * max(1, g.experts) for g in self.gemms)

    @property
    def parameters(self) -> int:
        """Every parameter of the model."""
        embed = self.vocab * self.hidden
        head = 0 if self.tied else self.vocab * self.hidden
        return (self.layers * self.layer_gemm_params + embed + head + self.position_embeddings * self.hidden
                + self.extra_params)

    @property
    def active_parameters(self) -> int:
        """Parameters one token's forward uses (``topk`` of the experts)."""
        per_layer = sum(g.k * g.n * (self.topk if g.experts else 1) for g in self.gemms)
        return self.layers * per_layer + 2 * self.vocab * self.hidden

    def kv_heads_per_chip(self, tp: int) -> int:
        """Key/value heads one of ``tp`` chips holds (replicated when tp exceeds them)."""
        return max(1, self.kv_heads // tp)

    def kv_elements_per_token(self, context: int | None = None) -> float:
        """KV cache elements per token of one sequence, all layers (2 x layers x kv_heads x head_dim);
        with ``context``, sliding-window layers count only the window's share of that context."""
        per_layer = 2 * self.kv_heads * self.head_dim
        full = self.layers - self.sliding_layers
        if not self.sliding_layers or context is None or context <= self.window:
            return per_layer * self.layers
        return per_layer * (full + self.sliding_layers * self.window / context)

    def check_tp(self, tp: int) -> None:
        """ValueError naming tp when it cannot cut the heads or the GEMMs."""
        if self.heads % tp:
            raise ValueError(f"tp: tensor parallelism {tp} does not divide the {self.heads} attention heads of "
                             f"{self.name}; accepted: {', '.join(map(str, self.tp_choices()))}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(f"tp: tensor parallelism {tp} and the {self.kv_heads} key/value heads of {self.name} "
                             f"do not divide one another; accepted: {', '.join(map(str, self.tp_choices()))}")
        for g in self.gemms:
            cut = g.n if g.split == "column" else g.k
            if cut % tp:
                raise ValueError(f"tp: tensor parallelism {tp} does not divide {g.name}'s width {cut} of "
                                 f"{self.name}; accepted: {', '.join(map(str, self.tp_choices()))}")

    def tp_choices(self, limit: int = 1024) -> list[int]:
        """Every tensor-parallel degree up to ``limit`` that cuts the model."""
        out = []
        for tp in range(1, min(limit, self.heads) + 1):
            try:
                self._check_quiet(tp)
            except ValueError:
                continue
            out.append(tp)
        return out

    def _check_quiet(self, tp: int) -> None:
        if self.heads % tp or (self.kv_heads % tp and tp % self.kv_heads):
            raise ValueError
        if any((g.n if g.split == "column" else g.k) % tp for g in self.gemms):
            raise ValueError


def _get(summary, name: str, default=None):
    if isinstance(summary, dict):
        value = summary.get(name)
    else:
        value = getattr(summary, name, None)
    return default if value is None else value


def _first(summary, names, default=None):
    for n in names:
        value = _get(summary, n)
        if value is not None:
            return value
    return default


def model_shape(model) -> ModelShape:
    """The :class:`ModelShape` of a preset name, a transformers model type, a config or a meta-device module."""
    blocks = model_blocks(model)
    summary = blocks.arch if getattr(blocks, "arch", None) is not None else blocks.config
    model_type = _get(summary, "model_type") or _CONFIG_TYPES.get(getattr(blocks, "config_class", "") or "", "")
    if _get(summary, "kv_lora_rank") is not None:
        raise ValueError(f"model: {blocks.name} uses multi-head latent attention (kv_lora_rank), which the "
                         f"serving model does not cover; give a model with multi-head or grouped-query attention")
    h = blocks.hidden_size
    heads, kv, hd = blocks.heads, blocks.kv_heads, blocks.head_dim
    gemms = [Gemm("qkv", h, (heads + 2 * kv) * hd, "column"), Gemm("o", heads * hd, h, "row")]
    experts = blocks.experts
    topk = blocks.topk
    gated = model_type not in _NON_GATED
    extra = 2 * h * blocks.num_layers + h  # two norms per layer and the final norm
    if experts:
        width = int(_first(summary, ("moe_intermediate_size", "intermediate_size")))
        gemms += [Gemm("experts.gate_up", h, 2 * width, "column", experts),
                  Gemm("experts.down", width, h, "row", experts)]
        extra += blocks.num_layers * h * experts  # the router
        shared = _get(summary, "shared_expert_intermediate_size") or (
            _get(summary, "n_shared_experts", 0) * width if _get(summary, "n_shared_experts") else 0)
        if shared:
            gemms += [Gemm("shared.gate_up", h, 2 * int(shared), "column"), Gemm("shared.down", int(shared), h, "row")]
            extra += blocks.num_layers * h  # the shared expert's gate
    else:
        width = _first(summary, ("intermediate_size", "n_inner", "ffn_dim")) or 4 * h
        width = int(width)
        if gated:
            gemms += [Gemm("gate_up", h, 2 * width, "column"), Gemm("down", width, h, "row")]
        else:
            gemms += [Gemm("up", h, width, "column"), Gemm("down", width, h, "row")]
    if not gated:
        # GPT-2-style blocks carry biases on every projection and LayerNorms with a bias.
        extra += blocks.num_layers * (sum(g.n for g in gemms) + 2 * h) + h
    elif _get(summary, "attention_bias") or _get(summary, "qkv_bias") or model_type in ("qwen2", "qwen2_moe"):
        extra += blocks.num_layers * (heads + 2 * kv) * hd
    positions = int(_get(summary, "n_positions", 0) or 0) if model_type in ("gpt2", "gpt_bigcode") else 0
    layer_types = _get(summary, "layer_types")
    window = int(_get(summary, "sliding_window", 0) or 0)
    if isinstance(layer_types, (list, tuple)):
        sliding = sum(1 for t in layer_types[:blocks.num_layers] if t == "sliding_attention")
    else:
        sliding = blocks.num_layers if window and _get(summary, "use_sliding_window", True) else 0
    return ModelShape(name=blocks.name, layers=blocks.num_layers, hidden=h, heads=heads, kv_heads=kv, head_dim=hd,
                      vocab=blocks.vocab, gemms=tuple(gemms), experts=experts, topk=topk, tied=blocks.tied,
                      position_embeddings=positions, sliding_layers=sliding if window else 0, window=window,
                      extra_params=extra, source=getattr(blocks, "source", ""), blocks=blocks)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = ["Gemm", "ModelShape", "ceil_div", "model_shape"]

