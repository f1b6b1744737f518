"""The blocks of a decoder language model (Hugging Face layout) built on the meta device.

Blocks: ``embedding`` (token embedding, positional terms), one block per
decoder layer, ``head`` (final norm, LM head, cross-entropy loss). Layers with
the same structure share one trace. A tensor-parallel shard is traced as the
layer a Megatron rank runs: the whole layer cut by :func:`planner.megatron_shard.shard_layer`
(column/row projections, whatever the family writes them as: Linear, Conv1D, fused QKV,
3-D expert tensors; key/value heads replicated when fewer than tp), the vocabulary divided
by tp. MoE experts are sharded over ep with balanced routing assumed: each chip
runs ``experts / ep`` experts on the token-expert pairs of its own tokens.

Only configs and module classes come from transformers; nothing is downloaded
and no weight is materialised.
"""

from __future__ import annotations

import copy
import inspect
import json
import numbers
from contextlib import contextmanager
from typing import Any, Hashable

from planner.blocks import ModelBlocks
from planner.profile import BlockProfile, Collective, Shard, trace_profile

_LAYER_LISTS = ("layers", "h", "blocks", "layer")
_FINAL_NORMS = ("norm", "ln_f", "final_layernorm", "final_norm")
_PER_LAYER_HINTS = ("layer_types", "mlp_only_layers", "decoder_sparse_step", "first_k_dense_replace",
                    "moe_layer_freq", "sliding_window_pattern", "no_rope_layers", "moe_layers",
                    "interleave_moe_layer_step", "no_rope_layer_interval")
_EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOPK = ("num_experts_per_tok", "moe_topk", "top_k")
_STATE_SPACE = ("mamba_d_state", "ssm_state_size", "state_size")
"""Config fields of a model with state-space (Mamba) layers (Falcon-H1, Jamba, Bamba, Zamba, Nemotron-H, Mamba)."""
_WIDTHS = ("intermediate_size", "intermediate_size_mlp", "moe_intermediate_size", "shared_expert_intermediate_size",
           "ffn_hidden_size",
           "linear_num_key_heads", "linear_num_value_heads")


def _rms_norm_class():
    import torch

    class FusedRMSNorm(torch.nn.Module):
        """An RMSNorm traced as ``F.rms_norm`` (which ``trace_ops`` lowers to the fused kernel GPUs run)."""

        def __init__(self, weight, eps: float) -> None:
            super().__init__()
            self.weight = weight
            self.eps = eps

        def forward(self, x):
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    return FusedRMSNorm


def fuse_norms(module):
    """``module`` with its RMSNorm submodules traced as the fused kernel (in place; returns it).

    Eager transformers RMSNorms upcast to float32 and run five elementwise kernels, keeping float32
    copies for backward; training at scale runs one fused kernel (Transformer Engine, apex,
    torch.compile), which is what a what-if models.
    """
    cls = _rms_norm_class()
    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            eps = getattr(child, "variance_epsilon", None) or getattr(child, "eps", None)
            if type(child).__name__.endswith("RMSNorm") and getattr(child, "weight", None) is not None and eps:
                setattr(parent, child_name, cls(child.weight, float(eps)))
    return module



def _rotary_per_layer_type(rotary) -> bool:
    """Whether a model's rotary module keeps one table per attention type (Gemma 3: local and global bases),
    and so is called with the layer's type."""
    return rotary is not None and "layer_type" in inspect.signature(rotary.forward).parameters


class _Arch:
    """Attribute access to a preset's architecture numbers (None for anything not given)."""

    def __init__(self, arch: dict) -> None:
        self.__dict__.update(arch)

    def __getattr__(self, name: str):
        return None


_LAYER_SHAPE = ("num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size") + _WIDTHS
"""Config fields a what-if takes as one value for every layer (its shapes, the KV cache, the tensor-parallel cut)."""


def _per_layer_configs(config: Any) -> Any:
    """transformers' per-layer view of a heterogeneous config, or () (also where the view cannot be built: a config
    without ``num_hidden_layers``, which the caller refuses by name)."""
    try:
        layers = getattr(config, "per_layer_config", None)
        return layers if layers is not None and len(layers) else ()
    except Exception:
        return ()


def _varying_layer_shapes(config: Any) -> list[str]:
    """The layer-shape fields (:data:`_LAYER_SHAPE`) ``config`` gives per layer with different values, each as
    ``field (values)``: transformers' heterogeneous configs (``per_layer_config``: Gemma 4's head dims, dots3's
    heads) and per-layer lists (Gemma 3n's MLP widths)."""
    varying = []
    for field in _LAYER_SHAPE:
        try:
            value = getattr(config, field, None)
        except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError: the value is per layer
            values = sorted({getattr(layer, field, None) for layer in _per_layer_configs(config)} - {None})
            if len(values) > 1:
                varying.append(f"{field} {'/'.join(str(v) for v in values)}")
            continue
        if isinstance(value, (list, tuple)):  # a list a layer, which the family's modules index
            values = sorted({v for v in value if v is not None})
            varying.append(f"{field} a list of {len(value)} ({'/'.join(str(v) for v in values)})")
    return varying


def _first_attr(obj: Any, names: tuple[str, ...], default: Any = None) -> Any:
    for n in names:
        value = getattr(obj, n, None)
        if value is not None:
            return value
    return default


class DecoderBlocks(ModelBlocks):
    """Embedding, decoder layers and head of a causal LM, profiled on the meta device.

    ``config``: a transformers ``PretrainedConfig`` of a causal LM; ``model``: an
    already-built module of that config on the meta device (its own modules are
    traced where no shard is asked for); ``name``: display name.
    """

    def __init__(self, config: Any = None, *, name: str | None = None, model: Any = None, dtype: str = "bfloat16",
                 source: str = "", arch: dict | None = None, config_class: str | None = None,
                 kernels: str = "fused") -> None:
        super().__init__()
        from planner.kernels import check_kernels

        self.kernels = check_kernels(kernels)
        """``fused``: the layers traced as a production stack runs them; ``eager``: as written, as a slot runs
        them (:mod:`planner.kernels`)."""
        if config is None:
            # A preset: its architecture as plain numbers; the transformers config is built only to trace
            # (a what-if whose profiles are cached on disk never imports transformers).
            if arch is None or config_class is None:
                raise ValueError("DecoderBlocks: give a transformers config, or arch and config_class")
            self._config = None
            config = _Arch(arch)
        else:
            self._config = self._prepared(config, self.kernels)
            config = self._config
        self.arch = dict(arch) if arch is not None else None
        self.config_class = config_class
        self.name = name or getattr(config, "model_type", "model")
        self.source = source
        self.dtype = dtype
        state = [f for f in _STATE_SPACE if getattr(config, f, None) is not None]
        if state:
            raise ValueError(f"model: {self.name} has state-space (Mamba) layers (config.{state[0]}); a what-if "
                             f"prices attention decoders: their selective scan would be traced as transformers' "
                             f"reference PyTorch loop, not the fused kernel a GPU runs, and no tensor-parallel cut "
                             f"of a Mamba mixer is modelled")
        for field in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            value = getattr(config, field, None)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"model: config.{field} must be a positive integer, got {value!r}")
        self.num_layers = int(config.num_hidden_layers)
        self.hidden_size = int(config.hidden_size)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or self.hidden_size // self.heads)
        self.vocab = int(config.vocab_size)
        self.experts = int(_first_attr(config, _EXPERT_COUNTS, 0) or 0)
        self.topk = int(_first_attr(config, _TOPK, 0) or 0) if self.experts else 0
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        if self.experts and dtype == "float32" and self.kernels == "fused":
            raise ValueError(f"precision: {self.name}'s experts in float32 are priced as written (kernels='eager'); "
                             f"the fused stack's grouped GEMMs run in bfloat16 only")
        self.names = ("embedding",) + tuple(f"layers.{i}" for i in range(self.num_layers)) + ("head",)
        self.layers = range(1, self.num_layers + 1)
        self._model = model
        self._small = None
        self._whole_rotary = None
        self._layer_sigs: list[Hashable] | None = None
        self._experts_as_written = False
        self._summary = config

    @staticmethod
    def _prepared(config, kernels: str = "fused"):
        # A multimodal config (Gemma 3, Llama 4, Qwen2-VL) holds its language model's: that decoder is cut.
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        config = copy.deepcopy(text if text is not None else config)
        varying = _varying_layer_shapes(config)
        if varying:
            raise ValueError(f"model: {getattr(config, 'model_type', 'the model')} gives its layers' shapes per layer "
                             f"({'; '.join(varying)}); a what-if prices decoder layers of one shape (heads, head dim "
                             f"and MLP width shared by every layer, as its KV cache and tensor-parallel cut assume)")
        if _per_layer_configs(config):
            # a heterogeneous config whose layers agree on every shape field: its global values are the layers'
            config.allow_global_per_layer_attribute_access = True
        config._attn_implementation = "sdpa"
        if hasattr(config, "head_dim") and config.head_dim is None:
            # A default config that leaves the head size to be derived (HunYuan) while its attention reads it as
            # given: the derivation every family uses.
            config.head_dim = config.hidden_size // config.num_attention_heads
        if _first_attr(config, _EXPERT_COUNTS) and kernels == "fused":
            # The grouped-GEMM expert path traces on meta. Eager keeps the library's own choice, as a slot runs
            # it: its loop over the experts is traced with balanced offsets (devices.cost.trace_ops).
            config._experts_implementation = "grouped_mm"
        return config

    @property
    def config(self):
        """The transformers config (built from the preset's numbers on first use)."""
        if self._config is None:
            import transformers

            self._config = self._prepared(getattr(transformers, self.config_class)(**self.arch), self.kernels)
        return self._config

    def cache_identity(self) -> str | None:
        """What the profiles depend on besides the shard (None: not cacheable, e.g. a user's module)."""
        if self._model is not None:
            return None
        # the fused traces keep the keys they had before kernels= existed
        extra = {"kernels": self.kernels} if self.kernels != "fused" else {}
        if self.arch is not None:
            return json.dumps({"class": self.config_class, "arch": self.arch, "dtype": self.dtype, **extra},
                              sort_keys=True)
        return json.dumps({"class": type(self.config).__name__, "config": self.config.to_json_string(),
                           "dtype": self.dtype, **extra}, sort_keys=True)

    # -- structure -------------------------------------------------------------

    def _torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def _skeleton(self):
        """A one-layer model of the config on meta: the module classes to rebuild shards from."""
        if self._small is None:
            self._small = self._build(self.config, layers=1)
        return self._small

    def _build(self, config, layers: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        cfg = copy.deepcopy(config)
        if layers is not None:
            cfg.num_hidden_layers = layers
            value = getattr(cfg, "layer_types", None)
            if isinstance(value, (list, tuple)) and len(value) >= layers:
                try:
                    cfg.layer_types = list(value[:layers])
                except AttributeError:
                    pass  # derived from num_hidden_layers (Falcon-H1's layers_block_type): follows it
        with torch.device("meta"):
            while True:
                try:
                    return AutoModelForCausalLM.from_config(cfg, dtype=self._torch_dtype())
                except ValueError as e:
                    if "scaled_dot_product_attention" in str(e) and cfg._attn_implementation != "eager":
                        # A model transformers runs only with its own attention (Gemma 2's soft-capping): traced so.
                        cfg._attn_implementation = "eager"
                    elif "experts implementation" in str(e) and getattr(cfg, "_experts_implementation", None):
                        # Experts the library runs only as written (Llama 4's batched bmm over every expert).
                        cfg._experts_implementation = None
                        self._experts_as_written = True
                    else:
                        raise

    @staticmethod
    def parts(model) -> dict[str, Any]:
        """The embedding, layer list, final norm, rotary and head modules of a causal LM."""
        base = getattr(model, "base_model", model)
        for inner in ("decoder", "model"):
            # OPT: the decoder stack sits one level down (model.decoder.layers); Llama 4's causal LM names its
            # base model prefix after the multimodal model's (language_model) and holds the stack as model
            if not any(hasattr(base, n) for n in _LAYER_LISTS) and hasattr(getattr(base, inner, None), "layers"):
                base = getattr(base, inner)
        layers = next((getattr(base, n) for n in _LAYER_LISTS if hasattr(base, n)), None)
        if layers is None:
            raise ValueError(f"model: {type(model).__name__} has no decoder layer list "
                             f"(looked for {', '.join(_LAYER_LISTS)} on {type(base).__name__})")
        return {
            "embed": model.get_input_embeddings(),
            "layers": layers,
            "norm": next((getattr(base, n) for n in _FINAL_NORMS if getattr(base, n, None) is not None), None),
            "rotary": getattr(base, "rotary_emb", None),
            "positions": getattr(base, "wpe", None) or getattr(base, "embed_positions", None),
            "head": model.get_output_embeddings(),
            "base": base,
        }

    def signature(self, index: int) -> Hashable:
        if index == 0:
            return "embedding"
        if index == len(self.names) - 1:
            return "head"
        return ("layer", self._layer_signatures()[index - 1])

    def _layer_signatures(self) -> list[Hashable]:
        if self._layer_sigs is None:
            if self._model is not None:
                layers = self.parts(self._model)["layers"]
                self._layer_sigs = [self._module_signature(m) for m in layers]
            elif any(getattr(self._summary, h, None) is not None for h in _PER_LAYER_HINTS):
                # Layers may differ (sliding/full attention, dense/MoE MLPs): build them all once.
                layers = self.parts(self._build(self.config))["layers"]
                self._layer_sigs = [self._module_signature(m) for m in layers]
            else:
                self._layer_sigs = [0] * self.num_layers
            firsts: dict[Hashable, int] = {}
            self._layer_sigs = [firsts.setdefault(s, i) for i, s in enumerate(self._layer_sigs)]
        return self._layer_sigs

    @staticmethod
    def _module_signature(module) -> Hashable:
        shapes = tuple((n, tuple(p.shape)) for n, p in module.named_parameters())
        attn = getattr(getattr(module, "self_attn", None), "sliding_window", None)
        return (type(module).__name__, shapes, attn, getattr(module, "attention_type", None))

    # -- sharding --------------------------------------------------------------

    def check_shard(self, shard: Shard) -> None:
        tp, ep = shard.tp, shard.ep
        if self.heads % tp:
            raise ValueError(f"tp: tensor parallelism {tp} does not divide the {self.heads} attention heads of "
                             f"{self.name}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(f"tp: tensor parallelism {tp} and the {self.kv_heads} key/value heads of {self.name} "
                             f"do not divide one another")
        for width in _WIDTHS:
            value = getattr(self._summary, width, None)
            if value and value % tp:
                raise ValueError(f"tp: tensor parallelism {tp} does not divide {width}={value} of {self.name}")
        if ep > 1 and not self.experts:
            raise ValueError(f"ep: expert parallelism {ep} needs an MoE model; {self.name} has no experts")
        if self.experts and self.experts % ep:
            raise ValueError(f"ep: expert parallelism {ep} does not divide the {self.experts} experts of {self.name}")

    def _layer_module(self, index: int, tp: int):
        """Layer ``index`` as tensor rank 0 of ``tp`` holds it: the whole layer (the user's module, or one
        built from the config) cut by Megatron's rules (:func:`planner.megatron_shard.shard_layer`)."""
        from planner.megatron_shard import shard_layer

        if self._model is not None:
            layer = self.parts(self._model)["layers"][index - 1]
        else:
            model = self._build(self.config, layers=index if self._layer_has_type(index) else 1)
            layer = self.parts(model)["layers"][-1]
        layer = shard_layer(copy.deepcopy(layer), tp, heads=self.heads, kv_heads=self.kv_heads,
                            head_dim=self.head_dim)
        return fuse_norms(layer) if self.kernels == "fused" else layer

    @property
    def _eager(self) -> bool:
        return self.kernels == "eager"

    def _trace_options(self, params) -> dict[str, Any]:
        """How :func:`trace_profile` traces a block under :attr:`kernels`. Eager: composites expanded as a slot
        expands them, the live peak measured, and gradients accumulated into existing buffers (as DDP's buckets
        and a plan's runner do: each microbatch's backward adds into every ``.grad``)."""
        if not self._eager:
            return {}
        import torch

        for p in params:
            p.grad = torch.zeros_like(p)
        return {"composites_of": "PrivateUse1", "workspace": True}

    def _causal_mask(self, shard: Shard):
        """Eager: the boolean causal mask a traced (exported) decoder materialises and hands to every layer's
        attention (a fused stack passes none and runs causal FlashAttention)."""
        import torch

        tokens = shard.seq_len // shard.cp
        return torch.empty(shard.microbatch, 1, tokens, tokens, dtype=torch.bool, device="meta")

    def _layer_has_type(self, index: int) -> bool:
        return self._layer_signatures()[index - 1] != 0

    # -- tracing ---------------------------------------------------------------

    def _position_inputs(self, shard: Shard, index: int = 1):
        """The hidden state, positions and rotary (cos, sin) layer ``index`` is called with."""
        import torch

        tokens = shard.seq_len // shard.cp
        skeleton = self.parts(self._skeleton())
        hidden = torch.empty(shard.microbatch, tokens, self.hidden_size, dtype=self._torch_dtype(), device="meta")
        positions = torch.zeros(shard.microbatch, tokens, dtype=torch.long, device="meta")
        cos_sin = None
        if skeleton["rotary"] is not None:
            table = self._rotary(skeleton["rotary"], hidden, positions, index)
            # (cos, sin) in the activations' dtype; Llama 4's one complex table (freqs_cis) as the model hands it
            cos_sin = tuple(t.to(hidden.dtype) for t in table) if isinstance(table, (tuple, list)) else table
        return hidden, positions, cos_sin

    def _alibi(self, shard: Shard, hidden):
        """The ALiBi bias a layer of rank 0 of ``shard.tp`` is handed (its heads' share; None where the config
        turns ALiBi off, as Falcon's default does)."""
        import torch

        if not getattr(self.config, "alibi", True):
            return None
        tokens = hidden.shape[1]
        return torch.zeros(shard.microbatch * max(1, self.heads // shard.tp), 1, tokens, dtype=hidden.dtype,
                           device="meta")

    def _rotary(self, rotary, hidden, positions, index: int = 1):
        """Call the model's rotary module as its decoder does: one that keeps a table per attention type
        (Gemma 3: local and global bases) is asked for layer ``index``'s type."""
        if not _rotary_per_layer_type(rotary):
            return rotary(hidden, positions)
        types = getattr(self.config, "layer_types", None) or ()
        layer_type = types[index - 1] if 0 < index <= len(types) else (types[0] if types else None)
        if self._whole_rotary is None:
            # The skeleton's one layer knows one attention type: the table of every type comes from the whole
            # config, as the model builds it.
            import torch

            with torch.device("meta"):
                self._whole_rotary = type(rotary)(config=self.config)
        return self._whole_rotary(hidden, positions, layer_type)

    def _trace(self, index: int, shard: Shard) -> BlockProfile:
        if self._eager:
            with _as_exported():
                return self._trace_block(index, shard)
        return self._trace_block(index, shard)

    def _trace_block(self, index: int, shard: Shard) -> BlockProfile:
        if index == 0:
            return self._trace_embedding(shard)
        if index == len(self.names) - 1:
            return self._trace_head(shard)
        return self._trace_layer(index, shard)

    def _act_bytes(self, shard: Shard) -> int:
        return shard.tokens * self.hidden_size * self._torch_dtype().itemsize

    def _trace_layer(self, index: int, shard: Shard) -> BlockProfile:
        layer = self._layer_module(index, shard.tp)
        hidden, positions, cos_sin = self._position_inputs(shard, index)
        accepts = inspect.signature(layer.forward).parameters
        kwargs: dict[str, Any] = {}
        if "position_embeddings" in accepts and cos_sin is not None:
            kwargs["position_embeddings"] = cos_sin
        if "position_ids" in accepts:
            kwargs["position_ids"] = positions
        if "alibi" in accepts:  # BLOOM, Falcon-RW: the linear biases the model builds once for every layer
            kwargs["alibi"] = self._alibi(shard, hidden)
        if "attention_mask" in accepts:
            # a linear-attention layer (Qwen3-Next's gated delta net) is recurrent: its decoder hands it only a
            # padding mask, None for unpadded rows
            types = getattr(self.config, "layer_types", None) or ()
            recurrent = index <= len(types) and types[index - 1] == "linear_attention"
            kwargs["attention_mask"] = self._causal_mask(shard) if self._eager and not recurrent else None

        def block(x):
            out = layer(x, **kwargs)
            return out[0] if isinstance(out, (tuple, list)) else out

        experts = [p for n, p in layer.named_parameters() if "experts" in n.split(".")]
        # an MoE model's dense layers (Llama 4's every other, Qwen-MoE's mlp_only_layers, DeepSeek's first ones)
        # route nothing: no expert groups, no all-to-all
        sparse = bool(experts)
        notes = []
        if self.kv_heads < shard.tp:
            notes.append(f"{self.kv_heads} key/value heads replicated over tp={shard.tp}")
        groups = self.experts // shard.ep if sparse else 0
        if sparse:
            notes.append(f"MoE: {self.experts} experts, top-{self.topk}, balanced routing assumed; "
                         f"{groups} experts per chip (ep={shard.ep})")
        if self._experts_as_written and self.kernels == "fused" and sparse:
            notes.append(f"{type(self.config).__name__}'s experts refuse transformers' grouped_mm: traced as "
                         f"the model writes them")
        params = list(layer.parameters())
        profile = trace_profile(
            self.names[index], block, (hidden,), shard=shard, params=params, expert_params=experts,
            hidden_size=self.hidden_size, collectives=self._layer_collectives(shard, sparse),
            model_flops_scale=shard.tp * shard.cp, note="; ".join(notes), **self._trace_options(params))
        from planner import rewrite

        if self._experts_as_written and self.topk and sparse:
            rows = hidden.shape[0] * hidden.shape[1]
            shapes = {tuple(p.shape[1:]) for p in experts if p.dim() == 3}
            profile = rewrite.dense_experts_as_routed(profile, self.experts, self.topk, rows, shapes)
        profile = rewrite.grouped_gemms(profile, groups, self.experts)
        if shard.cp > 1:
            profile = rewrite.context_parallel_attention(profile, shard)
        if shard.ep > 1:
            profile = rewrite.shard_experts(profile, shard.ep)
        return profile

    def _layer_collectives(self, shard: Shard, sparse: bool) -> tuple[Collective, ...]:
        """The collectives of a layer cut as ``shard``; ``sparse``: it routes tokens to experts."""
        act = self._act_bytes(shard)
        out: list[Collective] = []
        if shard.tp > 1:
            if shard.sequence_parallel:
                out += [Collective("all_gather", "tp", act, "forward", 2, "column_gemm"),
                        Collective("reduce_scatter", "tp", act, "forward", 2, "row_gemm"),
                        # backward: the gathered input again for the weight gradient, the gradient of the
                        # row-parallel output, and the reduce-scatter of the input gradient
                        Collective("all_gather", "tp", act, "backward", 4, "column_gemm"),
                        Collective("reduce_scatter", "tp", act, "backward", 2, "column_gemm")]
            else:
                out += [Collective("all_reduce", "tp", act, "forward", 2, "row_gemm"),
                        Collective("all_reduce", "tp", act, "backward", 2, "column_gemm")]
        if shard.cp > 1:
            kv_local = max(1, self.kv_heads // shard.tp)
            kv = 2 * shard.tokens * kv_local * self.head_dim * self._torch_dtype().itemsize
            out += [Collective("send_recv", "cp", kv, "forward", shard.cp - 1, "attention"),
                    Collective("send_recv", "cp", 2 * kv, "backward", shard.cp - 1, "attention")]
        if sparse and shard.ep > 1:
            routed = shard.tokens * self.topk * self.hidden_size * self._torch_dtype().itemsize // (
                shard.tp if shard.sequence_parallel else 1)
            out += [Collective("all_to_all", "ep", routed, "forward", 2, "none"),
                    Collective("all_to_all", "ep", routed, "backward", 2, "none")]
        return tuple(out)

    def _vocab_collectives(self, shard: Shard, head: bool) -> tuple[Collective, ...]:
        if shard.tp == 1:
            return ()
        act = self._act_bytes(shard)
        stats = shard.tokens * 4 * 3  # cross-entropy over a split vocabulary: max, sum-exp, target logit
        if head:
            gather = [Collective("all_gather", "tp", act, "forward", 1, "column_gemm"),
                      Collective("all_gather", "tp", act, "backward", 1, "column_gemm"),
                      Collective("reduce_scatter", "tp", act, "backward", 1, "column_gemm")] \
                if shard.sequence_parallel else [Collective("all_reduce", "tp", act, "backward", 1, "column_gemm")]
            return tuple(gather) + (Collective("all_reduce", "tp", stats, "forward", 1, "none"),)
        if shard.sequence_parallel:
            return (Collective("reduce_scatter", "tp", act, "forward", 1, "none"),
                    Collective("all_gather", "tp", act, "backward", 1, "none"))
        return (Collective("all_reduce", "tp", act, "forward", 1, "none"),)

    def _trace_embedding(self, shard: Shard) -> BlockProfile:
        import torch

        skeleton = self.parts(self._skeleton())
        tokens = shard.seq_len // shard.cp
        with torch.device("meta"):
            embed = torch.nn.Embedding(self.vocab // shard.tp, self.hidden_size, dtype=self._torch_dtype())
        rotary, positions_module = skeleton["rotary"], skeleton["positions"]
        ids = torch.zeros(shard.microbatch, tokens, dtype=torch.long, device="meta")
        params = list(embed.parameters()) + (list(positions_module.parameters()) if positions_module else [])

        eager = self._eager
        by_mask = positions_module is not None and \
            "attention_mask" in inspect.signature(positions_module.forward).parameters
        # The decoder computes the rotary table once per attention type its layers use (once for most models).
        types = getattr(self.config, "layer_types", None) if _rotary_per_layer_type(rotary) else None
        rotary_layers = [list(types).index(t) + 1 for t in dict.fromkeys(types)] if types else [1]

        def block(x):
            h = embed(x)
            if positions_module is not None:
                if by_mask:  # OPT's learned positions count the attention mask's ones
                    h = h + positions_module(torch.ones(x.shape, dtype=torch.long, device=x.device))
                else:
                    h = h + positions_module(torch.zeros(x.shape[-1], dtype=torch.long, device=x.device))
            if eager:  # as the model's forward: positions from an arange, the mask materialised (see below)
                positions = (torch.arange(x.shape[-1], device=x.device) + 0).unsqueeze(0)
                if rotary is not None:
                    for index in rotary_layers:
                        self._rotary(rotary, h, positions, index)
                _materialise_causal_mask(self.config, h, positions)
            elif rotary is not None:
                for index in rotary_layers:
                    self._rotary(rotary, h, torch.zeros(x.shape, dtype=torch.long, device=x.device), index)
            return h

        return trace_profile("embedding", block, (ids,), shard=shard, params=params, hidden_size=self.hidden_size,
                             collectives=self._vocab_collectives(shard, head=False), grad_inputs=False,
                             model_flops_scale=shard.tp * shard.cp, note=f"vocabulary {self.vocab} split over tp",
                             **self._trace_options(params))

    def _trace_head(self, shard: Shard) -> BlockProfile:
        import torch
        import torch.nn.functional as F

        skeleton = self.parts(self._skeleton())
        norm = torch.nn.Sequential(copy.deepcopy(skeleton["norm"])) if skeleton["norm"] is not None else None
        if norm is not None and not self._eager:
            norm = fuse_norms(norm)
        with torch.device("meta"):
            head = torch.nn.Linear(self.hidden_size, self.vocab // shard.tp, bias=False, dtype=self._torch_dtype())
        hidden, _, _ = self._position_inputs(shard)
        labels = torch.zeros(hidden.shape[0] * hidden.shape[1], dtype=torch.long, device="meta")

        eager = self._eager

        def block(x, y):
            h = norm(x) if norm is not None else x
            # fused: the loss in float32 (a production recipe upcasts the logits); eager: cross-entropy on the
            # logits as the model returns them (a plan's default loss)
            logits = head(h) if eager else head(h).float()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), y)

        params = ([] if self.tied else list(head.parameters())) + (list(norm.parameters()) if norm else [])
        return trace_profile("head", block, (hidden, labels), shard=shard, params=params, **self._trace_options(params),
                             hidden_size=self.hidden_size, collectives=self._vocab_collectives(shard, head=True),
                             model_flops_scale=shard.tp * shard.cp,
                             note="final norm, LM head (vocabulary split over tp), cross-entropy"
                                  + ("; LM head tied to the embedding (its parameters counted there)"
                                     if self.tied else ""))


@contextmanager
def _as_exported():
    """transformers' questions "is this model traced?" answered yes, as they are for the graph torch.export
    records (the graph a plan cuts and a slot runs): the causal mask is materialised, not skipped for SDPA's
    ``is_causal``, with its check for packed sequences applied (a traced model cannot read positions to the host);
    experts in float32 run the library's loop, not ``grouped_mm`` (which compiles for bfloat16 only)."""
    from transformers import masking_utils
    from transformers.integrations import moe

    answers = ((masking_utils, "is_tracing"), (moe, "is_torchdynamo_compiling"))
    saved = [getattr(module, name) for module, name in answers]
    try:
        for module, name in answers:
            setattr(module, name, lambda *args: True)
        yield
    finally:
        for (module, name), value in zip(answers, saved):
            setattr(module, name, value)


def _materialise_causal_mask(config, hidden, positions) -> None:
    """The causal masks a traced model builds (see :func:`_as_exported`), recorded in the trace: one per attention
    type the layers use (``layer_types``; a ``sliding_window`` without them: sliding, as Mistral)."""
    from transformers import masking_utils

    types = getattr(config, "layer_types", None) or (
        ["sliding_attention"] if getattr(config, "sliding_window", None) else ["full_attention"])
    builders = {"full_attention": masking_utils.create_causal_mask,
                "sliding_attention": masking_utils.create_sliding_window_causal_mask}
    for kind in dict.fromkeys(types):
        build = builders.get(kind)
        if build is not None:
            build(config=config, inputs_embeds=hidden, attention_mask=None, cache=None, position_ids=positions,
                  allow_is_causal_skip=False)


__all__ = ["DecoderBlocks"]
