"""The small plan tests/interop/live/test_plan_distributed.py runs in one process and across four (shared by both)."""

from __future__ import annotations

import torch

from interop.models import GPTConfig, token_batch

CFG = GPTConfig(vocab_size=128, seq_len=16, dim=32, heads=2, layers=2)
STEPS = 3
BATCH = 8


def batches():
    return [token_batch(CFG, BATCH, seed=s) for s in range(STEPS)]


def optimizer(params):
    # The planned optimizer is torch's fused kernel (one launch), on DTensor parameters too (tensor-parallel
    # shards, FSDP2's): the export registers DTensor's rule for it.
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True)


def layout_and_blocks(model, variant: str):
    from planner import Stage
    from interop.live.cut import cut
    from planner.layout import Layout

    x, _ = token_batch(CFG, 2)
    blocks = cut(model, (x,))
    if variant == "pp4":  # four stages, one slot each, both kinds
        stages = [Stage(chunks=range(i, i + 1), kind=k, slots=(i,))
                  for i, k in enumerate(("trn3", "trn3", "h100", "h100"))]
        return Layout(tuple(stages), "1f1b", 4, BATCH), blocks
    if variant == "pp2dp2":  # two stages of two data-parallel replicas
        stages = [Stage(chunks=range(0, 2), kind="trn3", slots=(0, 1)),
                  Stage(chunks=range(2, 4), kind="h100", slots=(2, 3))]
        return Layout(tuple(stages), "gpipe", 2, BATCH), blocks
    if variant == "pp2tp2":  # two stages, each splitting its linear layers over two slots
        stages = [Stage(chunks=range(0, 2), kind="trn3", slots=(0, 1), tp=2),
                  Stage(chunks=range(2, 4), kind="h100", slots=(2, 3), tp=2)]
        return Layout(tuple(stages), "1f1b", 2, BATCH), blocks
    raise ValueError(variant)
