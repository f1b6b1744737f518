"""Collective schedules run on real tensors: nccl-tests-style exact checks, validation, in-place use, hypothesis."""

from __future__ import annotations


import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectives import algorithms
from collectives.executor import execute, run
from collectives.verify import check, expected_and_inputs
from collectives.ops import REDUCE_OPS
from collectives.schedule import CollectiveSpec, check as check_schedule, inplace_safe

PAIRS = [(a, op) for a in algorithms.names() if a not in ("hierarchical", "torus")
         for op in sorted(algorithms.get(a).ops)]
SIZES = [0, 1, 7, 101, 1000]  # zero, one, prime, larger


def _participants(op: str):
    return [2] if op == "send_recv" else list(range(1, 18))


@pytest.mark.parametrize("algo,op", PAIRS)
def test_every_algorithm_and_op_is_exact_for_1_to_17_participants(algo, op):
    alg = algorithms.get(algo)
    for p in _participants(op):
        for count in SIZES:
            for k in ([1, 3] if op in alg.pipelined else [1]):
                res = check(op, algo, p, count, torch.float32, "sum", root=(p - 1) // 2, pipeline=k, seed=p + count)
                assert res.wrong == 0, (algo, op, p, count, k)
                check_schedule(res.schedule)


@pytest.mark.parametrize("outer", ["ring", "rabenseifner", "tree", "direct"])
def test_hierarchical_is_exact(outer):
    for n_groups, size in [(2, 1), (2, 2), (3, 3), (2, 5), (5, 2)]:
        p = n_groups * size
        groups = [list(range(g * size, (g + 1) * size)) for g in range(n_groups)]
        for count in SIZES:
            for reduce_op, dtype in [("sum", torch.float32), ("max", torch.int32), ("prod", torch.bfloat16)]:
                res = check("all_reduce", "hierarchical", p, count, dtype, reduce_op, groups=groups, outer=outer,
                            pipeline=2)
                assert res.wrong == 0, (outer, n_groups, size, count, reduce_op)
                check_schedule(res.schedule)
                assert check("all_reduce", "hierarchical", p, count, dtype, reduce_op, groups=groups, outer=outer,
                             inplace=True).wrong == 0


@pytest.mark.parametrize("shape", [(4, 4), (3, 3), (2, 2, 2, 2), (2, 3), (5,), (1, 4), (3, 1, 2), (1,)])
def test_torus_is_exact(shape):
    p = 1
    for d in shape:
        p *= d
    for count in SIZES:
        for reduce_op, dtype in [("sum", "float32"), ("max", "int8"), ("prod", "bfloat16"), ("avg", "float16")]:
            res = check("all_reduce", "torus", p, count, dtype, reduce_op, torus=shape)
            assert res.wrong == 0, (shape, count, reduce_op)
            check_schedule(res.schedule)
            assert check("all_reduce", "torus", p, count, dtype, reduce_op, torus=shape, inplace=True).wrong == 0


REDUCE_DTYPES = {
    "sum": ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "int32", "int64",
            "uint8"],
    "prod": ["float32", "bfloat16", "float8_e5m2", "int8", "int64", "uint8"],
    "min": ["float32", "float16", "float8_e4m3fn", "int16", "uint8", "bool"],
    "max": ["float64", "bfloat16", "int8", "int32", "bool"],
    "avg": ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn"],
    "premul_sum": ["float32", "bfloat16", "int32"],
    "band": ["int8", "int64", "uint8", "bool"],
    "bor": ["int16", "uint8", "bool"],
    "bxor": ["int32", "uint8", "bool"],
}
# Pairs the one rule of collectives.ops.REDUCE_RULES (NCCL's) added: integer avg, bool sum and prod.
RULE_DTYPES = {"sum": ["bool"], "prod": ["bool"], "avg": ["int8", "int32", "uint8"]}
REDUCING = [(a, op) for a, op in PAIRS if op in ("all_reduce", "reduce_scatter", "reduce")]


@pytest.mark.parametrize("reduce_op", REDUCE_OPS)
def test_reduce_ops_and_dtypes_are_exact(reduce_op):
    for algo, op in REDUCING:
        for dtype in REDUCE_DTYPES[reduce_op] + RULE_DTYPES.get(reduce_op, []):
            for p, count in [(1, 5), (3, 13), (8, 37), (17, 4)]:
                res = check(op, algo, p, count, dtype, reduce_op, root=p // 2, pipeline=2)
                assert res.wrong == 0, (algo, op, reduce_op, dtype, p, count)


# The sweep every run makes: sum over every participant count and size in the dtypes whose accumulation order
# shows (a low-precision float, an 8-bit float, a wrapping integer) and float32; --exhaustive takes every dtype.
SWEPT_SUM_DTYPES = ["float32", "bfloat16", "float8_e4m3fn", "int8"]


@pytest.mark.slow
@pytest.mark.parametrize("reduce_op", [op if op == "sum" else pytest.param(op, marks=pytest.mark.exhaustive)
                                       for op in REDUCE_OPS])
def test_reduce_ops_full_sweep(reduce_op, request):
    exhaustive = request.config.getoption("--exhaustive", default=False)
    dtypes = REDUCE_DTYPES[reduce_op] if exhaustive or reduce_op != "sum" else SWEPT_SUM_DTYPES
    for algo, op in REDUCING:
        for dtype in dtypes:
            for p in range(1, 18):
                for count in SIZES:
                    res = check(op, algo, p, count, dtype, reduce_op, root=p - 1, pipeline=3)
                    assert res.wrong == 0, (algo, op, reduce_op, dtype, p, count)


@pytest.mark.parametrize("dtype", ["float8_e5m2", "bfloat16", "int64", "bool", "uint8"])
def test_data_movement_is_bit_exact_in_any_dtype(dtype):
    for algo, op in PAIRS:
        if op in ("all_reduce", "reduce_scatter", "reduce", "barrier"):
            continue
        for p in ([2] if op == "send_recv" else [1, 4, 9]):
            assert check(op, algo, p, 11, dtype, root=p - 1).wrong == 0, (algo, op, dtype, p)


IN_PLACE_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


@pytest.mark.parametrize("algo,op", [pair for pair in PAIRS if pair[1] in IN_PLACE_OPS])
def test_in_place(algo, op):
    for p in [1, 2, 3, 6, 8]:
        for count in [1, 29]:
            for dtype, reduce_op in [(torch.float32, "sum"), (torch.float16, "max"), (torch.int64, "bxor")]:
                res = check(op, algo, p, count, dtype, reduce_op, root=p // 2, inplace=True, pipeline=2)
                assert res.wrong == 0, (algo, op, p, count, dtype)


def test_tiled_execution_is_exact(monkeypatch):
    # Large aligned schedules run tile by tile; tiny tiles exercise that path on small buffers.
    from collectives import executor

    monkeypatch.setattr(executor, "TILE_BYTES", 24)
    for algo, op in PAIRS:
        if op not in IN_PLACE_OPS:
            continue
        for p in [1, 2, 3, 5, 8]:
            for count, dtype, reduce_op in [(101, torch.float32, "sum"), (257, torch.bfloat16, "max"),
                                            (64, torch.int32, "bxor")]:
                for inplace in (False, True):
                    res = check(op, algo, p, count, dtype, reduce_op, root=p // 2, pipeline=3, inplace=inplace)
                    assert res.wrong == 0, (algo, op, p, count, dtype, inplace)
    for shape in [(4, 4), (2, 3)]:
        assert check("all_reduce", "torus", 4 * 4 if shape == (4, 4) else 6, 333, torus=shape).wrong == 0
    groups = [[0, 1, 2], [3, 4, 5]]
    assert check("all_reduce", "hierarchical", 6, 333, groups=groups, outer="tree", pipeline=2).wrong == 0


def test_all_to_allv_uneven_splits():
    splits = ((0, 3, 1, 7), (2, 0, 0, 5), (9, 1, 4, 0), (0, 0, 0, 0))
    res = check("all_to_all", "direct", 4, 0, torch.int32, splits=splits)
    assert res.wrong == 0 and res.elements == sum(map(sum, splits))
    gen = torch.Generator().manual_seed(3)
    for p in [1, 2, 5, 11]:
        m = torch.randint(0, 6, (p, p), generator=gen).tolist()
        assert check("all_to_all", "direct", p, 0, torch.float16, splits=tuple(map(tuple, m))).wrong == 0


def test_in_place_safety_analysis_matches_reality():
    # A schedule that reads its input after overwriting it in place must be detected; the executor
    # then copies the input, and the result stays exact either way.
    for algo in ["ring", "tree", "rabenseifner", "direct", "in_switch"]:
        spec = CollectiveSpec(op="all_reduce", participants=5, count=23, pipeline=2)
        sched = algorithms.get(algo).build(spec)
        assert inplace_safe(sched, [(0, 0)] * 5), algo
    spec = CollectiveSpec(op="broadcast", participants=4, count=9, root=1)
    assert inplace_safe(algorithms.get("binomial").build(spec), [None, (0, 0), None, None])


# -- validation: nothing is written before an error -----------------------------------------------

def _ring_all_reduce(p=3, count=4):
    return algorithms.get("ring").build(CollectiveSpec(op="all_reduce", participants=p, count=count, itemsize=4))


def _untouched(outs):
    return all(bool((o == 7).all()) for o in outs)


def test_validation_errors_write_nothing():
    sched = _ring_all_reduce()
    ins = [torch.ones(4) for _ in range(3)]

    def outs():
        return [torch.full((4,), 7.0) for _ in range(3)]

    cases = [
        (ValueError, "expected 3 inputs", ins[:2], outs()),
        (ValueError, "has 5 elements", [torch.ones(4), torch.ones(5), torch.ones(4)], outs()),
        (TypeError, "one dtype", [torch.ones(4), torch.ones(4, dtype=torch.float64), torch.ones(4)], outs()),
        (TypeError, "torch.Tensor", [torch.ones(4), [1, 2, 3, 4], torch.ones(4)], outs()),
        (ValueError, "contiguous", [torch.ones(8)[::2], torch.ones(4), torch.ones(4)], outs()),
        (ValueError, "shapes differ", [torch.ones(2, 2), torch.ones(4), torch.ones(4)], outs()),
        (ValueError, "shapes differ", [torch.ones(2, 2) for _ in range(3)], outs()),
    ]
    for exc, msg, i, o in cases:
        with pytest.raises(exc, match=msg):
            run(sched, i, o)
        assert _untouched(o)
    shared = outs()
    with pytest.raises(ValueError, match="share memory"):
        run(sched, ins, [shared[0], shared[0], shared[2]])
    assert _untouched(shared)
    with pytest.raises(ValueError, match="share memory"):
        o = outs()
        run(sched, [ins[0], o[0], ins[2]], o)
    # The one rule of collectives.ops.REDUCE_RULES: avg needs numbers, bitwise ops integers or bool.
    with pytest.raises(TypeError, match="'avg' is not defined on bool"):
        b = [torch.ones(4, dtype=torch.bool) for _ in range(3)]
        run(sched, b, [torch.zeros(4, dtype=torch.bool) for _ in range(3)], "avg")
    with pytest.raises(TypeError, match="'band' is not defined on float32"):
        run(sched, ins, outs(), "band")
    with pytest.raises(TypeError, match="'max' is not defined on complex64"):
        c = [torch.ones(4, dtype=torch.complex64) for _ in range(3)]
        run(sched, c, [torch.zeros(4, dtype=torch.complex64) for _ in range(3)], "max")
    with pytest.raises(ValueError, match="premul_sum needs a factor"):
        run(sched, ins, outs(), "premul_sum")
    with pytest.raises(TypeError, match="integer factor"):
        o = [torch.full((4,), 7, dtype=torch.int32) for _ in range(3)]
        run(sched, [torch.ones(4, dtype=torch.int32) for _ in range(3)], o, "premul_sum", 0.5)
    assert _untouched(o)
    with pytest.raises(ValueError, match="accepted: sum"):
        run(sched, ins, outs(), "median")


def test_in_place_must_follow_the_nccl_layout():
    sched = algorithms.get("ring").build(CollectiveSpec(op="all_gather", participants=2, count=3, itemsize=4))
    outs = [torch.zeros(6), torch.zeros(6)]
    with pytest.raises(ValueError, match="share memory"):
        run(sched, [outs[0][1:4], torch.ones(3)], outs)  # rank 0's slice is [0:3], not [1:4]
    run(sched, [outs[0][0:3].fill_(1), outs[1][3:6].fill_(2)], outs)
    assert outs[0].tolist() == [1, 1, 1, 2, 2, 2] == outs[1].tolist()


def test_buffers_the_op_does_not_use_are_ignored():
    # torch.distributed passes one tensor per rank; NCCL ignores non-root send buffers of a broadcast.
    tensors = [torch.full((6,), float(i)) for i in range(4)]
    execute("broadcast", tensors, tensors, algorithm="binomial", root=2)
    assert all(t.tolist() == [2.0] * 6 for t in tensors)
    tensors = [torch.full((6,), float(i + 1)) for i in range(4)]
    execute("reduce", tensors, tensors, algorithm="ring", root=1)
    assert tensors[1].tolist() == [10.0] * 6 and tensors[0].tolist() == [1.0] * 6


def test_execute_infers_counts_and_returns_the_schedule():
    ins = [torch.arange(10, dtype=torch.float64) * (i + 1) for i in range(4)]
    outs = [torch.empty(10, dtype=torch.float64) for _ in range(4)]
    sched = execute("allreduce", ins, outs, algorithm="rabenseifner")
    assert sched.algorithm == "rabenseifner" and sched.spec.count == 10
    for o in outs:
        assert torch.equal(o, torch.arange(10, dtype=torch.float64) * 10)
    with pytest.raises(ValueError, match="does not split evenly"):
        execute("all_to_all", [torch.ones(5)] * 2, [torch.ones(5), torch.ones(5)], algorithm="direct")


def test_premul_sum_and_avg_round_once():
    ins = [torch.full((5,), 3.0, dtype=torch.bfloat16) for _ in range(3)]
    outs = [torch.empty(5, dtype=torch.bfloat16) for _ in range(3)]
    execute("all_reduce", ins, outs, reduce_op="premul_sum", factor=0.25)
    assert outs[0].float().tolist() == [2.25] * 5
    execute("all_reduce", ins, outs, reduce_op="avg")
    assert outs[2].float().tolist() == [3.0] * 5


# -- hypothesis: any op, algorithm, size, participants, dtype and reduce op is exact ---------------

@st.composite
def cases(draw):
    algo, op = draw(st.sampled_from(PAIRS))
    p = 2 if op == "send_recv" else draw(st.integers(1, 12))
    count = draw(st.integers(0, 70))
    reduce_op = draw(st.sampled_from(REDUCE_OPS))
    dtype = draw(st.sampled_from(REDUCE_DTYPES[reduce_op] if op in ("all_reduce", "reduce_scatter", "reduce")
                                 else ["float32", "int16", "bfloat16", "bool", "float8_e4m3fn"]))
    k = draw(st.integers(1, 5)) if op in algorithms.get(algo).pipelined else 1
    inplace = draw(st.booleans()) and op in IN_PLACE_OPS
    return algo, op, p, count, dtype, reduce_op, draw(st.integers(0, p - 1)), k, inplace


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2**16))
def test_property_any_collective_is_exact(case, seed):
    algo, op, p, count, dtype, reduce_op, root, k, inplace = case
    res = check(op, algo, p, count, dtype, reduce_op, root=root, pipeline=k, inplace=inplace, seed=seed)
    assert res.wrong == 0


# Speed (all_reduce vs the memcpy floor) is measured in benchmarks/bench_collectives.py, not here.


def test_expected_inputs_cover_rooted_ops():
    spec = CollectiveSpec(op="scatter", participants=3, count=2, root=1)
    ins, outs, exp = expected_and_inputs(spec, torch.int32)
    assert ins[0] is None and ins[1].numel() == 6 and all(o.numel() == 2 for o in outs)
    assert torch.equal(exp[2], ins[1][4:6])
