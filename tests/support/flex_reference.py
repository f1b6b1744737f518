"""FlexAttention on the CPU by another route, forward and backward: the reference for runs on the rack.

torch's ``flex_attention`` refuses the CPU's backward, and its eager forward is the same dense math a slot
runs (``sdpa_dense``), so neither is an independent check of a slot. Here the same ``score_mod`` and
``mask_mod`` are applied by broadcasting rather than by ``vmap``: the index arguments are ``arange`` tensors
shaped to broadcast against the (batch, head, query, key) score matrix, the mask is materialised as a
boolean tensor, and plain attention (matmul, softmax, matmul) is differentiated by autograd. A mod written
for FlexAttention that indexes captured tensors with its index arguments (``bias[h]``,
``doc_ids[b, q_idx] == doc_ids[b, kv_idx]``) broadcasts the same way.

As FlexAttention does, a query whose keys are all masked gets a zero output and a log-sum-exp of -inf.
"""

from __future__ import annotations

import math
from typing import Callable

import torch


def index_grids(batch: int, heads: int, q_len: int, kv_len: int, device="cpu") -> tuple:
    """(b, h, q_idx, kv_idx) as int32 ``arange`` tensors shaped to broadcast to (batch, heads, q_len, kv_len)."""
    def grid(n, dim):
        shape = [1, 1, 1, 1]
        shape[dim] = n
        return torch.arange(n, device=device, dtype=torch.int32).view(shape)

    return grid(batch, 0), grid(heads, 1), grid(q_len, 2), grid(kv_len, 3)


def dense_mask(mask_mod: Callable | None, batch: int, heads: int, q_len: int, kv_len: int,
               device="cpu") -> torch.Tensor:
    """``mask_mod`` evaluated for every (batch, head, query, key): a boolean (batch, heads, q_len, kv_len)."""
    if mask_mod is None:
        return torch.ones(batch, heads, q_len, kv_len, dtype=torch.bool, device=device)
    b, h, q, kv = index_grids(batch, heads, q_len, kv_len, device)
    return mask_mod(b, h, q, kv).expand(batch, heads, q_len, kv_len).to(torch.bool)


def computed_blocks(mask: torch.Tensor, q_block: int = 128, kv_block: int = 128) -> tuple[int, int]:
    """(blocks with any unmasked pair, all blocks) of a dense mask cut into (q_block, kv_block) tiles: what a
    BlockMask of those block sizes computes (its partial plus its full blocks)."""
    batch, heads, q_len, kv_len = mask.shape
    rows, cols = math.ceil(q_len / q_block), math.ceil(kv_len / kv_block)
    padded = torch.zeros(batch, heads, rows * q_block, cols * kv_block, dtype=torch.bool)
    padded[..., :q_len, :kv_len] = mask.cpu()
    tiles = padded.view(batch, heads, rows, q_block, cols, kv_block).any(dim=5).any(dim=3)
    return int(tiles.sum()), tiles.numel()


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_mod: Callable | None = None,
              mask_mod: Callable | None = None, scale: float | None = None,
              enable_gqa: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, natural log-sum-exp) of FlexAttention's definition, in plain differentiable ops.

    ``score_mod(score, b, h, q_idx, kv_idx)`` and ``mask_mod(b, h, q_idx, kv_idx)`` get broadcastable index
    tensors; with ``enable_gqa`` each key/value head serves ``Hq / Hkv`` consecutive query heads."""
    batch, heads, q_len, _ = query.shape
    kv_len = key.size(-2)
    if enable_gqa:
        group = heads // key.size(1)
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    b, h, q, kv = index_grids(batch, heads, q_len, kv_len, query.device)
    if score_mod is not None:
        scores = score_mod(scores, b, h, q, kv)
    mask = dense_mask(mask_mod, batch, heads, q_len, kv_len, query.device)
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # A fully masked row: FlexAttention gives zeros (softmax of all -inf would be NaN).
    empty = ~mask.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value, lse


def sdpa(query, key, value, mask_mod: Callable | None = None, scale: float | None = None,
         enable_gqa: bool = False) -> torch.Tensor:
    """The same attention through ``F.scaled_dot_product_attention`` with the materialised boolean mask
    (no score_mod; every query must see a key, as SDPA gives NaN where none is)."""
    batch, heads, q_len, _ = query.shape
    mask = dense_mask(mask_mod, batch, heads, q_len, key.size(-2), query.device)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale,
                                                            enable_gqa=enable_gqa)


__all__ = ["attention", "computed_blocks", "dense_mask", "index_grids", "sdpa"]
