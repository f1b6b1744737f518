"""What-if tensor parallelism cuts every family's layers as Megatron does (planner.megatron_shard).

Reference: Megatron-LM's rules applied to the whole layer's own parameters: a rank holds 1/tp of every
projection and expert tensor, and whole copies of the norms and of the row-parallel projections' biases
(added once after the all-reduce). Before the layer's own modules were cut, GPT-2 (transformers' Conv1D,
fused c_attn) and GPT-NeoX (head size derived from the width) kept every weight whole at any tp."""

from __future__ import annotations

import pytest

from planner.decoder_blocks import DecoderBlocks
from planner.megatron_shard import REPLICATED, ROW, shard_layer
from planner.profile import Shard
from tests.support import model_families

transformers = pytest.importorskip("transformers", reason="the families' configs come from transformers")

WHATIF_FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "gpt_neox")


def _config(family: str):
    if family == "gpt2":
        return transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64,
                                       bos_token_id=0, eos_token_id=0)
    return model_families.hf_config(family)


def _replicated(layer) -> int:
    """Elements Megatron keeps whole on every rank: norm weights/biases, row-parallel biases, an MoE router."""
    total = 0
    for name, p in layer.named_parameters():
        parts = name.split(".")
        if parts[-2] in REPLICATED or p.dim() == 1 and (parts[-2] in ROW and parts[-1] == "bias" or "norm" in name
                                                        or "ln_" in name):
            total += p.numel()
    return total


@pytest.mark.parametrize("family", WHATIF_FAMILIES)
def test_weights_per_chip_shrink_by_tp(family):
    blocks = DecoderBlocks(_config(family), dtype="bfloat16")
    whole = blocks._layer_module(1, 1)
    total = sum(p.numel() for p in whole.parameters())
    kept = _replicated(whole)
    shard = Shard(microbatch=1, seq_len=16, tp=2, sequence_parallel=False)
    assert blocks.profile(1, shard).params == (total - kept) // 2 + kept
    # The token embedding splits its vocabulary (learned positions, GPT-2's wpe, stay whole).
    whole_embedding = blocks.profile(0, Shard(microbatch=1, seq_len=16)).params
    assert whole_embedding - blocks.profile(0, shard).params == blocks.vocab * blocks.hidden_size // 2


def test_gpt2_conv1d_and_fused_qkv_shards_have_megatron_shapes():
    blocks = DecoderBlocks(_config("gpt2"), dtype="bfloat16")
    layer = blocks._layer_module(1, 4)
    shapes = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    # Conv1D weights are (in, out): c_attn and c_fc split their outputs, the two c_proj their inputs.
    assert shapes["attn.c_attn.weight"] == (64, 3 * 64 // 4) and shapes["attn.c_attn.bias"] == (48,)
    assert shapes["attn.c_proj.weight"] == (16, 64) and shapes["attn.c_proj.bias"] == (64,)
    assert shapes["mlp.c_fc.weight"] == (64, 256 // 4) and shapes["mlp.c_proj.weight"] == (64, 64)
    assert layer.attn.split_size == 16


def test_a_layer_without_known_projections_is_refused():
    import torch

    with torch.device("meta"):
        layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    with pytest.raises(ValueError, match="tp: no column/row pair of projections found in Sequential"):
        shard_layer(layer, 2, heads=2, kv_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="tp: tensor parallelism 3 does not divide the 4 attention heads"):
        shard_layer(layer, 3, heads=4, kv_heads=4, head_dim=2)
