"""Which boundary values the executed step differentiates (interop/live/grad_flow.py), and what that does to the
plan's trace: a table built from a buffer and passed between blocks (a rotary table, as torchtitan passes it)
carries no gradient, so the trace records no backward for it. Before, every floating-point boundary value
required a gradient in the trace: a torchtitan-style Llama's step was predicted 15 % over its executed step."""

from __future__ import annotations

import torch
import torch.nn as nn

import interop  # noqa: F401  (the hybrid device)
from interop.live.cut import cut


class Table(nn.Module):
    """Embeds tokens and builds a table from a buffer, both passed on to every layer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 8)
        self.register_buffer("freqs", torch.arange(8, dtype=torch.float32), persistent=False)

    def forward(self, tokens):
        table = (torch.arange(tokens.shape[1], dtype=torch.float32)[:, None] * self.freqs).cos()
        return self.embed(tokens), table.to(tokens.device)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, h, table):
        return h + self.lin(h) * table


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = Table()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.head = nn.Linear(8, 32)

    def forward(self, tokens):
        h, table = self.table(tokens)
        for layer in self.layers:
            h = layer(h, table)
        return self.head(h)


def _blocks():
    return cut(Model(), (torch.randint(0, 32, (4, 6)),))


def test_a_table_from_a_buffer_carries_no_gradient_and_activations_do():
    blocks = _blocks()
    layer = blocks[1]
    h, table = (blocks.values[n] for n in layer.inputs)
    assert h.requires_grad and not table.requires_grad
    assert all(blocks.values[n].requires_grad for n in layer.outputs)
    assert not any(blocks.values[n].requires_grad for n in blocks.inputs)  # token ids


def test_the_trace_runs_no_backward_for_a_value_without_gradient():
    """Reference: autograd on the CPU. The layer's backward multiplies the output gradient by the table once
    (for the linear's output) and reduces nothing onto the table's broadcast shape."""
    from planner.profile import Shard

    blocks = _blocks()
    profile = blocks.profile(1, Shard(microbatch=4, seq_len=6))
    sums = [r for r in profile.backward if r.op.startswith("aten::sum")]
    table_shape = (6, 8)
    assert not [r for r in sums if r.out_shapes and r.out_shapes[0] == table_shape], sums

    h = torch.randn(4, 6, 8, requires_grad=True)
    table = torch.randn(6, 8)  # as the runner hands it over: no gradient
    Layer()(h, table).sum().backward()
    assert table.grad is None and h.grad is not None
