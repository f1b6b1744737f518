"""Profile rewrites for what a meta trace cannot see: routed experts and context-parallel attention.

* :func:`grouped_gemms`: ``_grouped_mm`` (one kernel over many experts, rows
  split by data-dependent offsets) becomes one GEMM per local expert with the
  rows split evenly (balanced routing), which the cost model prices.
* :func:`context_parallel_attention`: a chip of a load-balanced causal
  context-parallel ring attends ``seq_len / cp`` queries to, on average,
  ``seq_len / 2`` keys over the ring; the traced local attention (``seq_len / cp``
  keys, causal) is replaced by that.
* :func:`shard_experts`: expert parameters divided over ``ep`` chips.
* :func:`dense_experts_as_routed`: experts a model writes dense (every expert on every token) priced routed.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

import devices.cost
from planner.profile import BlockProfile, Shard, gemm_flops

_GROUPED = ("aten::_grouped_mm",)
_GEMMS = ("aten::mm", "aten::addmm", "aten::_grouped_mm", "aten::linear", "aten::matmul")
"""GEMMs other than the experts' batched ones: their operands are weights and tokens, never an expert's copy."""


def _mm(m: int, k: int, n: int, dtype: str) -> devices.cost.OpRecord:
    return devices.cost.OpRecord("aten::mm", ((m, k), (k, n)), dtype, ((m, n),))


def expand_grouped_mm(record: devices.cost.OpRecord, groups: int) -> list[devices.cost.OpRecord]:
    """One ``aten::mm`` per group for a ``_grouped_mm`` record, rows split evenly over ``groups``."""
    a, b = record.shapes[0], record.shapes[1]
    dt = record.dtype
    if len(a) == 2 and len(b) == 3:      # tokens (S, K) x experts (E, K, N) -> (S, N)
        rows = math.ceil(a[0] / groups)
        return [_mm(rows, a[1], b[2], dt)] * groups
    if len(a) == 2 and len(b) == 2:      # weight gradient (K, S) x (S, N) -> (E, K, N)
        rows = math.ceil(a[1] / groups)
        return [_mm(a[0], rows, b[1], dt)] * groups
    if len(a) == 3 and len(b) == 3:      # batched (E, M, K) x (E, K, N)
        return [_mm(a[1], a[2], b[2], dt)] * groups
    if len(a) == 3 and len(b) == 2:      # (E, M, K) x (K, S) -> (M, S)
        return [_mm(a[1], a[2], math.ceil(b[1] / groups), dt)] * groups
    raise ValueError(f"_grouped_mm with shapes {a} x {b}: layout not understood")


def grouped_gemms(profile: BlockProfile, groups: int, experts: int) -> BlockProfile:
    """``profile`` with every ``_grouped_mm`` expanded to ``groups`` GEMMs (see the module doc)."""
    ops = profile.forward + profile.backward
    if not any(r.op.split(".")[0] in _GROUPED for r in ops):
        return profile
    if groups < 1:
        raise ValueError(f"{profile.name}: grouped GEMMs found but the model declares no experts")

    def expand(records):
        out = []
        for r in records:
            out += expand_grouped_mm(r, groups) if r.op.split(".")[0] in _GROUPED else [r]
        return tuple(out)

    forward, backward = expand(profile.forward), expand(profile.backward)
    # Op indices moved: recompute the sequence-sharded marks by op identity.
    marked = {id(op) for i, op in enumerate(ops) if i in profile.sequence_sharded}
    sharded = frozenset(i for i, op in enumerate(forward + backward) if id(op) in marked)
    return replace(profile, forward=forward, backward=backward, sequence_sharded=sharded,
                   model_flops=3.0 * gemm_flops(forward) * profile.flops_scale)


_ATTENTION_QKV = {  # op base name -> positions of q, k, v in shapes (SDPA layout: batch, heads, seq, dim)
    "_scaled_dot_product_flash_attention": (0, 1, 2),
    "_scaled_dot_product_efficient_attention": (0, 1, 2),
    "_scaled_dot_product_flash_attention_backward": (1, 2, 3),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 3),
}


def dense_experts_as_routed(profile: BlockProfile, experts: int, topk: int, rows: int,
                            expert_shapes: set[tuple[int, int]]) -> BlockProfile:
    """``profile`` with the experts a model writes dense (Llama 4: every expert runs every token, the router's
    scores zeroing the rest) recorded as a production stack runs them routed, on ``rows * topk`` token-expert pairs
    instead of ``rows * experts``: their batched GEMMs as the routed ``_grouped_mm`` (:func:`grouped_gemms` then
    splits them evenly over the chip's experts), and the elementwise ops on every expert's copy of the tokens (the
    scaled inputs, the activation and its gradient: tensors of ``(experts, rows, width)`` or ``(experts * rows,
    width)``) on the pairs alone. ``rows``: the tokens the block sees; ``expert_shapes``: the expert tensors' (in,
    out) shapes, which tell a weight gradient (its output) from a forward or input-gradient GEMM."""
    routed = math.ceil(rows * topk)

    def pairs(shape):
        if len(shape) == 3 and shape[0] == experts and shape[1] == rows:
            return (routed, shape[2])
        if len(shape) == 2 and shape[0] == experts * rows:
            return (routed, shape[1])
        return shape

    def as_routed(r):
        base = r.op.split(".")[0]
        if base in _GEMMS:
            return r
        if base != "aten::bmm" or len(r.shapes) != 2:
            shapes = tuple(pairs(s) for s in r.shapes)
            outs = tuple(pairs(s) for s in r.out_shapes) if r.out_shapes else r.out_shapes
            if shapes == r.shapes and outs == r.out_shapes:
                return r
            return devices.cost.OpRecord(r.op, shapes, r.dtype, outs, r.args)
        a, b = r.shapes
        if len(a) != 3 or len(b) != 3 or a[0] != experts:
            return r
        if a[2] == rows and (a[1], b[2]) in expert_shapes:  # weight gradient: the tokens are contracted
            return devices.cost.OpRecord("aten::_grouped_mm", ((a[1], routed), (routed, b[2])), r.dtype,
                                         ((experts, a[1], b[2]),))
        if a[1] == rows:  # forward, input gradient: one row per token
            return devices.cost.OpRecord("aten::_grouped_mm", ((routed, a[2]), b), r.dtype, ((routed, b[2]),))
        return r

    forward, backward = tuple(map(as_routed, profile.forward)), tuple(map(as_routed, profile.backward))
    if forward == profile.forward and backward == profile.backward:
        return profile
    note = (profile.note + "; " if profile.note else "") + (
        f"experts written dense (every expert on every token): priced routed (top-{topk} of {experts}), their "
        f"GEMMs and the elementwise ops on their copies of the tokens")
    return replace(profile, forward=forward, backward=backward, note=note,
                   model_flops=3.0 * gemm_flops(forward) * profile.flops_scale)


def context_parallel_attention(profile: BlockProfile, shard: Shard) -> BlockProfile:
    """Attention of one chip in a load-balanced causal CP ring (see the module doc)."""
    keys = shard.seq_len // 2
    local = shard.seq_len // shard.cp

    def fix(records):
        out = []
        for r in records:
            name = devices.cost.classify(r.op)[1]
            pos = _ATTENTION_QKV.get(name)
            if pos is None:
                out.append(r)
                continue
            shapes = list(r.shapes)
            for i in pos[1:]:
                if len(shapes[i]) == 4 and shapes[i][2] == local:
                    shapes[i] = shapes[i][:2] + (keys,) + shapes[i][3:]
            outs = r.out_shapes
            if outs and name.endswith("_backward"):
                outs = tuple(s[:2] + (keys,) + s[3:] if k in (1, 2) and len(s) == 4 and s[2] == local else s
                             for k, s in enumerate(outs))
            args = dict(r.args)
            args["is_causal"] = False
            out.append(devices.cost.OpRecord(r.op, tuple(shapes), r.dtype, outs, MappingProxyType(args)))
        return tuple(out)

    forward = fix(profile.forward)
    note = (profile.note + "; " if profile.note else "") + (
        f"context parallel cp={shard.cp}: {local} queries per chip over {keys} keys on average (causal, "
        f"load-balanced ring)")
    return replace(profile, forward=forward, backward=fix(profile.backward),
                   model_flops=3.0 * gemm_flops(forward) * profile.flops_scale, note=note)


def shard_experts(profile: BlockProfile, ep: int) -> BlockProfile:
    """Expert parameters divided over ``ep`` chips."""
    if ep == 1 or not profile.expert_params:
        return profile
    kept = profile.expert_params // ep
    per = profile.param_bytes / max(1, profile.params)
    params = profile.params - profile.expert_params + kept
    return replace(profile, params=params, expert_params=kept, param_bytes=int(params * per))


__all__ = ["context_parallel_attention", "dense_experts_as_routed", "expand_grouped_mm", "grouped_gemms",
           "shard_experts"]
