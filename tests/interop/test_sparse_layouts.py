"""Sparse COO and compressed (CSR...) tensors on a slot are refused by name, with what to use instead, before
anything is allocated (csrc/aten/HybridSparse.cpp); the alternatives it names give the CPU's product."""

from __future__ import annotations

import pytest
import torch

import interop  # noqa: F401  (the hybrid device)

INDICES = torch.tensor([[0, 1, 1], [2, 0, 2]])
VALUES = torch.tensor([3.0, 4.0, 5.0])


def _coo():
    return torch.sparse_coo_tensor(INDICES, VALUES, (2, 3))


@pytest.mark.parametrize("make", [
    lambda: _coo().to("hybrid:1"),
    pytest.param(lambda: _coo().to_sparse_csr().to("hybrid:1"), marks=pytest.mark.xfail(
        strict=True, reason="known hole: torch moves a compressed tensor to another device without dispatching on "
        "the target (neither _to_copy nor a SparseCsrPrivateUse1 kernel is reached), so the CSR tensor lands on the "
        "slot; its first matmul or to_dense is refused by name, .cpu() and elementwise ops raise torch's own error")),
    lambda: torch.sparse_coo_tensor(INDICES, VALUES, (2, 3), device="hybrid:1"),
    lambda: torch.spmm(_coo(), torch.ones(3, 2, device="hybrid:1")),
], ids=["coo-to-slot", "csr-to-slot", "coo-made-on-slot", "spmm-with-a-slot-operand"])
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
