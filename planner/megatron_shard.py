"""One tensor-parallel rank's decoder layer, cut from the whole layer as Megatron-LM cuts it (meta tensors only).

Megatron splits a transformer layer's matmuls in column/row pairs: the projections into
heads and into the MLP's width are *column-parallel* (their output features divided by
``tp``), the projections back to the model width are *row-parallel* (their input features
divided by ``tp``; their bias stays whole, added once after the all-reduce). Norms, the
router of a mixture of experts and everything else stay whole. Key/value heads fewer than
``tp`` are replicated: each rank keeps ``max(1, kv_heads / tp)`` of them.

:func:`shard_layer` does this to a layer built on the meta device, whichever way the family
writes it: ``nn.Linear``, transformers' ``Conv1D`` (GPT-2's transposed weight), fused QKV
projections (GPT-2's ``c_attn``, GPT-NeoX's ``query_key_value``, Phi-3's ``qkv_proj``), fused
gate/up projections, and experts held as 3-D tensors (Mixtral's ``gate_up_proj`` and
``down_proj``: every expert's width divided by ``tp``), what a module holds per head beside its projections
(attention sinks, full-width q/k norms, a gated delta net's convolution and decay terms) and multi-head latent
attention (down-projections whole, up-projections column-parallel by heads). The attention modules' head counts
(``num_heads``, ``num_key_value_groups``, GPT-2's ``split_size``, Phi-3's own config) are set
to the rank's, so the layer's own forward runs the rank's shapes. Names are the families'
own (Megatron's rules keyed by the module names transformers and torchtitan use); a layer
whose matmuls no rule names is refused, so a new family cannot silently stay whole.
"""

from __future__ import annotations

import copy
from typing import Any

COLUMN = frozenset({
    "q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "query_key_value", "Wqkv", "wq", "wk", "wv", "query",
    "key", "value", "gate_proj", "up_proj", "gate_up_proj", "c_fc", "dense_h_to_4h", "fc1", "w1", "w3",
    "q_b_proj", "kv_b_proj", "in_proj_qkvz", "in_proj_ba"})
"""Column-parallel projections: output features split over the tensor-parallel ranks."""
ROW = frozenset({"o_proj", "c_proj", "dense", "dense_4h_to_h", "down_proj", "fc2", "w2", "wo", "out_proj"})
"""Row-parallel projections: input features split; their sums all-reduced."""
FUSED_QKV = frozenset({"qkv_proj", "c_attn", "query_key_value", "Wqkv"})
"""Column projections into query, key and value heads at once."""
KEY_VALUE = frozenset({"k_proj", "v_proj", "wk", "wv", "key", "value"})
"""Column projections into key/value heads (replicated when fewer than tp)."""
REPLICATED = frozenset({"gate", "router", "score", "e_score_correction_bias", "q_a_proj", "kv_a_proj_with_mqa"})
"""Matmuls Megatron keeps whole on every rank: an MoE router; multi-head latent attention's down-projections into
its low-rank latents (DeepSeek's ``q_a_proj``, ``kv_a_proj_with_mqa``: Megatron's ``linear_q_down_proj`` and
``linear_kv_down_proj``), whose up-projections ``q_b_proj``/``kv_b_proj`` are column-parallel by heads."""
LINEAR_ATTENTION_WIDTHS = ("num_k_heads", "num_v_heads", "key_dim", "value_dim", "conv_dim")
"""A linear-attention (gated delta net) module's head counts and channel widths, all divided over tp: its heads
are cut as attention heads are (in/out projections, the causal convolution's channels, per-head decay terms)."""


def _kind(module) -> str | None:
    name = type(module).__name__
    if name == "Linear" or name.endswith("Linear") and hasattr(module, "in_features"):
        return "linear"
    if name == "Conv1D" and hasattr(module, "nf"):
        return "conv1d"
    return None


def _meta_like(param, shape):
    import torch

    return torch.nn.Parameter(torch.empty(shape, dtype=param.dtype, device="meta"),
                              requires_grad=param.requires_grad)


def _split(size: int, parts: int, what: str) -> int:
    if size % parts:
        raise ValueError(f"tp: tensor parallelism {parts} does not divide {what} ({size})")
    return size // parts


def shard_layer(layer: Any, tp: int, *, heads: int, kv_heads: int, head_dim: int) -> Any:
    """A copy of ``layer`` (on the meta device) holding tensor rank 0's shards at degree ``tp`` (see the
    module doc). ``heads``, ``kv_heads``, ``head_dim``: the whole layer's attention shape."""
    if tp == 1:
        return layer
    if heads % tp:
        raise ValueError(f"tp: tensor parallelism {tp} does not divide the {heads} attention heads")
    if kv_heads % tp and tp % kv_heads:
        raise ValueError(f"tp: tensor parallelism {tp} and the {kv_heads} key/value heads do not divide one another")
    layer = copy.deepcopy(layer)
    local_heads, local_kv = heads // tp, max(1, kv_heads // tp)
    column = row = 0
    for parent in list(layer.modules()):
        whole_counts = _head_counts(parent, heads)
        for child_name, child in list(parent.named_children()):
            kind = _kind(child)
            if kind is None or child_name in REPLICATED:
                continue
            if child_name in COLUMN:
                _shard_column(child, kind, child_name, tp, local_heads, local_kv, heads, kv_heads, head_dim)
                column += 1
            elif child_name in ROW:
                _shard_row(child, kind, tp, child_name)
                row += 1
        _shard_experts(parent, tp)
        if whole_counts:
            _shard_per_head(parent, tp, whole_counts, local_heads, local_kv, heads, kv_heads, head_dim)
        _set_head_counts(parent, tp, local_heads, local_kv, heads, kv_heads)
    if not column or not row:
        raise ValueError(f"tp: no column/row pair of projections found in {type(layer).__name__} (its matmuls are "
                         f"named {sorted({n for n, m in layer.named_modules() if _kind(m)})}); known column "
                         f"names: {', '.join(sorted(COLUMN))}; row names: {', '.join(sorted(ROW))}")
    return layer


def _column_width(out: int, name: str, tp: int, local_heads: int, local_kv: int, heads: int, kv_heads: int,
                  head_dim: int) -> int:
    if name in KEY_VALUE and out == kv_heads * head_dim:
        return local_kv * head_dim
    if name in FUSED_QKV and out == (heads + 2 * kv_heads) * head_dim and kv_heads != heads:  # grouped kv heads
        return (local_heads + 2 * local_kv) * head_dim
    return _split(out, tp, f"the output features of {name}")


def _shard_column(child, kind, name, tp, local_heads, local_kv, heads, kv_heads, head_dim) -> None:
    if kind == "linear":
        out = _column_width(child.out_features, name, tp, local_heads, local_kv, heads, kv_heads, head_dim)
        child.weight = _meta_like(child.weight, (out, child.in_features))
        child.out_features = out
    else:  # Conv1D: weight (in, out)
        out = _column_width(child.nf, name, tp, local_heads, local_kv, heads, kv_heads, head_dim)
        child.weight = _meta_like(child.weight, (child.nx, out))
        child.nf = out
    if getattr(child, "bias", None) is not None:
        child.bias = _meta_like(child.bias, (out,))


def _shard_row(child, kind, tp, name) -> None:
    if kind == "linear":
        inp = _split(child.in_features, tp, f"the input features of {name}")
        child.weight = _meta_like(child.weight, (child.out_features, inp))
        child.in_features = inp
    else:
        inp = _split(child.nx, tp, f"the input features of {name}")
        child.weight = _meta_like(child.weight, (inp, child.nf))
        child.nx = inp


def _shard_experts(module, tp: int) -> None:
    """Experts held as 3-D tensors (experts, out, in), or (experts, in, out) (:func:`_experts_transposed`: GPT-OSS,
    Llama 4): column projections split their width, row ones their input (each expert's MLP
    cut as a dense MLP is). A column projection's per-expert bias (``gate_up_proj_bias``) splits with its width;
    a row projection's stays whole (added once after the all-reduce)."""
    params = dict(module.named_parameters(recurse=False))
    out_dim, in_dim = (2, 1) if _experts_transposed(module, params) else (1, 2)
    for name, p in params.items():
        if p.dim() == 2 and name.endswith("_bias") and name[:-len("_bias")] in COLUMN and \
                params.get(name[:-len("_bias")]) is not None and params[name[:-len("_bias")]].dim() == 3:
            setattr(module, name, _meta_like(p, (p.shape[0], _split(p.shape[1], tp, f"experts' {name}"))))
            continue
        if p.dim() != 3 or name not in COLUMN and name not in ROW:
            continue
        dim = out_dim if name in COLUMN else in_dim
        shape = list(p.shape)
        shape[dim] = _split(shape[dim], tp, f"the width of experts' {name}")
        setattr(module, name, _meta_like(p, tuple(shape)))
    for attr in ("intermediate_dim", "intermediate_size", "expert_dim"):
        value = getattr(module, attr, None)
        if params and any(p.dim() == 3 for p in params.values()) and isinstance(value, int):
            setattr(module, attr, value // tp)


def _experts_transposed(module, params) -> bool:
    """Whether 3-D expert tensors are stored (experts, in, out): as transformers marks them (``is_transposed``),
    else as their column projection reads the model width in its second dimension (Llama 4's experts, which
    carry no mark)."""
    marked = getattr(module, "is_transposed", None)
    if isinstance(marked, bool):
        return marked
    hidden = getattr(module, "hidden_size", None)
    column = [p for n, p in params.items() if n in COLUMN and p.dim() == 3]
    return bool(column) and isinstance(hidden, int) and column[0].shape[1] == hidden != column[0].shape[2]


def _head_counts(module, heads: int) -> dict[str, int]:
    """The whole head counts and widths of a module that projects into heads (empty for any other): read before
    the cut, to recognise its per-head tensors by their whole size."""
    if not any(name in COLUMN and _kind(child) for name, child in module.named_children()):
        return {}
    counts = {"heads": heads}
    for attr in LINEAR_ATTENTION_WIDTHS:
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            counts[attr] = value
    return counts


def _shard_per_head(module, tp: int, counts: dict[str, int], local_heads: int, local_kv: int, heads: int,
                    kv_heads: int, head_dim: int) -> None:
    """Cut what a module holds per head beside its projections, as Megatron cuts it with the heads:

    * its own per-head parameters (GPT-OSS's attention ``sinks``; a gated delta net's ``A_log`` and ``dt_bias``,
      one per value head): the rank's heads;
    * a norm over the whole projection width (OLMo 2's ``q_norm``/``k_norm`` of ``heads * head_dim``; a norm of
      ``head_dim``, as Qwen 3's, is per head and stays whole): the rank's width (its mean of squares then runs
      over the rank's features; Megatron all-reduces the statistics, a few bytes per token, not priced);
    * a depthwise causal convolution over the projected channels (a gated delta net's ``conv1d``): the rank's
      channels; and the module's linear-attention widths (:data:`LINEAR_ATTENTION_WIDTHS`).
    """
    for name, p in list(module.named_parameters(recurse=False)):
        if p.dim() >= 1 and p.shape[0] == heads:
            setattr(module, name, _meta_like(p, (local_heads,) + tuple(p.shape[1:])))
        elif p.dim() >= 1 and p.shape[0] in (counts.get("num_v_heads"), counts.get("num_k_heads")):
            shape = (_split(p.shape[0], tp, f"the heads of {name}"),) + tuple(p.shape[1:])
            setattr(module, name, _meta_like(p, shape))
    attention = any(name in KEY_VALUE or name in FUSED_QKV for name, _ in module.named_children())
    widths = {heads * head_dim: local_heads * head_dim, kv_heads * head_dim: local_kv * head_dim} if attention else {}
    for child in module.children():
        weight = getattr(child, "weight", None)
        if "Norm" in type(child).__name__ and weight is not None and weight.dim() == 1 and weight.shape[0] in widths:
            width = widths[weight.shape[0]]
            child.weight = _meta_like(weight, (width,))
            if getattr(child, "bias", None) is not None:
                child.bias = _meta_like(child.bias, (width,))
            if isinstance(getattr(child, "normalized_shape", None), tuple):
                child.normalized_shape = (width,)
        elif type(child).__name__ == "Conv1d" and child.groups == child.in_channels == counts.get("conv_dim"):
            channels = _split(child.in_channels, tp, "the channels of the causal convolution")
            child.weight = _meta_like(child.weight, (channels,) + tuple(child.weight.shape[1:]))
            if child.bias is not None:
                child.bias = _meta_like(child.bias, (channels,))
            child.in_channels = child.out_channels = child.groups = channels
    for attr in LINEAR_ATTENTION_WIDTHS:
        if attr in counts:
            setattr(module, attr, _split(counts[attr], tp, f"{type(module).__name__}.{attr}"))


def _set_head_counts(module, tp: int, local_heads: int, local_kv: int, heads: int, kv_heads: int) -> None:
    """The rank's head counts on an attention module (its forward reads them)."""
    for attr in ("num_heads", "num_attention_heads", "n_head", "n_heads"):
        if getattr(module, attr, None) == heads:
            setattr(module, attr, local_heads)
    for attr in ("num_key_value_heads", "n_kv_heads", "num_kv_heads"):
        if getattr(module, attr, None) == kv_heads:
            setattr(module, attr, local_kv)
    if isinstance(getattr(module, "num_key_value_groups", None), int):
        module.num_key_value_groups = local_heads // local_kv
    embed = getattr(module, "embed_dim", None)
    if isinstance(getattr(module, "split_size", None), int) and module.split_size == embed:
        module.split_size = embed // tp  # GPT-2 splits its fused c_attn output at split_size
    config = module.__dict__.get("config") or module._modules.get("config")
    if config is not None and getattr(config, "num_attention_heads", None) == heads and \
            any(_kind(c) for c in module.children()):
        config = copy.deepcopy(config)  # Phi-3's attention reads its head count from its config
        config.num_attention_heads = local_heads
        if hasattr(config, "num_key_value_heads"):
            config.num_key_value_heads = local_kv
        module.config = config


__all__ = ["COLUMN", "FUSED_QKV", "KEY_VALUE", "LINEAR_ATTENTION_WIDTHS", "REPLICATED", "ROW", "shard_layer"]
