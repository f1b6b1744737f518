"""What-if inputs at the edges (issue 17): a default configuration it then refuses, a config that cannot be a
model."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="what-if models are built from transformers configs")

import devices  # noqa: E402
from planner import whatif  # noqa: E402


def test_the_default_configuration_keeps_tensor_parallel_groups_inside_every_domain():
    # trn3:208 is a full 144-slot domain and a 64-slot one: tp=32 divides the smaller only. With 4 samples the
    # default used to pick it (the most chips busy), then refused its own choice (trn3:10000000 likewise).
    from transformers import LlamaConfig

    spec = devices.parse_rack("trn3:208")
    assert sorted({d.count for d in spec.domains}) == [64, 144]
    config = LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=32, num_key_value_heads=32)
    est = whatif(config, "trn3:208", global_batch=4, seq_len=64)
    tp = est.parallel["tp"]
    # Any tp dividing both domains is sound; which one the default takes follows the compute bound (on this tiny
    # model the Trainium family's fitted GEMM factor leaves tp 4 within the tolerance of tp 16, on fewer chips).
    assert 144 % tp == 0 and 64 % tp == 0


@pytest.mark.parametrize("field, value", [("vocab_size", 0), ("hidden_size", -1), ("num_hidden_layers", 0),
                                          ("num_attention_heads", 0)])
def test_a_config_that_cannot_be_a_model_names_the_field(field, value):
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4)
    setattr(config, field, value)  # its constructor would refuse some of these itself
    with pytest.raises(ValueError, match=f"model: config.{field} must be a positive integer, got {value!r}"):
        whatif(config, "h100:8", global_batch=8, seq_len=64)
