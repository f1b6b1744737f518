"""A plan is never slower than the homogeneous sub-racks it prints beside itself (modelled).

The search evaluates candidates in order of a bound that leaves out communication, at most 400 of them. GPT-2's tied embedding and head, split between a Trainium and an H100 stage, are all-reduced
across the two kinds every step: every split layout bounded below the Trainium-only plan and came out slower,
the evaluation limit was spent on them, and ``hybrid plan --model gpt2 --rack trn3:1+h100:1 --global-batch 32
--seq 16`` printed a plan 1.77x slower than its own "homogeneous: trn3 only" row. Reference: the baselines,
each the exact search on one kind's slots."""

from __future__ import annotations

import pytest
import torch

import interop

transformers = pytest.importorskip("transformers")


def test_a_plan_on_a_large_space_is_no_slower_than_any_homogeneous_sub_rack():
    config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=64,
                                     use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, config.vocab_size, (32, 16))
    plan = interop.plan(model, (tokens,), "trn3:1+h100:1", optimizer="sgd")
    assert plan.stats.candidates > 400  # more than the evaluation limit: the order of evaluation decides
    homogeneous = [b for b in plan.baselines().rows if b.name.startswith("homogeneous") and b.seconds]
    assert len(homogeneous) == 2
    for b in homogeneous:
        assert plan.predicted.seconds <= b.seconds * (1 + 1e-9), (b.name, b.seconds, plan.predicted.seconds)
