"""The hottest ops' unboxed kernels (csrc/aten/HybridUnboxed.cpp) do what the boxed fallback does.

``_C._set_unboxed(False)`` sends the same ops through the fallback itself, so each test runs the same code on both
paths and asserts equality: the values (bit for bit, and equal to the CPU's), the timeline (every field of every
record), the op ledger, the errors and the failure noted for a crash report, and strict device fidelity."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch

import interop
from interop import _C

pytestmark = pytest.mark.usefixtures("fresh_timeline")


@pytest.fixture
def on_both_paths():
    """Calls ``fn`` with the unboxed kernels on, then with them off, and returns both results."""

    def run(fn):
        results = []
        for unboxed in (True, False):
            previous = _C._set_unboxed(unboxed)
            try:
                results.append(fn())
            finally:
                _C._set_unboxed(previous)
        return results

    return run


def _training_steps(device):
    """Two AdamW (foreach=False) steps over a small net, then the routed ops in the forms a loop meets them:
    one tensor as two arguments, in place on a view, a 0-d host tensor beside the slot's, int64, a bool
    condition, an optional bound left None, autocast."""
    torch.manual_seed(0)
    w = torch.randn(8, 4).to(device).requires_grad_()
    b = torch.zeros(4).to(device).requires_grad_()
    x = torch.randn(5, 8).to(device)
    opt = torch.optim.AdamW([w, b], lr=1e-2, foreach=False)
    for _ in range(2):
        opt.zero_grad()
        y = torch.nn.functional.gelu(torch.addmm(b, x, w)).sigmoid().tanh()
        (y * 2 + 1).pow(2).sum().backward()
        opt.step()
    a = torch.arange(6.0).to(device).view(2, 3)
    a[0].mul_(a[0])
    c = a.add(torch.tensor(1.5), alpha=2)
    d = torch.where(c > 3, c, -c).clamp(min=0.5).reciprocal().rsqrt().lerp_(c, 0.25)
    i = torch.arange(4).to(device).mul(3).sub_(1)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        z = torch.mm(x, w.detach())
    return [t.detach().cpu() for t in (w, b, a, c, d, i, z)]


def _records():
    return [dataclasses.astuple(r) for r in interop.timeline()]


def _ledger():
    return collections.Counter({(r[0], r[3], r[5]): r[6] for r in _C._ledger()})


def test_the_loops_ops_are_routed_unboxed():
    routed = set(_C._unboxed_ops)
    # What the MLP's AdamW and GPT-2's forward and backward run most (benchmarks/training_loops.py).
    assert {"add_.Tensor", "add.Tensor", "mul.Tensor", "mul_.Tensor", "addcmul_", "addcdiv_", "lerp_.Scalar",
            "sqrt", "div.Tensor", "mm", "addmm", "bmm", "fill_.Scalar"} <= routed
    for name in routed:  # a kernel of the hybrid key now, where the fallback served before
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1"), name


def test_values_timeline_and_ledger_equal_the_fallbacks(on_both_paths):
    reference = _training_steps("cpu")

    def run():
        interop.reset_timeline()
        interop.reset_ledger()
        values = _training_steps("hybrid:4")
        return values, _records(), _ledger()

    (unboxed, unboxed_records, unboxed_ledger), (boxed, boxed_records, boxed_ledger) = on_both_paths(run)
    for u, b, r in zip(unboxed, boxed, reference):
        assert torch.equal(u, r) and torch.equal(b, r)
    assert unboxed_records == boxed_records
    assert unboxed_ledger == boxed_ledger
    routed = {f"aten::{name}" for name in _C._unboxed_ops}
    assert {op for op, _, _ in unboxed_ledger} & routed >= {"aten::addmm", "aten::lerp_.Scalar", "aten::mul_.Tensor"}


def test_the_same_errors_and_noted_failures(on_both_paths):
    a = torch.ones(3, device="hybrid:4")

    def attempt(fn):
        _C._clear_last_failure()
        with pytest.raises(RuntimeError) as raised:
            fn()
        return str(raised.value).split("\n")[0], _C._last_failure()

    def run():
        return [
            attempt(lambda: a.add_(torch.ones(3, device="hybrid:5"))),  # two slots
            attempt(lambda: a.mul(torch.ones(3))),  # a host tensor CUDA would refuse
            attempt(lambda: a.add_(torch.ones(2, device="hybrid:4"))),  # the CPU kernel's own error
        ]

    unboxed, boxed = on_both_paths(run)
    assert unboxed == boxed
    assert "hybrid:4 and hybrid:5" in unboxed[0][0] and "hybrid:4 and cpu" in unboxed[1][0]
    assert unboxed[0][1][:2] == ("aten::add_", -1)  # refused before a slot was settled
    assert unboxed[2][1][:2] == ("aten::add_", 4) and "must match" in unboxed[2][1][2]
    assert torch.equal(a.cpu(), torch.ones(3))


def test_strict_fidelity_refuses_on_both_paths(use_rack, on_both_paths):
    use_rack("trn2:1")
    x = torch.ones(4, dtype=torch.float64).to("hybrid:0")  # a copy: data movement, native in float64

    def run():
        interop.set_strict(True)
        try:
            with pytest.raises(NotImplementedError, match="NKI") as raised:
                x.mul_(2)
        finally:
            interop.set_strict(False)
        return str(raised.value), x.cpu()

    unboxed, boxed = on_both_paths(run)
    assert unboxed[0] == boxed[0]
    assert torch.equal(unboxed[1], torch.ones(4, dtype=torch.float64))  # refused before anything was written
    assert torch.equal(boxed[1], torch.ones(4, dtype=torch.float64))
    del x
