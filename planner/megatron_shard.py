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
``down_proj``: every expert's width divided by ``tp``). The attention modules' head counts
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
    "key", "value", "gate_proj", "up_proj", "gate_up_proj", "c_fc", "dense_h_to_4h", "fc1", "w1", "w3"})
"""Column-parallel projections: output features split over the tensor-parallel ranks."""
ROW = frozenset({"o_proj", "c_proj", "dense", "dense_4h_to_h", "down_proj", "fc2", "w2", "wo", "out_proj"})
"""Row-parallel projections: input features split; their sums all-reduced."""
FUSED_QKV = frozenset({"qkv_proj", "c_attn", "query_key_value", "Wqkv"})
"""Column projections into query, key and value heads at once."""
KEY_VALUE = frozenset({"k_proj", "v_proj", "wk", "wv", "key", "value"})
"""Column projections into key/value heads (replicated when fewer than tp)."""
REPLICATED = frozenset({"gate", "router", "score", "e_score_correction_bias"})
"""Matmuls Megatron keeps whole on every rank (an MoE router)."""


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
    """Experts held as 3-D tensors (experts, out, in): column projections split their width, row ones their
    input (each expert's MLP cut as a dense MLP is)."""
    params = dict(module.named_parameters(recurse=False))
    for name, p in params.items():
        if p.dim() != 3:
            continue
        if name in COLUMN:
            shape = (p.shape[0], _split(p.shape[1], tp, f"the width of experts' {name}"), p.shape[2])
        elif name in ROW:
            shape = (p.shape[0], p.shape[1], _split(p.shape[2], tp, f"the width of experts' {name}"))
        else:
            continue
        setattr(module, name, _meta_like(p, shape))
    for attr in ("intermediate_dim", "intermediate_size", "expert_dim"):
        value = getattr(module, attr, None)
        if params and any(p.dim() == 3 for p in params.values()) and isinstance(value, int):
            setattr(module, attr, value // tp)


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


__all__ = ["COLUMN", "FUSED_QKV", "KEY_VALUE", "REPLICATED", "ROW", "shard_layer"]
