"""How a context-parallel ring runs a chip's attention: the kernels and the merges of Transformer Engine's P2P ring.

A traced context-parallel layer (:func:`planner.rewrite.context_parallel_attention`) holds one attention op per
direction: ``seq_len / cp`` queries over ``seq_len / 2`` keys on average, the work of one chip of a load-balanced
causal ring. Transformer Engine's ring (``cp_comm_type="p2p"``, the default of Megatron-Core and of NVIDIA's
published recipes) runs that work as ``cp`` kernels, one per ring step, and merges their partial results
(NVIDIA/TransformerEngine, transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py,
``AttnFuncWithCPAndKVP2P``):

* each chip holds two chunks of the sequence (``i`` and ``2 cp - 1 - i``: the causal work balanced); step 0
  attends its own ``L = seq_len / cp`` queries to its own ``L`` keys, causally; each later step is a non-causal
  kernel of ``L`` queries over the ``L / 2`` keys of the first half of a peer's chunk (steps up to the chip's
  rank), or of the ``L / 2`` queries of its second chunk over ``L`` keys (later steps). The chips wait for each
  other at every step (the next step's keys and values come from the peer), so a step takes its slower form;
* after each step past the first, the output is merged with the step's partial output (rescaled by the
  log-sum-exp: ``flash_attn_fwd_out_correction``), and in the backward the gradients of the queries, keys and
  values are accumulated over the steps (``dq.add_(dq_)``, ``dkv.add_(dkv_)``): elementwise passes in the
  attention's dtype, as the 2024 code does (``FlashAttnUnpaddedFuncWithCP``, read at
  transformer_engine/pytorch/attention.py of that year).

The FLOPs are those of the traced op; the kernels are shorter (fewer keys per query: the cost model's
attention curve prices them lower) and the merges add memory traffic. The exchange of the next step's keys and
values overlaps the current step's kernel (:func:`exposed_exchange`).
"""

from __future__ import annotations

from types import MappingProxyType

import devices.cost
from planner.profile import Shard

_QKV = {  # op base name -> positions of q, k, v in shapes (SDPA layout: batch, heads, seq, dim)
    "_scaled_dot_product_flash_attention": (0, 1, 2),
    "_scaled_dot_product_efficient_attention": (0, 1, 2),
    "_scaled_dot_product_flash_attention_backward": (1, 2, 3),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 3),
}


def _resized(record: devices.cost.OpRecord, positions: tuple[int, ...], local: int, q_len: int, k_len: int,
             causal: bool) -> devices.cost.OpRecord:
    """``record`` with its queries cut to ``q_len`` and its keys and values to ``k_len``."""
    def cut(shape, length):
        return tuple(shape[:2]) + (length,) + tuple(shape[3:])

    shapes = []
    for i, s in enumerate(record.shapes):
        if i in positions[1:] and len(s) == 4:
            shapes.append(cut(s, k_len))
        elif len(s) >= 3 and s[2] == local:  # queries, their output, gradient and log-sum-exp
            shapes.append(cut(s, q_len))
        else:
            shapes.append(s)
    backward = "backward" in record.op
    outs = []
    for k, s in enumerate(record.out_shapes or ()):
        if backward and k in (1, 2) and len(s) == 4:
            outs.append(cut(s, k_len))
        elif len(s) >= 3 and s[2] == local:
            outs.append(cut(s, q_len))
        else:
            outs.append(s)
    args = dict(record.args)
    args["is_causal"] = causal
    return devices.cost.OpRecord(record.op, tuple(shapes), record.dtype, tuple(outs) if record.out_shapes else None,
                                 MappingProxyType(args))


def ring_steps(record: devices.cost.OpRecord, shard: Shard) -> list[tuple[devices.cost.OpRecord, ...]] | None:
    """The ring's kernels and merges for one traced context-parallel attention op, as a list of steps, each a
    tuple of alternatives (the step takes the slowest: the chips wait for each other); None when ``record`` is
    not an attention op or ``shard`` is not context parallel."""
    if shard.cp < 2:
        return None
    name = devices.cost.classify(record.op)[1]
    positions = _QKV.get(name)
    if positions is None:
        return None
    local = shard.seq_len // shard.cp
    q = record.shapes[positions[0]]
    k = record.shapes[positions[1]]
    if len(q) != 4 or len(k) != 4 or q[2] != local:
        return None
    half = max(1, local // 2)
    steps: list[tuple[devices.cost.OpRecord, ...]] = [(_resized(record, positions, local, local, local, True),)]
    whole_q = _resized(record, positions, local, local, half, False)
    half_q = _resized(record, positions, local, half, local, False)
    backward = "backward" in record.op
    out_shape = tuple(q[:3]) + (record.shapes[positions[2]][3],)
    kv_shape = tuple(k[:2]) + (local,) + tuple(k[3:])
    dtype = record.dtype
    merges = ([_add(q, dtype), _add(kv_shape, dtype), _add(kv_shape, dtype)] if backward  # dq, dk, dv accumulated
              else [_add(out_shape, dtype)])  # the output rescaled and added
    for _ in range(shard.cp - 1):
        steps.append((whole_q, half_q))
        steps.extend((m,) for m in merges)
    return steps


def _add(shape: tuple[int, ...], dtype: str) -> devices.cost.OpRecord:
    shape = tuple(shape)
    return devices.cost.OpRecord("aten::add", (shape, shape), dtype, (shape,))


def exposed_exchange(seconds: float, calls: int, attention: float) -> float:
    """Exposed seconds of a ring's ``calls`` exchanges totalling ``seconds`` beside ``attention`` seconds of its
    ``calls + 1`` steps: each exchange runs beside one step's kernel (the keys and values the next step needs are
    sent while the current step computes), and what outlasts the kernel waits."""
    if seconds <= 0 or calls < 1:
        return max(0.0, seconds)
    per_step = attention / (calls + 1)
    return calls * max(0.0, seconds / calls - per_step)


__all__ = ["exposed_exchange", "ring_steps"]
