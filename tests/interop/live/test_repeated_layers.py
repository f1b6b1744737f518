"""A model's repeated layers are exported once (interop/live/repeated_layers.py): a model is exported with its
first, second and last layers, and the layers in between are copies of the second's block bound to their own
parameters. Reference: the same model exported whole (the way every model was cut before): the same blocks,
parameters and boundary values, the same forward output bit for bit, the same traced ops per block. A model
whose layers differ by an attribute (Gemma 2 alternates sliding and global attention) is exported whole."""

from __future__ import annotations

import pytest
import torch

import interop  # noqa: F401  (the hybrid device)
from interop.live import cut as cutting
from interop.live import repeated_layers
from interop.live.bind import bind
from planner.profile import Shard
from tests.support import model_families

transformers = pytest.importorskip("transformers")
LAYERS = 7


def _build(family: str):
    if family == "titan_llama":
        return model_families.build(family, n_layers=LAYERS)
    return model_families.build(family, num_hidden_layers=LAYERS)


def _whole(model, x, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(repeated_layers, "MIN_LAYERS", 10 ** 9)
        return cutting.cut(model, (x,))


def _spec(blocks, name):
    v = blocks.values[name]
    return v.kind, tuple(str(d) for d in v.shape), v.dtype, v.batch_dim, v.requires_grad


@pytest.mark.parametrize("family", ["llama", "mixtral", "titan_llama"])
def test_a_model_exported_with_three_layers_cuts_as_exported_whole(family, monkeypatch):
    model = _build(family)
    x, _ = model_families.tokens()
    layers = cutting.find_layers(model)[1]
    assert repeated_layers.kept_layers(model, layers) == [layers[0], layers[1], layers[-1]]
    fast, whole = cutting.cut(model, (x,)), _whole(model, x, monkeypatch)
    assert [(b.name, b.role, b.params) for b in fast.blocks] == [(b.name, b.role, b.params) for b in whole.blocks]
    assert [[_spec(fast, n) for n in b.inputs + b.outputs] for b in fast.blocks] == \
        [[_spec(whole, n) for n in b.inputs + b.outputs] for b in whole.blocks]
    assert fast.tied == whole.tied
    out = bind(fast.stage_module(0, len(fast)), model, "cpu")(x)
    ref = model(x)
    assert torch.equal(getattr(out, "logits", out), getattr(ref, "logits", ref))
    shard = Shard(microbatch=4, seq_len=x.shape[1])
    for i in range(len(fast)):
        a, b = fast.profile(i, shard), whole.profile(i, shard)
        assert (a.forward, a.backward, a.params) == (b.forward, b.backward, b.params), fast.blocks[i].name


def test_each_copied_layer_runs_its_own_parameters():
    model = _build("llama")
    x, _ = model_families.tokens()
    blocks = cutting.cut(model, (x,))
    middle = blocks.blocks[3]  # model.layers.2: a copy of layers.1's block
    assert middle.name == "model.layers.2" and all(p.startswith("model.layers.2.") for p in middle.params)
    with torch.no_grad():
        model.model.layers[2].mlp.down_proj.weight.mul_(2)  # the copy must see this layer's weights
    out = bind(blocks.stage_module(0, len(blocks)), model, "cpu")(x)
    assert torch.equal(out.logits, model(x).logits)


def test_layers_that_differ_by_an_attribute_are_exported_whole():
    model = _build("gemma2")
    layers = cutting.find_layers(model)[1]
    assert repeated_layers.kept_layers(model, layers) is None  # sliding and global attention alternate
    x, _ = model_families.tokens()
    blocks = cutting.cut(model, (x,))
    assert len(blocks) == LAYERS + 2
    out = bind(blocks.stage_module(0, len(blocks)), model, "cpu")(x)
    assert torch.equal(out.logits, model(x).logits)


def test_few_layers_are_exported_whole():
    model = model_families.build("llama", num_hidden_layers=repeated_layers.MIN_LAYERS - 1)
    assert repeated_layers.kept_layers(model, cutting.find_layers(model)[1]) is None


def test_a_plain_sequential_of_layers_names_each_block_by_the_layer_it_holds(monkeypatch):
    """A Sequential of layers has no embedding or head: every block is a layer, named by the parameters it holds
    (before, block 0 was called the embedding and block i named after layer i - 1)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()) for _ in range(8)])
    x = torch.randn(4, 16)
    fast, whole = cutting.cut(model, (x,)), _whole(model, x, monkeypatch)
    for blocks in (fast, whole):
        assert [(b.name, b.role) for b in blocks.blocks] == [(str(i), "layer") for i in range(8)]
        assert all(all(p.startswith(f"{b.name}.") for p in b.params) for b in blocks.blocks)
    assert torch.equal(bind(fast.stage_module(0, len(fast)), model, "cpu")(x), model(x))
