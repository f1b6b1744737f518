"""What-ifs cut public model families beyond the common decoder: each one's layers traced as its decoder calls
them (Gemma 3's per-type rotary tables, BLOOM's ALiBi, OPT's nested decoder and mask-counted positions, Gemma 2's
own attention, a multimodal config's language model).

Reference: the transformers model itself, built from the same config on the meta device: every traced layer holds
exactly that layer's parameters, and the embedding its token (and learned position) table."""

from __future__ import annotations

import pytest

from planner.decoder_blocks import DecoderBlocks
from planner.profile import Shard

transformers = pytest.importorskip("transformers", reason="the families' configs come from transformers")

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)


def _configs():
    gemma3_text = dict(SMALL, layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    return {
        "gemma3_text": transformers.Gemma3TextConfig(**gemma3_text),
        "gemma3 (multimodal: its text model)": transformers.Gemma3Config(text_config=gemma3_text),
        "gemma2": transformers.Gemma2Config(**SMALL),
        "opt": transformers.OPTConfig(vocab_size=128, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                                      num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64),
        "bloom": transformers.BloomConfig(vocab_size=128, hidden_size=64, n_layer=2, n_head=4),
        "falcon": transformers.FalconConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, alibi=True, new_decoder_architecture=False,
                                            multi_query=False, parallel_attn=False, bias=True),
    }


CONFIGS = _configs()


@pytest.mark.parametrize("family", list(CONFIGS))
def test_every_layer_is_traced_with_the_models_own_parameters(family):
    import torch

    config = CONFIGS[family]
    blocks = DecoderBlocks(config, dtype="float32")
    text = config.get_text_config()
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(text)
    parts = DecoderBlocks.parts(model)
    shard = Shard(microbatch=1, seq_len=16)
    for i, layer in enumerate(parts["layers"], start=1):
        profile = blocks.profile(i, shard)
        assert profile.params == sum(p.numel() for p in layer.parameters()), (family, i)
        assert profile.forward and profile.backward, (family, i)
    embedding = parts["embed"].weight.numel() + (sum(p.numel() for p in parts["positions"].parameters())
                                                 if parts["positions"] is not None else 0)
    assert blocks.profile(0, shard).params == embedding
    assert blocks.num_layers == text.num_hidden_layers
