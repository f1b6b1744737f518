"""In-process collectives over hybrid slots: exact results, clear errors before
any write, and the modelled time placed on every participant's timeline."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import collectives
import interop
from collectives import verify
from collectives import in_process as hc
from interop.commands.collective_tools import bench, check, run_case

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "gather", "scatter"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(OPS), p=st.integers(1, 8), count=st.sampled_from([0, 1, 2, 7, 13, 64, 97]),
       dtype=st.sampled_from(["float32", "float64", "bfloat16", "float16", "int32", "int64", "uint8"]),
       data=st.data())
def test_random_cases_are_exact(op, p, count, dtype, data):
    dt = verify.DTYPES[dtype]
    redop = "sum"
    if op in ("all_reduce", "reduce_scatter", "reduce"):
        choices = ["sum", "prod", "min", "max", "premul_sum"]
        choices += ["avg"] + ([] if dt.is_floating_point else ["band", "bor", "bxor"])
        redop = data.draw(st.sampled_from(choices))
    root = data.draw(st.integers(0, p - 1))
    slots = data.draw(st.permutations(range(8)))[:p]
    result, wrong, _, wrong_ip, _ = run_case(op, list(slots), count, dt, redop, root=root)
    assert wrong == 0 and (wrong_ip or 0) == 0, (op, p, count, dtype, redop, result.estimate.algorithm)


@pytest.mark.parametrize("op, algorithm, rack", [
    ("all_reduce", "ring", None), ("all_reduce", "tree", None), ("all_reduce", "rabenseifner", None),
    ("all_reduce", "direct", None), ("all_reduce", "in_switch", "h100-node"), ("broadcast", "binomial", None),
    ("all_reduce", "hierarchical", "trn3:4+h100:4"), ("all_reduce", "torus", "trn2-instance"),
])
def test_every_algorithm_runs_exactly(op, algorithm, rack, use_rack):
    if rack is not None:
        use_rack(rack)
    p = min(8, len(interop.current_rack()))
    slots = list(range(len(interop.current_rack()))) if algorithm == "torus" else list(range(p))
    result, wrong, _, wrong_ip, _ = run_case(op, slots, 1031, torch.float32, "sum", algorithm=algorithm)
    assert result.estimate.algorithm == algorithm and wrong == 0 and (wrong_ip or 0) == 0


def test_random_floats_against_float64_reference():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(10_000, generator=g) for _ in range(8)]
    ref = torch.stack([x.double() for x in xs]).sum(0)
    ts = [x.to(f"hybrid:{i}") for i, x in enumerate(xs)]
    hc.all_reduce(ts)
    for t in ts:
        # float32 partial sums in some order: within 8 additions of float32 rounding of the magnitudes
        bound = 8 * torch.finfo(torch.float32).eps * torch.stack([x.double().abs() for x in xs]).sum(0)
        assert ((t.cpu().double() - ref).abs() <= bound).all()


def test_modelled_time_is_the_estimate_and_lands_on_every_participant():
    interop.reset_timeline()
    slots = [0, 4, 5]
    ts = [torch.ones(1 << 16, device=f"hybrid:{s}") for s in slots]
    torch.mm(torch.ones(256, 256, device="hybrid:4"), torch.ones(256, 256, device="hybrid:4"))  # slot 4 busy first
    result = hc.all_reduce(ts, algorithm="ring")
    est = collectives.plan(interop.current_rack().spec, "all_reduce", 1 << 16, 4, slots, "ring").estimate
    assert result.estimate.seconds == est.seconds
    # The byte-level estimate chunks in bytes rather than float32 elements: the same up to rounding.
    by_bytes = collectives.estimate(interop.current_rack().spec, "all_reduce", (1 << 16) * 4, algorithm="ring",
                                    slots=slots)
    assert by_bytes.seconds == pytest.approx(est.seconds, rel=1e-5)
    recs = interop.timeline()
    coll = next(r for r in recs if r.kind == "collective")
    mm = next(r for r in recs if r.op == "aten::mm")
    assert coll.participants == tuple(slots) and coll.duration_ps == round(est.seconds * 1e12)
    assert coll.start_ps == mm.end_ps  # waits for the busiest participant
    rep = interop.report()
    for s in slots:
        assert rep.slot(s).busy_s >= coll.duration
    assert any(link.link.startswith("collective") for link in rep.links)


def _outputs_untouched(fn, outputs):
    before = [o.cpu().clone() for o in outputs]
    with pytest.raises((ValueError, TypeError)) as err:
        fn()
    for a, o in zip(before, outputs):
        assert torch.equal(a, o.cpu()), "an output was written before the error"
    return str(err.value)


def test_bad_inputs_raise_before_writing():
    outs = [torch.full((4,), 7.0, device=f"hybrid:{i}") for i in range(3)]
    ins = [torch.ones(4, device=f"hybrid:{i}") for i in range(3)]
    msg = _outputs_untouched(lambda: hc.all_reduce([ins[0], ins[1], torch.ones(5, device="hybrid:2")],
                                                   outputs=outs), outs)
    assert "shape" in msg or "elements" in msg
    msg = _outputs_untouched(lambda: hc.all_reduce([ins[0], ins[1], torch.ones(4, device="hybrid:2").double()],
                                                   outputs=outs), outs)
    assert "dtype" in msg
    msg = _outputs_untouched(lambda: hc.all_reduce([ins[0], ins[1], torch.ones(4)], outputs=outs), outs)
    assert "hybrid slot" in msg
    msg = _outputs_untouched(lambda: hc.all_reduce([ins[0], ins[1], torch.ones(4, device="hybrid:1")],
                                                   outputs=outs), outs)
    assert "hybrid:1" in msg and "own slot" in msg
    msg = _outputs_untouched(lambda: hc.all_reduce(ins, op="band", outputs=outs), outs)
    assert "band" in msg
    bools = [torch.ones(4, dtype=torch.bool, device=f"hybrid:{i}") for i in range(3)]
    bool_outs = [torch.zeros(4, dtype=torch.bool, device=f"hybrid:{i}") for i in range(3)]
    assert "avg" in _outputs_untouched(lambda: hc.all_reduce(bools, op="avg", outputs=bool_outs), bool_outs)
    with pytest.raises(ValueError, match="reduce op"):
        hc.all_reduce(ins, op="median")
    with pytest.raises(ValueError, match="algorithm"):
        hc.all_reduce(ins, algorithm="carrier-pigeon")
    with pytest.raises(ValueError, match="root"):
        hc.broadcast(ins, root=3)


def test_uneven_all_to_all_and_zero_splits():
    p = 3
    splits = [[0, 2, 1], [3, 0, 0], [1, 1, 4]]
    ins = [torch.arange(sum(splits[i]), dtype=torch.float32, device=f"hybrid:{i}") + 100 * i for i in range(p)]
    res = hc.all_to_all(ins, splits=splits)
    for j in range(p):
        expected = []
        for i in range(p):
            start = sum(splits[i][:j])
            expected += (torch.arange(start, start + splits[i][j]) + 100 * i).tolist()
        assert res.outputs[j].cpu().tolist() == expected


def test_send_recv_and_barrier():
    src = torch.arange(10.0, device="hybrid:1")
    dst = torch.zeros(10, device="hybrid:6")
    res = hc.send_recv(src, dst)
    assert torch.equal(dst.cpu(), torch.arange(10.0)) and res.estimate.seconds > 0
    assert hc.barrier([0, 3, 7]).slots == (0, 3, 7)


def test_check_reports_wrong_elements(monkeypatch):
    real = hc.run

    def corrupting(op, inputs, outputs, **kw):
        res = real(op, inputs, outputs, **kw)
        for o in outputs:
            if o is not None and o.numel():
                o.view(-1)[0] = 12345
        return res

    assert check(participants=(2,), sizes=(5,), dtypes=("float32",), ops=("all_reduce",), algorithms=False,
                 progress=False, printer=lambda *_: None) == 0
    monkeypatch.setattr(hc, "run", corrupting)
    assert check(participants=(2,), sizes=(5,), dtypes=("float32",), ops=("all_reduce",), algorithms=False,
                 progress=False, printer=lambda *_: None) > 0


def test_bench_prints_the_nccl_tests_table_within_120_columns(use_rack):
    use_rack("trn3:4+h100:4")  # its all-reduce is hierarchical: the longest algorithm name
    lines = []
    rows = bench("all_reduce", [8, 1 << 16], algorithm="hierarchical", printer=lines.append)
    assert max(len(line) for line in lines) <= 120, lines
    printed = [line.split() for line in lines if not line.startswith("#")]
    assert printed == [[str(r.nbytes), str(r.count), "float32", "sum", "0", "hierarchical", f"{r.modelled_us:.2f}",
                        f"{r.algbw:.2f}", f"{r.busbw:.2f}", "0", f"{r.measured_oop_us:.1f}", "0",
                        f"{r.measured_ip_us:.1f}"] for r in rows]
    # every header ends over its column (right-aligned, as nccl-tests prints them)
    head = next(line for line in lines if "algorithm" in line)
    ends = [[m.end() for m in re.finditer(r"\S+", line)] for line in (head, lines[-2])]
    assert ends[0][1:] == ends[1], lines
