"""A decoder model's serving shape, from its architecture numbers (no torch, no trace).

What an inference engine moves and multiplies: the GEMMs of one layer (attention
projections, the MLP or the experts), the attention heads and their KV cache, the
embedding and the LM head. :func:`model_shape` reads them from what
:func:`planner.models.model_blocks` resolves (a preset's numbers, a
transformers config, a meta module's config), so ``hybrid serving`` never imports
torch. Families: Llama-style gated MLPs (Llama, Mistral, Qwen2/3, Gemma, ...),
GPT-2-style MLPs, and mixtures of experts (Mixtral, Qwen-MoE, Llama 4) with shared experts,
sparse in every layer or only in some (:func:`sparse_layers`: Llama 4 Maverick's every second layer,
Qwen-MoE's ``decoder_sparse_step`` and ``mlp_only_layers``, DeepSeek's first dense layers), the
dense layers with their own MLP width. Layers of local attention (:func:`local_layers`: a sliding
window, as Mistral and GPT-OSS; Llama 4's chunks) keep at most their span in the KV cache and
attend to at most it.

Multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2: any config with ``kv_lora_rank``) is
:class:`LatentAttention`: its projections are the layer's GEMMs under their own names, cut as
:mod:`planner.megatron_shard` cuts them (the down-projections into the latents whole on every tensor-parallel rank,
the per-head up-projections by heads), and its KV cache is one latent of ``kv_lora_rank + qk_rope_head_dim``
elements per token and layer, shared by the heads and held whole by every rank (:meth:`ModelShape.kv_layer_elements`).
Decode attends in the latent space with the up-projections absorbed (one key/value head of the latent's width: the
cache is read once), prefill with the latents expanded into ``heads`` heads of ``qk_nope + qk_rope`` (keys) and
``v_head_dim`` (values) (:meth:`ModelShape.attention_shapes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.megatron_shard import COLUMN, REPLICATED, ROW
from planner.models import model_blocks

_NON_GATED = frozenset({"gpt2", "gpt_neo", "gptj", "gpt_neox", "gpt_bigcode", "opt", "bloom", "falcon", "phi",
                        "starcoder2", "codegen", "biogpt", "xglm"})
"""transformers model types whose MLP is up-projection, activation, down-projection (two GEMMs)."""
_CONFIG_TYPES = {"LlamaConfig": "llama", "MixtralConfig": "mixtral", "MistralConfig": "mistral",
                 "Qwen2Config": "qwen2", "GPT2Config": "gpt2", "Llama4TextConfig": "llama4_text"}
_IMPLICIT_SHARED = {"llama4_text": "intermediate_size", "llama4": "intermediate_size"}
"""Model types whose every sparse layer also runs a shared expert their config does not name (Llama 4's
``feed_forward.shared_expert``), and the config field that gives its width."""
_LOCAL_TYPES = {"sliding_attention": ("sliding", "sliding_window"), "chunked_attention": ("chunked",
                                                                                        "attention_chunk_size")}
"""``layer_types`` entries of local attention: the kind, and the config field that gives its span."""


@dataclass(frozen=True, slots=True)
class Gemm:
    """One weight matrix of a layer as a GEMM ``(tokens, k) x (k, n)``."""

    name: str
    k: int
    n: int
    split: str
    """How tensor parallelism cuts it: ``column`` (n / tp), ``row`` (k / tp) or ``replicated`` (whole on every
    rank: multi-head latent attention's down-projections)."""
    experts: int = 0
    """For an expert GEMM: the number of experts holding one of these (0: a dense GEMM)."""
    layers: int | None = None
    """How many of the model's layers hold it (None: every layer). An MoE model whose dense layers differ from
    its sparse ones gives the experts to the sparse layers and the MLP to the dense ones."""

    def local(self, tp: int) -> tuple[int, int]:
        """(k, n) on one of ``tp`` chips."""
        if self.split == "replicated":
            return self.k, self.n
        return (self.k, self.n // tp) if self.split == "column" else (self.k // tp, self.n)

    def cut(self) -> int | None:
        """The width tensor parallelism divides (None: replicated)."""
        return None if self.split == "replicated" else (self.n if self.split == "column" else self.k)


LATENT_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""The config fields multi-head latent attention needs (``q_lora_rank`` may be None: no query latent)."""


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """Multi-head latent attention's widths (DeepSeek-V2 section 2.1; a config's ``*_lora_rank`` and
    ``*_head_dim`` fields)."""

    kv_rank: int
    """``kv_lora_rank``: the compressed key/value latent each token caches."""
    q_rank: int
    """``q_lora_rank``: the query latent (0: queries projected from the hidden state directly)."""
    nope: int
    """``qk_nope_head_dim``: each head's query/key width without rotary embedding."""
    rope: int
    """``qk_rope_head_dim``: the rotary part, one key of it shared by the heads (cached beside the latent)."""
    v: int
    """``v_head_dim``: each head's value width."""

    @property
    def cache(self) -> int:
        """Elements one token caches per layer: the latent and the shared rotary key."""
        return self.kv_rank + self.rope

    @property
    def qk(self) -> int:
        """A head's query/key width at prefill (latents expanded): ``nope + rope``."""
        return self.nope + self.rope

    def gemms(self, hidden: int, heads: int) -> list[Gemm]:
        """The attention's GEMMs, by the module names transformers gives them, cut as Megatron cuts them."""
        q = ([Gemm("q_a_proj", hidden, self.q_rank, _split("q_a_proj")),
              Gemm("q_b_proj", self.q_rank, heads * self.qk, _split("q_b_proj"))] if self.q_rank else
             [Gemm("q_proj", hidden, heads * self.qk, _split("q_proj"))])
        return q + [Gemm("kv_a_proj_with_mqa", hidden, self.cache, _split("kv_a_proj_with_mqa")),
                    Gemm("kv_b_proj", self.kv_rank, heads * (self.nope + self.v), _split("kv_b_proj")),
                    Gemm("o_proj", heads * self.v, hidden, _split("o_proj"))]

    def norms(self) -> int:
        """Parameters of a layer's latent norms (``q_a_layernorm``, ``kv_a_layernorm``)."""
        return self.q_rank + self.kv_rank


def _split(name: str) -> str:
    """How Megatron cuts the projection ``name`` (:mod:`planner.megatron_shard`'s sets)."""
    if name in REPLICATED:
        return "replicated"
    if name in COLUMN:
        return "column"
    if name in ROW:
        return "row"
    raise ValueError(f"model: no tensor-parallel rule names the projection {name!r}")


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
    moe_layers: int = 0
    """Layers with routed experts (all of them, or every :func:`sparse_layers` one)."""
    local_layers: int = 0
    """Layers of local attention: each query sees at most :attr:`span` keys and the KV cache keeps at most
    :attr:`span` tokens of a sequence (:attr:`local`)."""
    span: int = 0
    local: str = ""
    """``sliding`` (the last :attr:`span` tokens) or ``chunked`` (the tokens of the query's own chunk of
    :attr:`span`: Llama 4)."""
    extra_params: int = 0
    """Parameters outside the GEMMs, the embeddings and the head (norms, biases, routers)."""
    latent: LatentAttention | None = None
    """Multi-head latent attention's widths (None: multi-head or grouped-query attention of :attr:`kv_heads` heads of
    :attr:`head_dim`). With it, :attr:`head_dim` is the heads' query/key width at prefill (``nope + rope``) and
    :attr:`kv_heads` the heads' count (the expanded keys are one a head)."""
    unloaded_params: int = 0
    """Parameters the checkpoint stores that a serving run does not load: multi-token prediction modules
    (``num_nextn_predict_layers``; DeepSeek-V3's 14B), counted by trtllm-bench's checkpoint size only."""
    source: str = ""
    blocks: object = field(default=None, compare=False, repr=False)
    """The :class:`~planner.blocks.ModelBlocks` it was read from (its transformers config builds the model
    when the eager engine's ops are traced)."""

    # -- sizes ---------------------------------------------------------------------------

    def holding(self, gemm: Gemm) -> int:
        """How many layers hold ``gemm``."""
        return self.layers if gemm.layers is None else gemm.layers

    def share(self, gemm: Gemm) -> float:
        """The fraction of the layers holding ``gemm`` (what an average layer runs of it)."""
        return self.holding(gemm) / self.layers

    @property
    def gemm_params(self) -> int:
        """Weight elements in every layer's GEMMs (every expert counted)."""
        return sum(self.holding(g) * g.k * g.n * max(1, g.experts) for g in self.gemms)

    @property
    def parameters(self) -> int:
        """Every parameter of the model."""
        embed = self.vocab * self.hidden
        head = 0 if self.tied else self.vocab * self.hidden
        return self.gemm_params + embed + head + self.position_embeddings * self.hidden + self.extra_params

    @property
    def active_parameters(self) -> int:
        """Parameters one token's forward uses (``topk`` of the experts)."""
        gemms = sum(self.holding(g) * g.k * g.n * (self.topk if g.experts else 1) for g in self.gemms)
        return gemms + 2 * self.vocab * self.hidden

    # -- local attention -----------------------------------------------------------------

    def local_keys(self, position: int) -> int:
        """Keys a local layer's query at ``position`` (0-based) attends to, itself included."""
        if self.local == "chunked":
            return position % self.span + 1
        return min(position + 1, self.span)

    def local_pairs(self, queries: int, cached: int) -> float:
        """(query, key) pairs of ``queries`` prompt tokens after ``cached`` ones in a local layer (a full layer's
        are ``queries * (cached + (queries + 1) / 2)``)."""
        return _keys_before(self, cached + queries) - _keys_before(self, cached)

    @property
    def attention(self) -> str:
        """``latent`` (multi-head latent attention) or ``heads`` (multi-head or grouped-query)."""
        return "latent" if self.latent is not None else "heads"

    def kv_layer_elements(self, tp: int = 1) -> int:
        """KV cache elements per token per layer on one of ``tp`` chips: keys and values of its key/value heads, or
        the latent whole (no tensor-parallel rank holds a part of it)."""
        if self.latent is not None:
            return self.latent.cache
        return 2 * self.kv_heads_per_chip(tp) * self.head_dim

    def attention_shapes(self, tp: int, queries: int, keys: int, decode: bool) -> list[tuple[int, ...]]:
        """(query, key, value) of one chip's attention kernel, ``(1, heads, tokens, width)``: ``decode`` against the
        cache (latent attention: the absorbed queries against one head of the latent, keys its whole width, values
        its ``kv_rank`` part), else a prompt's (latent attention: the latents expanded into every head)."""
        heads = self.heads // tp
        lat = self.latent
        if lat is None:
            k = (1, self.kv_heads_per_chip(tp), keys, self.head_dim)
            return [(1, heads, queries, self.head_dim), k, k]
        if decode:
            return [(1, heads, queries, lat.cache), (1, 1, keys, lat.cache), (1, 1, keys, lat.kv_rank)]
        return [(1, heads, queries, lat.qk), (1, heads, keys, lat.qk), (1, heads, keys, lat.v)]

    def kv_elements_per_token(self, context: int | None = None) -> float:
        """KV cache elements per token of one sequence, all layers (layers x :meth:`kv_layer_elements`);
        with ``context``, local layers count only their span's share of that context."""
        per_layer = self.kv_layer_elements()
        full = self.layers - self.local_layers
        if not self.local_layers or context is None or context <= self.span:
            return per_layer * self.layers
        return per_layer * (full + self.local_layers * self.span / context)

    def kv_heads_per_chip(self, tp: int) -> int:
        """Key/value heads one of ``tp`` chips holds (replicated when tp exceeds them)."""
        return max(1, self.kv_heads // tp)

    def padded(self, ranks: int) -> "ModelShape":
        """This shape as NxD Inference shards it over ``ranks`` tensor-parallel ranks (NeuronCores) that do not cut
        its heads (``get_shardable_head_counts`` in neuronx-distributed-inference's ``modules/attention/gqa.py``):
        the query heads padded up to a multiple of ``ranks``, their projections held and computed like the others;
        multi-head attention's key/value heads as many as the padded query heads, and grouped ones that neither
        divide nor are divided by ``ranks`` as many too (its ``GQA.CONVERT_TO_MHA``). Grouped key/value heads
        ``ranks`` is a multiple of keep their count: NxD replicates them to every rank
        (``GQA.REPLICATE_TO_TP_DEGREE``), which :meth:`kv_heads_per_chip` approximates per chip, as for every
        model. Itself where ``ranks`` cuts the heads, and for latent attention (no key/value heads to shard)."""
        if self.latent is not None or self.cuts_heads(ranks):
            return self
        heads = -(-self.heads // ranks) * ranks
        if self.kv_heads == self.heads or not self._cuts_kv_heads(ranks):
            kv = heads
        else:
            kv = self.kv_heads
        hd = self.head_dim
        gemms = tuple(replace(g, n=(heads + 2 * kv) * hd) if g.name == "qkv" else
                      replace(g, k=heads * hd) if g.name == "o" else g for g in self.gemms)
        return replace(self, heads=heads, kv_heads=kv, gemms=gemms)

    def cuts_heads(self, tp: int) -> bool:
        """Tensor parallelism ``tp`` divides the attention heads, and it and the key/value heads divide one
        another."""
        return self.heads % tp == 0 and self._cuts_kv_heads(tp)

    def _cuts_kv_heads(self, tp: int) -> bool:
        return not (self.kv_heads % tp and tp % self.kv_heads)

    def check_tp(self, tp: int) -> None:
        """ValueError naming tp when it cannot cut the heads or the GEMMs."""
        padding = (
            "; an engine that pads heads as NxD Inference does takes it (Engine(head_padding=True); hybrid serving "
            "--head-padding)")
        if self.heads % tp:
            raise ValueError(f"tp: tensor parallelism {tp} does not divide the {self.heads} attention heads of "
                             f"{self.name}; accepted: {', '.join(map(str, self.tp_choices()))}{padding}")
        if not self._cuts_kv_heads(tp):
            raise ValueError(f"tp: tensor parallelism {tp} and the {self.kv_heads} key/value heads of {self.name} "
                             f"do not divide one another; accepted: {', '.join(map(str, self.tp_choices()))}"
                             f"{padding}")
        for g in self.gemms:
            cut = g.cut()
            if cut is not None and cut % tp:
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
        if not self.cuts_heads(tp):
            raise ValueError
        if any((cut := g.cut()) is not None and cut % tp for g in self.gemms):
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


def _keys_before(shape: ModelShape, n: int) -> float:
    """Keys the queries at positions 0 .. n-1 of a local layer attend to, summed."""
    span = shape.span
    if shape.local == "chunked":
        whole, rest = divmod(n, span)
        return whole * span * (span + 1) / 2 + rest * (rest + 1) / 2
    if n <= span:
        return n * (n + 1) / 2
    return span * (span + 1) / 2 + (n - span) * span


def sparse_layers(summary, layers: int) -> list[bool]:
    """Which of ``layers`` layers of an MoE config route to experts, by its fields: ``moe_layers`` (a list of
    indices) or ``interleave_moe_layer_step`` (every k-th layer: Llama 4), ``decoder_sparse_step`` and
    ``mlp_only_layers`` (Qwen-MoE), ``first_k_dense_replace`` and ``moe_layer_freq`` (DeepSeek); else every
    layer."""
    listed = _get(summary, "moe_layers")
    if isinstance(listed, (list, tuple)):
        chosen = set(int(i) for i in listed)
        return [i in chosen for i in range(layers)]
    step = _first(summary, ("interleave_moe_layer_step", "decoder_sparse_step"))
    dense = set(int(i) for i in (_get(summary, "mlp_only_layers") or ()))
    first = int(_get(summary, "first_k_dense_replace", 0) or 0)
    freq = int(_get(summary, "moe_layer_freq", 1) or 1)
    step = int(step or 1)
    return [(i + 1) % step == 0 and i not in dense and i >= first and i % freq == 0
            for i in range(layers)]


def local_layers(summary, layers: int) -> tuple[str, int, int]:
    """(kind, span, how many) of a config's local-attention layers (``("", 0, 0)`` when none), by its fields:
    ``layer_types`` (``sliding_attention``: ``sliding_window``; ``chunked_attention``: ``attention_chunk_size``);
    without them, a ``sliding_window`` on every layer (Mistral; Qwen2 only with ``use_sliding_window``), or an
    ``attention_chunk_size`` on the layers with rotary embeddings (Llama 4: ``no_rope_layers``' ones, or every
    layer but each ``no_rope_layer_interval``-th)."""
    types = _get(summary, "layer_types")
    if not isinstance(types, (list, tuple)):
        chunk = _get(summary, "attention_chunk_size")
        window = _get(summary, "sliding_window")
        rope = _get(summary, "no_rope_layers")
        interval = _get(summary, "no_rope_layer_interval")
        if chunk and (rope or interval):
            rope = list(rope) if rope else [int((i + 1) % int(interval) != 0) for i in range(layers)]
            types = ["chunked_attention" if r else "full_attention" for r in rope]
        elif window and _get(summary, "use_sliding_window", True):
            types = ["sliding_attention"] * layers
        else:
            return "", 0, 0
    found = {t for t in types[:layers] if t in _LOCAL_TYPES}
    if not found:
        return "", 0, 0
    if len(found) > 1:
        raise ValueError(f"model: layers of {' and '.join(sorted(found))} in one model are not modelled; give a "
                         f"model with one kind of local attention")
    kind, field_name = _LOCAL_TYPES[found.pop()]
    span = int(_get(summary, field_name, 0) or 0)
    count = sum(1 for t in types[:layers] if _LOCAL_TYPES.get(t, ("",))[0] == kind)
    return (kind, span, count) if span else ("", 0, 0)


def model_shape(model) -> ModelShape:
    """The :class:`ModelShape` of a preset name, a transformers model type, a config or a meta-device module."""
    blocks = model_blocks(model)
    summary = blocks.arch if getattr(blocks, "arch", None) is not None else blocks.config
    model_type = _get(summary, "model_type") or _CONFIG_TYPES.get(getattr(blocks, "config_class", "") or "", "")
    h, layers = blocks.hidden_size, blocks.num_layers
    heads, kv, hd = blocks.heads, blocks.kv_heads, blocks.head_dim
    latent = latent_attention(summary, blocks.name)
    extra = 2 * h * layers + h  # two norms per layer and the final norm
    if latent is None:
        gemms = [Gemm("qkv", h, (heads + 2 * kv) * hd, "column"), Gemm("o", heads * hd, h, "row")]
    else:
        gemms = latent.gemms(h, heads)
        kv, hd = heads, latent.qk
        extra += layers * latent.norms()
    experts = blocks.experts
    topk = blocks.topk
    gated = model_type not in _NON_GATED
    sparse = sum(sparse_layers(summary, layers)) if experts else 0
    if sparse:
        width = int(_first(summary, ("moe_intermediate_size", "intermediate_size")))
        gemms += [Gemm("experts.gate_up", h, 2 * width, "column", experts, sparse),
                  Gemm("experts.down", width, h, "row", experts, sparse)]
        extra += sparse * h * experts  # the router
        shared = _get(summary, "shared_expert_intermediate_size") or (
            _get(summary, "n_shared_experts", 0) * width if _get(summary, "n_shared_experts") else 0)
        implicit = _IMPLICIT_SHARED.get(model_type)
        if _get(summary, "shared_expert_intermediate_size"):
            extra += sparse * h  # Qwen-MoE's shared expert gate (DeepSeek's shared experts have none)
        elif not shared and implicit:
            shared = _get(summary, implicit)
        if shared:
            gemms += [Gemm("shared.gate_up", h, 2 * int(shared), "column", layers=sparse),
                      Gemm("shared.down", int(shared), h, "row", layers=sparse)]
    if layers - sparse:
        names = ("intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_dim")
        width = int(_first(summary, names) or 4 * h)
        dense = None if not sparse else layers - sparse
        if gated:
            gemms += [Gemm("gate_up", h, 2 * width, "column", layers=dense), Gemm("down", width, h, "row",
                                                                                  layers=dense)]
        else:
            gemms += [Gemm("up", h, width, "column", layers=dense), Gemm("down", width, h, "row", layers=dense)]
    if not gated:
        # GPT-2-style blocks carry biases on every projection and LayerNorms with a bias.
        extra += layers * (sum(g.n for g in gemms) + 2 * h) + h
    elif latent is None and (_get(summary, "attention_bias") or _get(summary, "qkv_bias")
                             or model_type in ("qwen2", "qwen2_moe")):
        extra += layers * (heads + 2 * kv) * hd
    positions = int(_get(summary, "n_positions", 0) or 0) if model_type in ("gpt2", "gpt_bigcode") else 0
    local, span, count = local_layers(summary, layers)
    return ModelShape(name=blocks.name, layers=layers, hidden=h, heads=heads, kv_heads=kv, head_dim=hd,
                      vocab=blocks.vocab, gemms=tuple(gemms), experts=experts if sparse else 0,
                      topk=topk if sparse else 0, tied=blocks.tied, position_embeddings=positions, moe_layers=sparse,
                      local_layers=count, span=span, local=local, extra_params=extra, latent=latent,
                      unloaded_params=_prediction_params(summary, gemms, h, blocks.vocab, sparse, experts),
                      source=getattr(blocks, "source", ""), blocks=blocks)


def latent_attention(summary, name: str) -> LatentAttention | None:
    """A config's :class:`LatentAttention` (None without ``kv_lora_rank``); ValueError naming the field a latent
    config lacks or gives as other than a positive integer."""
    if _get(summary, "kv_lora_rank") is None:
        return None
    dims = {}
    for field_name in LATENT_FIELDS + ("q_lora_rank",):
        value = _get(summary, field_name)
        if field_name == "q_lora_rank" and value is None:
            value = 0
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"model: {name} uses multi-head latent attention (kv_lora_rank) and needs config."
                             f"{field_name} as a positive integer, got {value!r}")
        dims[field_name] = int(value)
    return LatentAttention(kv_rank=dims["kv_lora_rank"], q_rank=dims["q_lora_rank"], nope=dims["qk_nope_head_dim"],
                           rope=dims["qk_rope_head_dim"], v=dims["v_head_dim"])


def _prediction_params(summary, gemms: list[Gemm], hidden: int, vocab: int, sparse: int, experts: int) -> int:
    """Parameters of the checkpoint's multi-token prediction modules (``num_nextn_predict_layers``: DeepSeek-V3
    section 2.2; each a layer as the model's last, a projection of the two joined hidden states, three norms, and
    the copies of the embedding and the head the checkpoint stores with it)."""
    depth = int(_get(summary, "num_nextn_predict_layers", 0) or 0)
    if not depth:
        return 0
    # the model's last layer: a sparse one's attention, experts and shared expert, else every GEMM
    last = [g for g in gemms if g.layers is None or g.experts or g.name.startswith("shared.")] if sparse else gemms
    weights = sum(g.k * g.n * max(1, g.experts) for g in last) + (hidden * experts if sparse else 0)
    return depth * (weights + 2 * hidden * hidden + 5 * hidden + 2 * vocab * hidden)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = ["Gemm", "LatentAttention", "ModelShape", "ceil_div", "latent_attention", "local_layers", "model_shape",
           "sparse_layers"]

