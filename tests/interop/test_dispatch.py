"""Zero-copy dispatch: results equal the CPU's, views/in-place/out= keep their
semantics, devices are checked as CUDA checks them."""

from __future__ import annotations

import pytest
import torch

import interop


def on(slot, t):
    return t.to(f"hybrid:{slot}")


def test_results_equal_cpu_bitwise():
    torch.manual_seed(0)
    a, b = torch.randn(33, 17), torch.randn(17, 9)
    for fn in (torch.mm, lambda x, y: (x @ y).softmax(-1), lambda x, y: torch.nn.functional.gelu(x).sum(0)):
        expected = fn(a, b) if fn is not None else None
        got = fn(on(1, a), on(1, b))
        assert got.device == torch.device("hybrid:1")
        assert torch.equal(got.cpu(), expected)


def test_no_copy_the_kernel_runs_on_the_same_bytes():
    x = torch.zeros(8, device="hybrid:2")
    alias = interop._C._execution_alias(x)
    assert alias.device.type == "cpu" and alias.data_ptr() == x.data_ptr()
    x.add_(1)
    assert torch.equal(alias, torch.ones(8))  # the in-place op wrote where the alias reads
    big = torch.ones(1 << 18, device="hybrid:2")  # 1 MiB
    torch.hybrid.reset_peak_memory_stats(2)
    peak0 = torch.hybrid.max_memory_allocated(2)
    big.mul_(3)
    # At most a scalar's temporary: no copy of the 1 MiB operand in or out.
    assert torch.hybrid.max_memory_allocated(2) - peak0 < 1024
    assert big[0].item() == 3.0


def test_views_share_storage_and_write_through():
    a = torch.arange(12.0, device="hybrid:1").reshape(3, 4)
    col = a[:, 1]
    assert col.data_ptr() == a.data_ptr() + 4
    col.mul_(10)
    assert a.cpu()[:, 1].tolist() == [10.0, 50.0, 90.0]
    t = a.t()
    assert t.is_contiguous() is False and t.stride() == (1, 4)
    parts = a.split(2, dim=1)
    assert all(p.device == a.device for p in parts)
    parts[1].zero_()
    assert a.cpu()[:, 2:].abs().sum() == 0


def test_out_variants_and_resize():
    a = torch.arange(6.0, device="hybrid:3")
    out = torch.empty(0, device="hybrid:3")
    r = torch.add(a, 1, out=out)
    assert r is out and out.shape == (6,) and out.device == a.device
    assert out.cpu().tolist() == [1, 2, 3, 4, 5, 6]
    z = torch.zeros(2, device="hybrid:3")
    z.resize_(5)
    assert z.shape == (5,) and z[:2].cpu().tolist() == [0, 0]


def test_metadata_changing_inplace_ops_write_back():
    a = torch.arange(6.0, device="hybrid:0").reshape(2, 3)
    a.t_()
    assert a.shape == (3, 2) and a.stride() == (1, 3)
    b = torch.ones(1, 3, 1, device="hybrid:0")
    b.squeeze_()
    assert b.shape == (3,)
    c = torch.arange(4.0, device="hybrid:0")
    c.as_strided_((2,), (2,))
    assert c.cpu().tolist() == [0.0, 2.0]


def test_cross_slot_ops_raise_like_cuda():
    a, b = torch.ones(2, device="hybrid:0"), torch.ones(2, device="hybrid:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*hybrid:0 and hybrid:1"):
        a + b


def test_cpu_scalars_accepted_cpu_tensors_refused():
    a = torch.ones(3, device="hybrid:4")
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(RuntimeError, match="hybrid:4 and cpu"):
        a + torch.ones(3)


def test_index_with_host_indices_is_accepted_as_on_cuda():
    a = torch.arange(10.0, device="hybrid:4")
    assert a[torch.tensor([1, 3])].cpu().tolist() == [1.0, 3.0]


def test_copies_between_host_and_slots():
    x = torch.randn(5, 7)
    h2 = x.to("hybrid:2", non_blocking=True)
    h6 = h2.to("hybrid:6")
    assert h6.device == torch.device("hybrid:6") and h6.data_ptr() != h2.data_ptr()
    assert torch.equal(h6.cpu(), x)
    assert torch.equal(h2.to(torch.float64).cpu(), x.double())
    noncontig = h2.t().to("hybrid:5")
    assert torch.equal(noncontig.cpu(), x.t())
    pinned = torch.ones(4).pin_memory()
    assert torch.equal(pinned.to("hybrid:1", non_blocking=True).cpu(), torch.ones(4))


def test_pin_memory_on_a_slot_is_refused_like_cuda():
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(2, device="hybrid:0", pin_memory=True)


def test_tensor_lists_and_multiple_outputs():
    xs = [torch.randn(3, device="hybrid:1") for _ in range(3)]
    torch._foreach_add_(xs, 1.0)
    stacked = torch.stack(xs)
    assert stacked.device == torch.device("hybrid:1") and stacked.shape == (3, 3)
    values, indices = stacked.max(dim=1)
    assert values.device == indices.device == torch.device("hybrid:1")
    assert torch.equal(values.cpu(), stacked.cpu().max(dim=1).values)


def test_autograd_matches_cpu():
    torch.manual_seed(1)
    w = torch.randn(6, 4, requires_grad=True)
    wh = w.detach().to("hybrid:5").requires_grad_()
    x = torch.randn(3, 6)
    (x @ w).tanh().sum().backward()
    (x.to("hybrid:5") @ wh).tanh().sum().backward()
    assert wh.grad.device == torch.device("hybrid:5")
    assert torch.equal(wh.grad.cpu(), w.grad)


def test_autocast_bf16_for_matmul_class():
    torch.manual_seed(2)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("hybrid", dtype=torch.bfloat16):
        y = on(0, a) @ on(0, b)
        s = torch.softmax(on(0, a), -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_cpu = a @ b
    assert y.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert torch.equal(y.cpu(), y_cpu)


def test_module_to_keeps_tied_weights_tied():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head}).to("hybrid:2")
    assert model["emb"].weight is model["head"].weight
    assert model["emb"].weight.device == torch.device("hybrid:2")
