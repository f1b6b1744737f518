"""nccl-tests-style verification: build predictable inputs, run a schedule, count wrong elements, time it.

Inputs are crafted so every output element is exactly predictable (small
integers, signs and powers of two): the reference is computed in float64 or
int64 and rounded once to the dtype, which is what the executor does too
(``collectives.executor``), so the tolerance is 0 ulp, except 2 ulp for AVG as
in nccl-tests.  :func:`check` is what the tests call; :func:`sweep` prints the
nccl-tests table (size, count, type, redop, root, modelled time, algbw, busbw,
#wrong, measured wall time); ``python -m collectives.verify`` runs a sweep.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

import torch

from collectives import algorithms
from collectives.executor import FLOATS, run
from collectives.ops import REDUCING, SCALED, check_op, check_reduce_op
from collectives.schedule import CollectiveSpec, Schedule, io_sizes
from devices.dtypes import dtype_name

DTYPES = {dtype_name(d): d for d in FLOATS + (torch.int8, torch.int16, torch.int32, torch.int64,
                                                            torch.uint8, torch.bool)}
"""Dtypes the checker knows by name."""


@dataclass(frozen=True, slots=True)
class Result:
    """One checked run."""

    wrong: int
    """Elements that differ from the reference (the nccl-tests #wrong)."""
    elements: int
    """Output elements checked."""
    seconds: float
    """Measured wall time of the executor, seconds."""
    schedule: Schedule
    """The schedule that ran."""


def _values(op: str, reduce_op: str, rank: int, n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Rank ``rank``'s input in float64/int64: values whose reduction is exact in every accepted dtype."""
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen).bool()
    if op not in REDUCING:
        hi = 8 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else 100
        return torch.randint(-hi if dtype != torch.uint8 else 0, hi, (n,), generator=gen).double()
    if reduce_op in ("band", "bor", "bxor"):
        return torch.randint(0, 128, (n,), generator=gen).double()
    if reduce_op == "prod":
        # mostly 1, some -1 and 2: products of up to 17 ranks stay exact in float32
        pick = torch.randint(0, 8, (n,), generator=gen)
        return torch.where(pick == 0, -1.0, torch.where(pick == 1, 2.0, 1.0)).double()
    return torch.randint(-3 if dtype != torch.uint8 else 0, 4, (n,), generator=gen).double()


def _reference(reduce_op: str, parts: list[torch.Tensor], p: int, factor) -> torch.Tensor:
    if parts[0].dtype == torch.bool:
        stack = torch.stack(parts)
        if reduce_op in ("min", "band", "prod"):
            return stack.all(0)
        if reduce_op in ("max", "bor", "sum"):
            return stack.any(0)
        return stack.sum(0) % 2 == 1
    integer = not parts[0].is_floating_point()
    stack = torch.stack([x.long() if integer else x for x in parts])
    if reduce_op in ("sum", "avg", "premul_sum"):
        out = stack.sum(0)
        if reduce_op == "avg":  # integers: truncated toward zero by the cast, as NCCL divides
            out = out.double() / p
        if reduce_op == "premul_sum":
            out = out * factor
        return out
    if reduce_op == "prod":
        return stack.prod(0)
    if reduce_op == "min":
        return stack.min(0).values
    if reduce_op == "max":
        return stack.max(0).values
    fn = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[reduce_op]
    out = stack[0]
    for x in stack[1:]:
        out = fn(out, x)
    return out


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return x.bool()
    if not dtype.is_floating_point and x.is_floating_point():
        x = x.long()
    return x.to(dtype)


def _bits(x: torch.Tensor) -> torch.Tensor:
    # Compare bit patterns (float8 has no eq on the CPU; -0.0 vs 0.0 and NaN are still told apart).
    if x.dtype == torch.bool:
        return x
    return x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])


def expected_and_inputs(spec: CollectiveSpec, dtype: torch.dtype, reduce_op: str = "sum", factor=None,
                        seed: int = 0):
    """(inputs, outputs, expected) tensors for ``spec``: None where a participant has no buffer."""
    p, c, root = spec.participants, spec.count, spec.root
    gen = torch.Generator().manual_seed(seed)
    sizes = io_sizes(spec)
    # Who has a buffer depends on the op, not the count: a zero count still passes empty tensors.
    shape = io_sizes(replace(spec, count=1, splits=None))
    raw = [_values(spec.op, reduce_op, i, sizes["in"][i], dtype, gen) for i in range(p)]
    inputs = [_cast(raw[i], dtype) if shape["in"][i] else None for i in range(p)]
    exact = [None if t is None else (t.double() if dtype.is_floating_point else t.long() if dtype != torch.bool
                                     else t) for t in inputs]
    op = spec.op
    exp: list[torch.Tensor | None] = [None] * p
    if op in REDUCING:
        total = _reference(reduce_op, [x for x in exact if x is not None], p, factor)
        if op == "all_reduce":
            exp = [total] * p
        elif op == "reduce":
            exp[root] = total
        else:
            exp = [total[i * c:(i + 1) * c] for i in range(p)]
    elif op == "all_gather":
        exp = [torch.cat(exact)] * p
    elif op == "broadcast":
        exp = [exact[root]] * p
    elif op == "gather":
        exp[root] = torch.cat(exact)
    elif op == "scatter":
        exp = [exact[root][i * c:(i + 1) * c] for i in range(p)]
    elif op == "all_to_all":
        offs = [[sum(spec.sends(i, k) for k in range(j)) for j in range(p)] for i in range(p)]
        exp = [torch.cat([exact[i][offs[i][j]:offs[i][j] + spec.sends(i, j)] for i in range(p)]) for j in range(p)]
    elif op == "send_recv":
        exp[1] = exact[0]
    expected = [None if e is None else _cast(e, dtype) for e in exp]
    outputs = [torch.full((n,), 7, dtype=dtype) if shape["out"][i] else None for i, n in enumerate(sizes["out"])]
    return inputs, outputs, expected


def count_wrong(outputs, expected, reduce_op: str, op: str) -> tuple[int, int]:
    """(#wrong, #checked) comparing bit patterns; AVG allows 2 ulp (nccl-tests)."""
    wrong = checked = 0
    for out, exp in zip(outputs, expected):
        if exp is None:
            continue
        checked += exp.numel()
        if op in REDUCING and reduce_op == "avg" and exp.is_floating_point():
            got, want = out.double(), exp.double()
            ulp = torch.nextafter(exp.float().abs(), torch.tensor(float("inf"))).double() - exp.float().abs().double()
            if exp.dtype != torch.float32 and exp.dtype != torch.float64:
                ulp = (want.abs() * 2.0 ** -({torch.float16: 10, torch.bfloat16: 7, torch.float8_e4m3fn: 3,
                                              torch.float8_e5m2: 2}[exp.dtype])).clamp_min(2.0 ** -24)
            wrong += int(((got - want).abs() > 2 * ulp).sum())
        else:
            wrong += int((_bits(out) != _bits(exp)).sum())
    return wrong, checked


def check(op: str, algorithm: str, participants: int, count: int, dtype=torch.float32, reduce_op: str = "sum", *,
          root: int = 0, pipeline: int = 1, splits=None, factor=None, inplace: bool = False, groups=None,
          outer: str = "ring", torus=None, seed: int = 0) -> Result:
    """Build ``algorithm``'s schedule, run it on predictable inputs, and count wrong output elements."""
    op, reduce_op = check_op(op), check_reduce_op(reduce_op)
    dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
    if reduce_op == "premul_sum" and factor is None and op in REDUCING:
        factor = 2 if not dtype.is_floating_point else 0.5
    spec = CollectiveSpec(op=op, participants=participants, count=count, itemsize=torch.empty(0, dtype=dtype)
                          .element_size(), root=root, pipeline=pipeline, splits=splits, outer=outer,
                          groups=None if groups is None else tuple(tuple(g) for g in groups), torus=torus)
    schedule = algorithms.get(algorithm).build(spec)
    inputs, outputs, expected = expected_and_inputs(spec, dtype, reduce_op, factor, seed)
    if inplace:
        inputs, outputs = in_place(op, inputs, outputs, count)
    start = time.perf_counter()
    run(schedule, inputs, outputs, reduce_op, factor)
    seconds = time.perf_counter() - start
    wrong, checked = count_wrong(outputs, expected, reduce_op, op)
    return Result(wrong, checked, seconds, schedule)


def in_place(op: str, inputs, outputs, count: int):
    """NCCL-style in-place buffers holding the same input values."""
    p = len(inputs)
    if op in ("all_reduce", "broadcast", "reduce"):
        outs = [inputs[i] if outputs[i] is not None and inputs[i] is not None else outputs[i] for i in range(p)]
        return inputs, outs
    if op == "all_gather":
        for i in range(p):
            outputs[i][i * count:(i + 1) * count].copy_(inputs[i])
        return [outputs[i][i * count:(i + 1) * count] for i in range(p)], outputs
    if op == "reduce_scatter":
        return inputs, [inputs[i][i * count:(i + 1) * count] for i in range(p)]
    return inputs, outputs


def sweep(rack: str, op: str, sizes, dtype: str = "float32", reduce_op: str = "sum", algorithm: str | None = None,
          root: int = 0, printer=print) -> int:
    """Run and check ``op`` at every size on ``rack`` (modelled timings), printing nccl-tests rows; returns #wrong."""
    from collectives.algorithm_choice import plan

    dt = DTYPES[dtype]
    itemsize = torch.empty(0, dtype=dt).element_size()
    printer(f"# rack {rack}, {op}, {dtype}, {reduce_op}; time/algbw/busbw modelled, wall measured")
    printer(f"# {'size':>12} {'count':>10} {'type':>8} {'redop':>6} {'root':>4} {'time(us)':>10} {'algbw':>8} "
            f"{'busbw':>8} {'#wrong':>6} {'algorithm':>14} {'wall(ms)':>9}")
    total = 0
    for size in sizes:
        est0 = plan(rack, op, 1, itemsize, algorithm=algorithm, root=root, build=False).estimate
        p = est0.participants
        count = 0 if op == "barrier" else size // itemsize // (p if op in SCALED else 1)
        pl = plan(rack, op, count, itemsize, algorithm=algorithm, root=root)
        est = pl.estimate
        spec = pl.schedule.spec if pl.schedule is not None else None
        res = check(op, est.algorithm, p, count, dt, reduce_op, root=root, pipeline=est.pipeline,
                    groups=spec.groups if spec else None, outer=spec.outer if spec else "ring",
                    torus=spec.torus if spec else None)
        total += res.wrong
        printer(f"  {est.nbytes:>12} {count:>10} {dtype:>8} {reduce_op:>6} {root:>4} {est.seconds * 1e6:>10.2f} "
                f"{est.algbw / 1e9:>8.2f} {est.busbw / 1e9:>8.2f} {res.wrong:>6} {est.algorithm:>14} "
                f"{res.seconds * 1e3:>9.3f}")
    printer(f"# #wrong total: {total}")
    return total


def parse_bytes(text: str) -> int:
    """nccl-tests sizes: ``8``, ``64K``, ``1M``, ``2G`` (binary multiples), or any unit devices.parse_size reads."""
    text = str(text).strip()
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:].upper())
    if mult and text[:-1].isdigit():
        return int(text[:-1]) * mult
    if text.isdigit():
        return int(text)
    from devices import parse_size

    return int(parse_size(text))


def main(argv=None) -> int:
    """``python -m collectives.verify --rack h100-node --op all_reduce -b 8 -e 1M -f 4``; exit 1 if any is wrong."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rack", default="h100-node")
    ap.add_argument("--op", default="all_reduce")
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="1M")
    ap.add_argument("-f", "--stepfactor", type=int, default=4)
    ap.add_argument("-d", "--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("-o", "--op-reduce", dest="redop", default="sum")
    ap.add_argument("-a", "--algorithm", default=None)
    ap.add_argument("-r", "--root", type=int, default=0)
    args = ap.parse_args(argv)
    lo, hi = parse_bytes(args.minbytes), parse_bytes(args.maxbytes)
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= max(2, args.stepfactor)
    return 1 if sweep(args.rack, args.op, sizes, args.dtype, args.redop, args.algorithm, args.root) else 0


if __name__ == "__main__":
    raise SystemExit(main())
