"""Sparse COO and compressed (CSR...) tensors on a slot are refused by name, with what to use instead, before
anything is allocated, whether made there or moved there (csrc/aten/HybridSparse.cpp); the alternatives it names
give the CPU's product."""

from __future__ import annotations

import pytest
import torch

import interop  # noqa: F401  (the hybrid device)

INDICES = torch.tensor([[0, 1, 1], [2, 0, 2]])
VALUES = torch.tensor([3.0, 4.0, 5.0])


def _coo():
    return torch.sparse_coo_tensor(INDICES, VALUES, (2, 3))


def _csr_parts():
    csr = _coo().to_sparse_csr()
    return csr.crow_indices(), csr.col_indices(), csr.values()


@pytest.mark.parametrize("make", [
    lambda: _coo().to("hybrid:1"),
    lambda: _coo().to_sparse_csr().to("hybrid:1"),
    lambda: _coo().to_sparse_csc().to("hybrid:1"),
    lambda: _coo().to_dense().to_sparse_bsr((1, 1)).to("hybrid:1"),
    lambda: _coo().to_sparse_csr().to(device="hybrid:1", dtype=torch.float64),
    lambda: torch.sparse_csr_tensor(*_csr_parts(), (2, 3), device="hybrid:1"),
    lambda: torch.sparse_compressed_tensor(*_csr_parts(), (2, 3), layout=torch.sparse_csr, device="hybrid:1"),
    lambda: torch.sparse_csr_tensor(*(t.to("hybrid:1") for t in _csr_parts()), (2, 3)),
    lambda: torch.zeros(2, 3, layout=torch.sparse_csr, device="hybrid:1"),
    lambda: torch.sparse_coo_tensor(INDICES, VALUES, (2, 3), device="hybrid:1"),
    lambda: torch.spmm(_coo(), torch.ones(3, 2, device="hybrid:1")),
], ids=["coo-to-slot", "csr-to-slot", "csc-to-slot", "bsr-to-slot", "csr-to-slot-with-dtype", "csr-made-on-slot", "compressed-made-on-slot", "csr-from-slot-parts", "csr-zeros-on-slot", "coo-made-on-slot", "spmm-with-a-slot-operand"])
def test_sparse_layouts_on_a_slot_are_refused_by_name(make):
    held = torch.hybrid.memory_allocated(1)
    with pytest.raises(NotImplementedError) as err:
        make()
    message = str(err.value)
    assert message.startswith("aten::") and ": a sparse tensor cannot be on hybrid:1: slots hold strided tensors" \
        in message
    assert "Instead: a dense tensor on the slot (adj.to_dense().to(device)" in message
    assert torch.hybrid.memory_allocated(1) == held


def test_the_named_alternatives_give_the_cpus_product():
    x = torch.randn(3, 2)
    expected = torch.spmm(_coo(), x)
    dense = _coo().to_dense().to("hybrid:1") @ x.to("hybrid:1")
    kept = torch.sparse.mm(_coo(), x.to("hybrid:1").cpu()).to("hybrid:1")
    torch.testing.assert_close(dense.cpu(), expected)  # a dense product: the same sums, in another order
    assert torch.equal(kept.cpu(), expected)


def test_compressed_tensors_still_convert_on_the_cpu_and_reach_a_slot_dense():
    # Only a slot as the target of a sparse result is refused: the CPU's own conversions stay torch's.
    csr = _coo().to_sparse_csr()
    as_double = csr.to(torch.float64)
    assert as_double.layout == torch.sparse_csr and as_double.device.type == "cpu"
    assert torch.equal(as_double.to_dense(), _coo().to_dense().double())
    assert torch.equal(csr.to("cpu").to_dense(), _coo().to_dense())
    assert torch.equal(csr.to_dense().to("hybrid:1").cpu(), _coo().to_dense())
