"""What a CUDA graph capture on the rack holds besides plain ATen ops (interop/cuda_layer/graphs.py): the kernels
under a tensor subclass, never the subclass's own op, and the storage a block frees and allocates again. Each
replay is checked against the same block run eagerly on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

from interop.cuda_layer import graphs
from interop.cuda_layer.graphs import CUDAGraph


def _capture(block):
    graph = CUDAGraph()
    graph.capture_begin()
    try:
        out = block()
    finally:
        graph.capture_end()
    return graph, out


def test_a_tensor_subclass_is_captured_as_the_ops_on_its_plain_tensors():
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    static = TwoTensor(a.to("hybrid:0"), b.to("hybrid:0"))
    graph, out = _capture(lambda: (static * 2 + 1).sum(dim=1))
    assert isinstance(out, TwoTensor) and out.shape == (4,)
    for _ in range(2):
        a, b = torch.randn(4, 3), torch.randn(4, 3)
        static.a.copy_(a)
        static.b.copy_(b)
        graph.replay()
        assert torch.equal(out.a.cpu(), (a * 2 + 1).sum(dim=1)) and torch.equal(out.b.cpu(), (b * 2 + 1).sum(dim=1))


def test_storage_freed_and_allocated_again_inside_the_block_is_redone_at_each_replay():
    # FSDP2's pattern: allocate the unsharded buffer, fill it, use it, free it (resize_(0)).
    x = torch.zeros(8, device="hybrid:0")
    buffer = torch.empty(8, device="hybrid:0")
    buffer.untyped_storage().resize_(0)
    out = torch.empty(8, device="hybrid:0")

    def block():
        buffer.untyped_storage().resize_(8 * 4)
        buffer.copy_(x * 3)
        out.copy_(buffer + 1)
        buffer.untyped_storage().resize_(0)

    graph, _ = _capture(block)
    assert buffer.untyped_storage().nbytes() == 0
    for value in (1.0, -2.5):
        x.fill_(value)
        graph.replay()
        assert torch.equal(out.cpu(), torch.full((8,), value * 3 + 1))
        assert buffer.untyped_storage().nbytes() == 0
    assert torch.UntypedStorage.resize_ is graphs._storage_resize  # torch's own again once the capture ended


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "inductor_compiled_code"])
def test_a_function_compiled_inside_a_capture_runs_again_at_each_replay(wrapped):
    # torchtitan calls its torch.compile'd FlexAttention inside the captured step, with its compiled region wrapped
    # in the inductor_compiled_code higher-order op. Dynamo must compile there (not fall back to eager, not refuse
    # fullgraph), and the compiled graph, whose kernels run past the dispatcher, must run again at each replay,
    # exactly once (an in-place update shows a second run), not only at capture.
    def step(x, total):
        total.add_(x.sum(0))
        return (x.sin() * 2).relu().sum(0)

    compiled = torch.compile(step, fullgraph=True, options={"wrap_inductor_compiled_regions": wrapped})
    static, total = torch.zeros(8, 4, device="hybrid:0"), torch.zeros(4, device="hybrid:0")
    static.fill_(1.0)
    total.fill_(5.0)
    graph, out = _capture(lambda: compiled(static, total))
    assert torch.equal(total.cpu(), torch.full((4,), 5.0))  # the capture ran nothing that stays
    expected_total = torch.full((4,), 5.0)
    for seed in (1, 2):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(seed))
        static.copy_(x)
        graph.replay()
        expected_total += x.sum(0)
        torch.testing.assert_close(out.cpu(), (x.sin() * 2).relu().sum(0))  # Inductor's sin: float32 ulps
        torch.testing.assert_close(total.cpu(), expected_total)
