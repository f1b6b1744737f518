"""Cutting models into blocks (interop.live.cut): the model's own structure, torch.export under
the hood, every range of blocks equal to the model run whole."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from interop.models import GPT, GPTConfig, SmallCNN
from interop.live.bind import bind
from interop.live.cut import NoBlockStructure, cut

SMALL = GPTConfig(vocab_size=128, seq_len=16, dim=32, heads=2, layers=3)


def _run_split(blocks, model, x, boundaries):
    """Run the model as consecutive stage modules split at ``boundaries``, on the CPU."""
    edges = [0, *boundaries, len(blocks)]
    values = (x,)
    for a, b in zip(edges, edges[1:]):
        out = bind(blocks.stage_module(a, b), model, "cpu")(*values)
        values = out
    return values


def test_gpt_layers_embedding_and_head_are_blocks():
    torch.manual_seed(0)
    model = GPT(SMALL)
    x = torch.randint(0, SMALL.vocab_size, (2, SMALL.seq_len))
    blocks = cut(model, (x,))
    assert [b.name for b in blocks] == ["embedding", "blocks.0", "blocks.1", "blocks.2", "head"]
    assert [b.role for b in blocks] == ["embedding", "layer", "layer", "layer", "head"]
    # Every parameter lands in a block; the tied LM head is held by the first and the last.
    assert blocks.tied == {"tok.weight": (0, 4)}
    distinct = {n for b in blocks for n in b.params}
    assert distinct == {blocks.canonical[n] for n, _ in model.named_parameters(remove_duplicate=False)}
    # Boundary bytes follow the batch: a layer passes on (rows, seq, dim) float32 activations.
    assert blocks.boundary_bytes(2, 3) == 3 * SMALL.seq_len * SMALL.dim * 4
    for boundaries in ([1], [2, 4], [1, 2, 3, 4]):
        for rows in (1, 3):  # the batch dimension is dynamic: any row count runs
            xr = torch.randint(0, SMALL.vocab_size, (rows, SMALL.seq_len))
            assert torch.equal(_run_split(blocks, model, xr, boundaries), model(xr))


def test_hf_gpt2_decoder_layers_embeddings_and_head():
    transformers = pytest.importorskip("transformers", reason="HF models need transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    x = torch.randint(0, 100, (2, 8))
    blocks = cut(model, (x,))
    assert [b.name for b in blocks] == ["embedding", "transformer.h.0", "transformer.h.1", "head"]
    assert "transformer.wte.weight" in blocks.tied
    out = _run_split(blocks, model, x, [1, 3])
    assert type(out).__name__ == "CausalLMOutputWithCrossAttentions"  # the model's own output type
    assert torch.equal(out.logits, model(x).logits)
    # The causal mask built in the embedding block crosses every later boundary.
    assert len(blocks.live(2)) > 1


def test_model_without_layers_is_cut_at_its_children():
    model = SmallCNN()
    blocks = cut(model, (torch.randn(2, 1, 28, 28),))
    assert [b.name for b in blocks] == ["features", "classifier"]


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(8, 8))
        self.w2 = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return torch.tanh(x @ self.w1) @ self.w2


class Marked(Flat):
    def forward(self, x):
        from torch.distributed.pipelining import pipe_split

        h = torch.tanh(x @ self.w1)
        pipe_split()
        return h @ self.w2


def test_model_without_structure_is_refused_with_how_to_mark_split_points():
    with pytest.raises(NoBlockStructure, match=r"split_spec=.*SplitPoint\.BEGINNING.*pipe_split\(\)"):
        cut(Flat(), (torch.randn(2, 8),))


def test_split_points_the_user_marks():
    from torch.distributed.pipelining import SplitPoint

    model = Marked()
    x = torch.randn(3, 8)
    blocks = cut(model, (x,))  # pipe_split() inside forward
    assert len(blocks) == 2
    assert torch.equal(_run_split(blocks, model, x, [1]), model(x))
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    blocks = cut(seq, (torch.randn(2, 4),), split_spec={"2": SplitPoint.BEGINNING})
    assert [b.name for b in blocks] == ["block0", "2"]
    with pytest.raises(ValueError, match="split_spec: 'nope' names no submodule"):
        cut(seq, (torch.randn(2, 4),), split_spec={"nope": SplitPoint.BEGINNING})


def test_the_cut_holds_the_models_bytes_and_leaves_the_model_as_it_was():
    """cut() exports a copy of the model's modules over the model's own parameter and buffer bytes (no second
    copy of a large model's weights on the host); the model's tensors, their values and its modules are as
    before (BatchNorm's running statistics included: the export runs no real forward)."""
    torch.manual_seed(0)
    model = SmallCNN()
    state = {n: t.clone() for n, t in model.state_dict().items()}
    objects = {n: t for n, t in model.state_dict(keep_vars=True).items()}
    blocks = cut(model, (torch.randn(4, 1, 28, 28),))
    held = {t.data_ptr() for b in blocks.blocks for t in list(b.module.parameters()) + list(b.module.buffers())}
    assert {t.data_ptr() for t in model.parameters()} <= held
    for name, t in model.state_dict(keep_vars=True).items():
        assert t is objects[name] and torch.equal(t, state[name]), name
    assert not any(p is q for b in blocks.blocks for p in b.module.parameters() for q in model.parameters())


def test_a_tied_parameter_is_held_over_the_models_bytes_in_every_block_using_it():
    """pipelining's split deep-copies a parameter two blocks use (the embedding an LM head is tied to); the cut
    gives each block's copy the model's bytes, as every other block parameter has (one parameter object per block
    still, the same values)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=128, seq_len=16, dim=32, heads=2, layers=2))
    blocks = cut(model, (torch.randint(0, 128, (2, 16)),))
    tied = next(iter(blocks.tied))
    source = model.get_parameter(tied)
    holders = [p for b in blocks.blocks for n, p in b.module.named_parameters(remove_duplicate=False)
               if blocks.canonical.get(n, n) == tied]
    assert len(holders) >= 2 and len({id(p) for p in holders}) == len(holders)
    assert all(p.data_ptr() == source.data_ptr() and p is not source for p in holders)
    model_bytes = {t.untyped_storage().data_ptr() for t in model.state_dict().values()}
    assert {p.untyped_storage().data_ptr() for b in blocks.blocks for p in b.module.parameters()} <= model_bytes
