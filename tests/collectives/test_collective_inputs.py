"""Bad arguments to the in-process collectives: each is a ValueError or TypeError naming the argument,
raised before any input or output is written; and the one reduce-op x dtype rule (collectives.ops) holds.

The reference for "nothing written" is a copy of every tensor taken before the call.
"""

from __future__ import annotations

import pytest
import torch

import devices
import collectives
import interop  # noqa: F401  (registers the hybrid device)
from collectives import ops

P = 3


def _on(values, dtype=torch.float32):
    return [torch.tensor(v, dtype=dtype).to(f"hybrid:{i}") for i, v in enumerate(values)]


def _refused(fn, tensors, *fragments):
    """Call ``fn``; it must raise ValueError/TypeError mentioning every fragment and leave ``tensors`` as they were."""
    before = [t.cpu().clone() for t in tensors]
    with pytest.raises((ValueError, TypeError)) as err:
        fn()
    for i, (a, t) in enumerate(zip(before, tensors)):
        assert torch.equal(a, t.cpu()), f"tensor {i} was written before the error: {a} -> {t.cpu()}"
    msg = str(err.value)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return err.value


BAD_FACTORS = [("2", TypeError), ([2.0], TypeError), (object(), TypeError), (2 + 1j, TypeError),
               (True, TypeError), (float("nan"), ValueError)]


@pytest.mark.parametrize("factor, error", BAD_FACTORS, ids=lambda x: repr(x)[:12])
def test_premul_factor_is_checked_before_any_write(factor, error):
    xs = _on([[1.0, 2.0, 3.0]] * P)
    e = _refused(lambda: collectives.all_reduce(xs, op="premul_sum", factor=factor), xs, "factor")
    assert isinstance(e, error)
    rs = _on([[1.0] * P] * P)
    _refused(lambda: collectives.reduce_scatter(rs, op="premul_sum", factor=factor), rs, "factor")
    rd = _on([[1.0, 2.0]] * P)
    _refused(lambda: collectives.reduce(rd, root=1, op="premul_sum", factor=factor), rd, "factor")


def test_premul_tensor_factor_must_be_a_scalar():
    xs = _on([[1.0, 2.0]] * P)
    _refused(lambda: collectives.all_reduce(xs, op="premul_sum", factor=torch.ones(2)), xs, "factor", "(2,)")
    _refused(lambda: collectives.all_reduce(xs, op="premul_sum", factor=torch.ones(1, 2)), xs, "factor")
    # 0-d and one-element tensors are scalars: sum x factor, against the CPU.
    for factor in (torch.tensor(0.5), torch.tensor([0.5]), torch.tensor([[0.5]], device="hybrid:1")):
        xs = _on([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        collectives.all_reduce(xs, op="premul_sum", factor=factor)
        for t in xs:
            assert torch.equal(t.cpu(), torch.tensor([4.5, 6.0]))


def test_integer_premul_needs_an_integer_factor_that_fits():
    ints = _on([[1, 2]] * P, torch.int32)
    _refused(lambda: collectives.all_reduce(ints, op="premul_sum", factor="2.0"), ints, "factor")
    _refused(lambda: collectives.all_reduce(ints, op="premul_sum", factor=2.5), ints, "factor", "integer")
    small = _on([[1, 2]] * P, torch.int8)
    _refused(lambda: collectives.all_reduce(small, op="premul_sum", factor=1000), small, "factor", "int8")
    # NCCL's integer premul_sum: the factor in the tensor's own type; 2.0 is the integer 2.
    collectives.all_reduce(ints, op="premul_sum", factor=2.0)
    for t in ints:
        assert torch.equal(t.cpu(), torch.tensor([6, 12], dtype=torch.int32))


def test_a_factor_without_premul_sum_is_refused():
    xs = _on([[1.0]] * P)
    _refused(lambda: collectives.all_reduce(xs, op="sum", factor=2.0), xs, "factor", "premul_sum")


def test_all_to_all_splits_must_be_a_matrix_of_integers():
    ins = _on([[1.0, 2.0, 3.0]] * P)
    _refused(lambda: collectives.all_to_all(ins, splits=[[1, 1, 1], [1, 1, 1], [1, 1, 2.7]]), ins,
             "splits", "2.7")
    _refused(lambda: collectives.all_to_all(ins, splits=[1, 1, 1]), ins, "splits", "3x3")
    _refused(lambda: collectives.all_to_all(ins, splits=[[1, 1, 1], [1, [1], 1], [1, 1, 1]]), ins, "splits")
    _refused(lambda: collectives.all_to_all(ins, splits=[[1, 1, 1], [1, 1, 1], [1, 1, -1]]), ins, "splits")
    _refused(lambda: collectives.all_to_all(ins, splits=[[1, 1, 1], [1, 1, 1], [1, 1, True]]), ins, "splits")
    # Whole floats are integers (2.0 elements is 2 elements), as in a split size list from arithmetic.
    res = collectives.all_to_all(ins, splits=[[1.0, 1, 1]] * P)
    assert [o.cpu().tolist() for o in res.outputs] == [[1.0] * P, [2.0] * P, [3.0] * P]


def test_send_recv_shapes_must_match():
    src = torch.arange(8.0, device="hybrid:0")
    dst = torch.zeros(2, 4, device="hybrid:1")
    _refused(lambda: collectives.send_recv(src, dst), [src, dst], "shape", "(8,)", "(2, 4)")
    _refused(lambda: collectives.send_recv(src, torch.zeros(8, dtype=torch.int32, device="hybrid:1")), [src],
             "dtype")
    ok = torch.zeros(8, device="hybrid:1")
    collectives.send_recv(src, ok)
    assert torch.equal(ok.cpu(), torch.arange(8.0))


@pytest.mark.parametrize("algorithm", [["ring"], 3, ("ring",)])
def test_algorithm_must_be_a_name(algorithm):
    xs = _on([[1.0]] * P)
    _refused(lambda: collectives.all_reduce(xs, algorithm=algorithm), xs, "algorithm")


def test_torch_distributed_reduce_ops_are_accepted():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not built into this torch")
    xs = _on([[1.0, 5.0], [4.0, 2.0], [3.0, 3.0]])
    collectives.all_reduce(xs, op=dist.ReduceOp.SUM)
    assert torch.equal(xs[0].cpu(), torch.tensor([8.0, 10.0]))
    collectives.all_reduce(xs, op=dist.ReduceOp.MAX)
    assert torch.equal(xs[2].cpu(), torch.tensor([8.0, 10.0]))
    xs = _on([[1.0], [2.0], [3.0]])
    collectives.all_reduce(xs, op=dist._make_nccl_premul_sum(0.5))  # the factor travels in the op
    assert torch.equal(xs[1].cpu(), torch.tensor([3.0]))
    _refused(lambda: collectives.all_reduce(xs, op=dist.ReduceOp.BAND), xs, "band", "float32")


# -- the one reduce-op x dtype rule ----------------------------------------------------------------

# (reduce op, dtype) pairs NCCL or torch.distributed define, and the ones they do not.
DEFINED = [("sum", torch.int32), ("avg", torch.int32), ("avg", torch.int8), ("premul_sum", torch.int64),
           ("premul_sum", torch.bfloat16), ("sum", torch.bool), ("prod", torch.bool), ("max", torch.bool),
           ("bxor", torch.uint8), ("sum", torch.complex64), ("avg", torch.complex128)]
UNDEFINED = [("avg", torch.bool), ("premul_sum", torch.bool), ("band", torch.float32), ("bor", torch.float16),
             ("max", torch.complex64), ("prod", torch.complex64)]


@pytest.mark.parametrize("op, dtype", DEFINED)
def test_the_rule_table_defines(op, dtype):
    ops.check_reduce(op, dtype)
    ops.check_reduce(op, devices.dtype_name(dtype))


@pytest.mark.parametrize("op, dtype", UNDEFINED)
def test_the_rule_table_refuses(op, dtype):
    with pytest.raises(TypeError, match=op):
        ops.check_reduce(op, dtype)


def _reference(op: str, parts: list[torch.Tensor], factor=None) -> torch.Tensor:
    """The reduction computed independently: in int64 / float64 / complex128 / bool logic, then cast once."""
    dtype = parts[0].dtype
    if dtype == torch.bool:
        stack = torch.stack(parts)
        return {"sum": stack.any(0), "max": stack.any(0), "bor": stack.any(0), "prod": stack.all(0),
                "min": stack.all(0), "band": stack.all(0), "bxor": stack.sum(0) % 2 == 1}[op]
    wide = torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([x.to(wide) for x in parts])
    out = {"sum": lambda: stack.sum(0), "avg": lambda: stack.sum(0), "premul_sum": lambda: stack.sum(0) * factor,
           "prod": lambda: stack.prod(0), "max": lambda: stack.max(0).values}[op]()
    if op == "avg":
        out = out / len(parts) if wide != torch.int64 else torch.div(out, len(parts), rounding_mode="trunc")
    return out.to(dtype)


@pytest.mark.parametrize("op, dtype", [(o, d) for o, d in DEFINED if o in ("sum", "avg", "premul_sum", "prod", "max")])
def test_defined_pairs_compute_what_nccl_computes(op, dtype):
    # Negative and positive values so integer avg shows its truncation toward zero (NCCL's FuncSumPostDiv).
    g = torch.Generator().manual_seed(7)
    if dtype == torch.bool:
        parts = [torch.randint(0, 2, (9,), generator=g).bool() for _ in range(P)]
    elif dtype.is_complex:
        parts = [torch.complex(torch.randint(-4, 5, (9,), generator=g).double(),
                               torch.randint(-4, 5, (9,), generator=g).double()).to(dtype) for _ in range(P)]
    else:
        parts = [torch.randint(-9, 10, (9,), generator=g).to(dtype) for _ in range(P)]
    factor = 3 if op == "premul_sum" else None
    ts = [x.to(f"hybrid:{i}") for i, x in enumerate(parts)]
    collectives.all_reduce(ts, op=op, factor=factor)
    want = _reference(op, parts, factor)
    for t in ts:
        assert torch.equal(t.cpu(), want), (op, dtype, t.cpu(), want)


@pytest.mark.parametrize("op, dtype", UNDEFINED)
def test_undefined_pairs_are_refused_before_writing(op, dtype):
    ts = [torch.ones(3, dtype=dtype, device=f"hybrid:{i}") for i in range(P)]
    _refused(lambda: collectives.all_reduce(ts, op=op, factor=2 if op == "premul_sum" else None), ts, op)
