"""The op ledger (interop.ledger(), counted in C++) and device fidelity (interop.set_strict, interop.divergences())
without the CUDA layer: counts checked against the ops issued, refusals against the capability table."""

from __future__ import annotations

import warnings

import pytest
import torch

import interop


def test_ledger_counts_each_op_by_slot_and_path(use_rack):
    use_rack("trn2:1+h100:1")
    interop.reset_ledger()
    a = torch.randn(8, 8, device="hybrid:1")
    for _ in range(3):
        a @ a
    b = a.view(64)
    c = a.to("hybrid:0")
    torch.mode(c, dim=0)  # an op with no CPU kernel of its own reaches the slot whole: a CPU composite
    led = interop.ledger()
    assert led.count("aten::mm", slot=1, path="zero-copy CPU kernel") == 3
    assert led.count("aten::mm", slot=0) == 0
    assert led.count("aten::view", slot=1, path="dedicated hybrid kernel") >= 1
    assert led.count("aten::_copy_from", path="dedicated hybrid kernel") >= 1
    assert led.by_op()["aten::mm"] == {"zero-copy CPU kernel": 3}
    assert led.count("aten::mode", slot=0) == 1
    assert {r.kind for r in led if r.slot == 1} == {"h100"}
    mm = next(r for r in led if r.op == "aten::mm")
    assert mm.default_estimate is False  # the cost model has a matmul formula (this run's timeline says so)
    assert "aten::mm" in led.table() and "zero-copy CPU kernel" in led.table()
    interop.reset_ledger()
    assert interop.ledger().count("aten::mm") == 0
    del a, b, c


def test_ledger_marks_ops_priced_by_the_default_estimate(use_rack):
    use_rack("h100:1")
    interop.reset_ledger()
    interop.reset_timeline()
    x = torch.randn(16, device="hybrid:0")
    torch.special.zeta(x, x)  # no cost rule: bytes-only estimate
    led = interop.ledger()
    assert "aten::special_zeta" in led.default_estimated()
    assert next(r for r in led if r.op == "aten::special_zeta").default_estimate is True
    del x


def test_default_mode_runs_warns_once_and_lists(use_rack):
    use_rack("trn2:1+h100:1")
    interop.fidelity.reset()
    a = torch.randn(4, 4, device="hybrid:0", dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            y = a @ a  # still computed: the CPU's exact result
    torch.testing.assert_close(y.cpu(), a.cpu() @ a.cpu(), rtol=0, atol=0)
    fidelity = [w for w in caught if issubclass(w.category, interop.FidelityWarning)]
    assert len(fidelity) == 1 and "would fail on a real trn2" in str(fidelity[0].message)
    assert fidelity[0].filename == __file__  # the warning points at the line that ran the op
    div = next(d for d in interop.divergences() if d.op == "aten::mm" and d.dtype == "float64")
    assert div.kind == "trn2" and div.level == "unsupported" and div.count == 3
    # The warning stays one readable line; the source travels with the divergence.
    assert "https://" not in str(fidelity[0].message) and "https://" in div.source and "NKI" in div.source
    assert div.sites[0].endswith(f"{__name__.split('.')[-1]}.py:{fidelity[0].lineno}")
    del a, y


def test_strict_raises_the_real_stacks_error_and_writes_nothing(use_rack):
    use_rack("trn2:1+h100:1")
    interop.fidelity.reset()
    f8 = torch.randn(16, 16, device="hybrid:1").to(torch.float8_e4m3fn)
    out = torch.zeros(16, 16, device="hybrid:1").to(torch.float8_e4m3fn)
    interop.set_strict(True)
    try:
        with pytest.raises(NotImplementedError, match=r"\"addmm_cuda\" not implemented for 'Float8_e4m3fn'"):
            torch.mm(f8, f8, out=out)
        assert torch.count_nonzero(out.float()).item() == 0  # refused before anything was written
        with pytest.raises(NotImplementedError, match="NKI"):
            torch.ones(2, device="hybrid:0", dtype=torch.float64) * 2
        f8[0] = 0  # data movement of float8 is native on an H100: allowed in strict mode
        torch._scaled_mm(f8, f8.t().contiguous().t(), torch.tensor(1.0, device="hybrid:1"),
                         torch.tensor(1.0, device="hybrid:1"), out_dtype=torch.bfloat16)  # CUDA's way: allowed
    finally:
        interop.set_strict(False)
    torch.mm(f8, f8, out=out)  # default mode again: runs
    del f8, out


def test_native_work_never_reaches_the_check(use_rack):
    use_rack("trn2:1")
    interop.fidelity.reset()
    x = torch.randn(32, 32, device="hybrid:0", dtype=torch.bfloat16)
    (x @ x).float().sum()
    assert interop.divergences() == []
    del x


def test_int64_on_trainium_is_a_conversion_not_a_refusal(use_rack):
    use_rack("trn2:1")
    interop.fidelity.reset()
    interop.set_strict(True)
    try:
        i = torch.arange(10, device="hybrid:0")
        (i * 3).sum()  # runs even in strict mode: the Neuron stack computes int64 as int32
    finally:
        interop.set_strict(False)
    levels = {d.level for d in interop.divergences()}
    assert levels == {"converted"}
    del i


def test_ledger_and_divergences_are_per_rack(use_rack):
    """hybrid:0 of one rack is not hybrid:0 of another: each rack's counts, kinds and divergences are its
    own, a retired rack's tensor copied to the host counts on its rack, and a refused op counts nowhere."""
    interop.reset_ledger()
    interop.fidelity.reset()
    trn = use_rack("trn2:1")
    a = torch.ones(4, 4, device="hybrid:0", dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", interop.FidelityWarning)
        a @ a
    gpu = use_rack("h100:1")
    b = torch.ones(4, 4, device="hybrid:0", dtype=torch.float64)
    for _ in range(2):
        b @ b  # float64 matmul is native on an H100: no divergence, and trn2's verdict does not leak here
    with pytest.raises(RuntimeError, match="rack"):
        a @ a  # a retired rack's tensor: refused, counted on neither rack
    host = a.cpu()  # allowed: the copy counts on a's own rack
    assert torch.equal(host, torch.ones(4, 4, dtype=torch.float64))

    on_trn, on_gpu, every = interop.ledger(trn), interop.ledger(gpu), interop.ledger()
    assert on_trn.count("aten::mm") == 1 and on_gpu.count("aten::mm") == 2 and every.count("aten::mm") == 3
    assert {r.kind for r in on_trn} == {"trn2"} and {r.kind for r in on_gpu} == {"h100"}
    assert {r.rack for r in on_trn} == {trn.label} and {r.rack for r in on_gpu} == {gpu.label}
    assert on_trn.count("aten::_copy_from") == 1 and on_gpu.count("aten::_copy_from") == 0
    assert next(r for r in on_trn if r.op == "aten::mm").default_estimate is False  # from trn's own timeline
    assert "rack" in every.table().splitlines()[0] and "rack" not in on_gpu.table().splitlines()[0]
    with pytest.raises(TypeError, match="rack"):
        interop.ledger("h100:1")

    mm = [d for d in interop.divergences() if d.op == "aten::mm"]
    assert [(d.rack, d.kind, d.dtype, d.count) for d in mm] == [(trn.label, "trn2", "float64", 1)]
    del a, b, host
