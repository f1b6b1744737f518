"""The planner's trace records an op the way a slot runs it (devices.cost.trace_ops(composites_of=...)): an ATen
op that the hybrid backend has no kernel of its own for runs its composite, so the trace records the composite's
parts (``select_backward`` as ``zero_`` and ``copy_``) as the slot's timeline does; an op the backend implements
stays one record, and a library's own composite (which may need data) is left to its meta kernel."""

from __future__ import annotations

import collections

import torch

import interop  # noqa: F401  (registers the backend's kernels, whose presence the expansion reads)
from devices.cost import trace_ops


def _select_backward(x):
    (x.select(-1, 0) * 2).sum().backward()


def _ops(records):
    return collections.Counter(r.op for r in records)


def test_a_composite_the_slot_expands_is_recorded_as_its_parts():
    x = torch.randn(4, 8, 2, requires_grad=True)
    plain = _ops(trace_ops(_select_backward, x))
    expanded = _ops(trace_ops(_select_backward, x, composites_of="PrivateUse1"))
    assert plain["aten::select_backward"] == 1
    assert expanded["aten::select_backward"] == 0
    assert expanded["aten::zero_"] == 1 and expanded["aten::copy_"] == 1  # copy_ has a meta shortcut: kept whole


def test_the_expansion_matches_the_slots_own_timeline(fresh_timeline):
    """Reference: the records the slot placed for the same code (ops with a cost: views and allocations
    excluded on both sides)."""
    x = torch.randn(4, 8, 2)
    traced = [r.op for r in trace_ops(_select_backward, x.requires_grad_(), composites_of="PrivateUse1")
              if r.op in ("aten::zero_", "aten::copy_", "aten::mul.Tensor", "aten::sum.dim_IntList")]
    xs = x.detach().to("hybrid:0").requires_grad_()
    interop.reset_timeline()  # the upload is no part of the comparison
    _select_backward(xs)
    torch.hybrid.synchronize()
    placed = [("aten::copy_" if r.kind == "copy" else r.op) for r in interop.timeline()
              if r.op in ("aten::zero_", "aten::mul.Tensor", "aten::sum.dim_IntList")
              or (r.kind == "copy" and r.slot == r.peer)]
    assert collections.Counter(traced) == collections.Counter(placed)


def test_an_op_the_backend_implements_stays_one_record():
    def softmax(x):
        return torch.log_softmax(x, -1)  # the CPU's kernel on a slot (CPU parity), one op

    records = trace_ops(softmax, torch.randn(3, 5), composites_of="PrivateUse1")
    assert [r.op for r in records] == ["aten::_log_softmax"]
