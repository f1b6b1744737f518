"""Sparse tensors on a slot. COO tensors live there as on CUDA (their indices and values are the slot's, its
ops give the CPU's results, autograd included, and each is priced by the bytes it moves: csrc/aten/
HybridSparseCoo.cpp); compressed ones (CSR, CSC, BSR, BSC) are refused by name, with what to use instead, before
anything is allocated (csrc/aten/HybridSparse.cpp)."""

from __future__ import annotations

import pytest
import torch

import devices
import devices.cost
import interop  # noqa: F401  (the hybrid device)
from interop.timelines import PS

INDICES = torch.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
VALUES = torch.tensor([3.0, 4.0, 5.0, -6.0])


def _coo():
    return torch.sparse_coo_tensor(INDICES, VALUES, (3, 3))


def _csr_parts():
    csr = _coo().to_sparse_csr()
    return csr.crow_indices(), csr.col_indices(), csr.values()


def _on_cpu(t):
    return t.cpu().to_dense() if t.layout == torch.sparse_coo else t.cpu()


# Each case runs once on CPU tensors and once on the same tensors moved to hybrid:1.
COO_CASES = {
    "spmm": lambda a, x: torch.spmm(a, x),
    "mm": lambda a, x: torch.mm(a, x),
    "sparse.mm": lambda a, x: torch.sparse.mm(a, x),
    "addmm": lambda a, x: torch.addmm(x, a, x, beta=0.5, alpha=2.0),
    "matmul": lambda a, x: a @ x,
    "to_dense": lambda a, x: a.to_dense(),
    "coalesce": lambda a, x: (a + a).coalesce(),
    "add": lambda a, x: a + a * 2,
    "mul-scalar": lambda a, x: a * 3,
    "sparse.sum": lambda a, x: torch.sparse.sum(a),
    "sparse.sum-dim": lambda a, x: torch.sparse.sum(a, dim=1),
    "transpose": lambda a, x: a.t(),
    "sum-with-dense": lambda a, x: a.to_dense() + x @ x.t(),
    "from-dense": lambda a, x: (x @ x.t()).to_sparse(),
    "indices-values": lambda a, x: a.coalesce().indices().float().sum() + a.coalesce().values().sum(),
}


@pytest.mark.parametrize("case", list(COO_CASES))
def test_a_coo_tensor_on_a_slot_gives_the_cpus_results(case):
    x = torch.randn(3, 3)
    expected = COO_CASES[case](_coo(), x)
    got = COO_CASES[case](_coo().to("hybrid:1"), x.to("hybrid:1"))
    assert got.device == torch.device("hybrid:1") and got.layout == expected.layout
    assert torch.equal(_on_cpu(got), _on_cpu(expected))


def test_a_graph_convolution_trains_on_a_slot_as_on_the_cpu():
    # The pattern pytorch/examples' GCN uses: torch.mm with sparse features, torch.spmm with the adjacency.
    def train(device):
        torch.manual_seed(0)
        features = (torch.rand(12, 6) < 0.3).float().to_sparse()
        adj = (torch.eye(12) + (torch.rand(12, 12) < 0.2).float()).to_sparse()
        w = torch.randn(6, 4).to(device).requires_grad_()
        features, adj = features.to(device), adj.to(device)
        opt = torch.optim.Adam([w], lr=0.1)
        for _ in range(3):
            loss = torch.spmm(adj, torch.mm(features, w)).relu().pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss.detach().cpu(), w.detach().cpu()

    (loss_cpu, w_cpu), (loss_slot, w_slot) = train("cpu"), train("hybrid:1")
    assert torch.equal(loss_slot, loss_cpu) and torch.equal(w_slot, w_cpu)


def test_a_coo_tensor_made_on_a_slot_keeps_its_bytes_there():
    held = torch.hybrid.memory_allocated(1)
    made = torch.sparse_coo_tensor(INDICES.to("hybrid:1"), VALUES.to("hybrid:1"), (3, 3))
    moved = _coo().to("hybrid:1")
    zeros = torch.zeros(3, 3, layout=torch.sparse_coo, device="hybrid:1")
    for t in (made, moved, zeros):
        assert t.device == torch.device("hybrid:1") and t.layout == torch.sparse_coo
        assert t._indices().device == t._values().device == torch.device("hybrid:1")
    assert torch.equal(made.cpu().to_dense(), _coo().to_dense())
    assert torch.equal(moved.cpu().to_dense(), _coo().to_dense()) and moved._nnz() == 4
    assert zeros._nnz() == 0 and not zeros.cpu().to_dense().any()
    # Each holds its indices (int64) and values (float32); the allocator rounds each block up.
    assert torch.hybrid.memory_allocated(1) - held >= 2 * (INDICES.numel() * 8 + VALUES.numel() * 4)
    del made, moved, zeros
    assert torch.hybrid.memory_allocated(1) == held


@pytest.mark.usefixtures("fresh_timeline")
def test_a_sparse_product_is_priced_by_the_bytes_it_moves():
    n, nnz, cols = 4096, 300, 16
    adj = torch.sparse_coo_tensor(torch.randint(0, n, (2, nnz)), torch.rand(nnz), (n, n)).coalesce().to("hybrid:4")
    x = torch.randn(n, cols, device="hybrid:4")
    interop.reset_timeline()
    torch.spmm(adj, x)
    rec = next(r for r in interop.timeline() if r.op == "aten::mm")
    stored = adj._nnz()
    # Recorded as the COO tensor's indices and values, not the dense (n, n) it stands for.
    assert rec.in_shapes == ((2, stored), (stored,), (n, cols)) and rec.out_shapes == ((n, cols),)
    elements = 2 * stored + stored + 2 * n * cols
    expected = devices.cost.estimate_kernel("b200", "float32", bytes=elements * 4, name="aten::mm")
    assert rec.bytes == elements * 4 and rec.duration_ps == round(expected.seconds * PS)
    dense = devices.estimate("b200", "aten::mm", [(n, n), (n, cols)], "float32")
    assert rec.duration_ps < round(dense.seconds * PS)


def test_a_coo_tensor_and_a_host_tensor_are_two_devices_as_on_cuda():
    with pytest.raises(RuntimeError, match=r"found at least two devices, hybrid:1 and cpu! \(when checking "
                                           r"arguments for aten::mm\)"):
        torch.spmm(_coo().to("hybrid:1"), torch.ones(3, 2))


@pytest.mark.parametrize("make", [
    lambda: _coo().to_sparse_csr().to("hybrid:1"),
    lambda: _coo().to_sparse_csc().to("hybrid:1"),
    lambda: _coo().to_dense().to_sparse_bsr((1, 1)).to("hybrid:1"),
    lambda: _coo().to_sparse_csr().to(device="hybrid:1", dtype=torch.float64),
    lambda: torch.sparse_csr_tensor(*_csr_parts(), (3, 3), device="hybrid:1"),
    lambda: torch.sparse_compressed_tensor(*_csr_parts(), (3, 3), layout=torch.sparse_csr, device="hybrid:1"),
    lambda: torch.sparse_csr_tensor(*(t.to("hybrid:1") for t in _csr_parts()), (3, 3)),
    lambda: torch.zeros(3, 3, layout=torch.sparse_csr, device="hybrid:1"),
], ids=["csr-to-slot", "csc-to-slot", "bsr-to-slot", "csr-to-slot-with-dtype", "csr-made-on-slot",
        "compressed-made-on-slot", "csr-from-slot-parts", "csr-zeros-on-slot"])
def test_compressed_layouts_on_a_slot_are_refused_by_name(make):
    held = torch.hybrid.memory_allocated(1)
    with pytest.raises(NotImplementedError) as err:
        make()
    message = str(err.value)
    assert message.startswith("aten::") and ": a compressed sparse tensor (CSR, CSC, BSR, BSC) cannot be on " \
        "hybrid:1: slots hold strided and sparse COO tensors" in message
    assert "Instead: the COO tensor (t.to_sparse_coo().to(device)" in message
    assert torch.hybrid.memory_allocated(1) == held


@pytest.mark.parametrize("convert", [lambda t: t.to_sparse_csr(), lambda t: t.to_sparse(layout=torch.sparse_csc),
                                     lambda t: t.to_sparse_coo().to_sparse_csr()], ids=["csr", "csc", "coo-to-csr"])
def test_a_conversion_to_a_compressed_layout_on_a_slot_is_refused_by_name(convert):
    dense = _coo().to_dense().to("hybrid:1")
    held = torch.hybrid.memory_allocated(1)
    with pytest.raises(NotImplementedError, match=r"tensor cannot be on hybrid:1: slots hold strided and sparse "
                                                  r"COO tensors"):
        convert(dense)
    assert torch.hybrid.memory_allocated(1) == held


def test_compressed_tensors_still_convert_on_the_cpu_and_reach_a_slot_dense_or_as_coo():
    # Only a slot as the target of a compressed result is refused: the CPU's own conversions stay torch's.
    csr = _coo().to_sparse_csr()
    as_double = csr.to(torch.float64)
    assert as_double.layout == torch.sparse_csr and as_double.device.type == "cpu"
    assert torch.equal(as_double.to_dense(), _coo().to_dense().double())
    assert torch.equal(csr.to_dense().to("hybrid:1").cpu(), _coo().to_dense())
    assert torch.equal(csr.to_sparse_coo().to("hybrid:1").cpu().to_dense(), _coo().to_dense())
