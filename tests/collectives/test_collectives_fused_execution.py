"""The executor runs a schedule in fused passes and gives exactly the bytes the step-by-step executor gave.

Two oracles, neither of which is the code under test:

1. Digests of every buffer after a run (outputs, and the inputs, which in-place use overwrites) for a fixed
   sweep: every algorithm x op x reduce op x dtype the rule table accepts, 1 to 8 participants, sizes that
   do not divide by 8, in place and out of place, pipelined variants, the large sizes that used to run tile
   by tile, hierarchical and torus schedules, and the in-process path over hybrid slots.  They were
   recorded with the step-by-step executor of d57a5c8 (before the fused executor existed) by
   ``python tests/collectives/test_collectives_fused_execution.py --record`` into ``collectives_fused_digests.json``
   beside this file; re-recording with a changed executor would defeat them.
2. :func:`reference_run`, written here: it walks the schedule transfer by transfer with torch ops on chunk
   views (the semantics of that executor: operand order, float32 accumulation of the narrow floats,
   avg/premul_sum once at the end, a copy of the inputs when in-place use is unsafe), for random cases.

Inputs avoid what the step-by-step executor itself did not fix: NaN payloads under min/max (torch's
vectorised and scalar loops give different NaNs), NaNs rounded to a narrow float, and signed-zero ties
under min/max.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zlib
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if __name__ == "__main__":  # recording: run from anywhere
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import interop  # noqa: F401  (registers the runtime's fused kernel with the collective layer)
from collectives import algorithms, executor
from collectives import fused
from collectives.ops import REDUCE_OPS, REDUCE_RULES, REDUCING, dtype_class
from collectives.schedule import CollectiveSpec, Rounds, inplace_safe, io_sizes, make
from collectives.verify import in_place
from devices.dtypes import dtype_name

DIGESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collectives_fused_digests.json")

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
COMPLEX = [torch.complex64, torch.complex128]
DTYPES = FLOATS + INTS + COMPLEX + [torch.bool]
WIDENED = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
PAIRS = [(a, op) for a in algorithms.names() if a not in ("hierarchical", "torus")
         for op in sorted(algorithms.get(a).ops) if op != "barrier"]
REDUCING_PAIRS = [(a, op) for a, op in PAIRS if op in REDUCING]
MOVING_PAIRS = [(a, op) for a, op in PAIRS if op not in REDUCING]
IN_PLACE_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
# (participants, count): one participant, primes, odd sizes and sizes that do not divide by 8.
SHAPES = [(1, 13), (2, 1001), (3, 1), (3, 13), (5, 1001), (8, 13), (8, 1001)]
MOVING_DTYPES = [torch.float32, torch.bfloat16, torch.float8_e5m2, torch.int64, torch.uint8, torch.bool,
                 torch.complex64]


def _name(dtype: torch.dtype) -> str:
    return dtype_name(dtype)


def reduce_dtypes(reduce_op: str) -> list[torch.dtype]:
    """Every dtype the one rule table lets ``reduce_op`` reduce."""
    return [d for d in DTYPES if dtype_class(d) in REDUCE_RULES[reduce_op]]


def factor_for(reduce_op: str, dtype: torch.dtype):
    if reduce_op != "premul_sum":
        return None
    return 3 if dtype_class(dtype) == "int" else 0.3


# -- inputs ---------------------------------------------------------------------------------------


def _scales(gen: torch.Generator, n: int, lo: int, hi: int) -> torch.Tensor:
    """``n`` powers of two 2**lo..2**hi (a table lookup: scaling by them is exact, whatever the loop)."""
    table = torch.tensor([2.0 ** k for k in range(lo, hi + 1)], dtype=torch.float64)
    return table[torch.randint(0, len(table), (n,), generator=gen)]


def values(n: int, dtype: torch.dtype, reduce_op: str, gen: torch.Generator) -> torch.Tensor:
    """``n`` deterministic values of ``dtype`` that exercise rounding order, wrapping and infinities.

    Only exact arithmetic builds them (no pow or exp, whose vectorised and scalar loops differ in the last
    bit), so they do not depend on how many threads torch runs.
    """
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen).bool()
    if dtype_class(dtype) == "int":
        size = torch.empty(0, dtype=dtype).element_size()
        return torch.randint(0, 256, (n * size,), generator=gen, dtype=torch.uint8).view(dtype)  # any bits: wraps
    if dtype.is_complex:
        parts = torch.randn(n, 2, generator=gen, dtype=torch.float64) * _scales(gen, n, -10, 10)[:, None]
        return torch.view_as_complex(parts).to(dtype)
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    if reduce_op == "prod":
        # magnitudes in [0.5, 2): products of 8 stay in range
        x = torch.sign(x) * (0.5 + 1.5 * torch.rand(n, generator=gen, dtype=torch.float64))
    elif dtype == torch.float8_e4m3fn:
        x = x * 2
    elif dtype in WIDENED:
        x = x * _scales(gen, n, -6, 6)
    else:
        x = x * _scales(gen, n, -10, 10)
    x = x.to(dtype)
    if dtype in (torch.float32, torch.float64) and reduce_op not in ("min", "max") and n >= 8:
        # Infinities of both signs (inf - inf is x86's one default NaN, which sums then carry), signed
        # zeros and subnormals.
        tiny = torch.finfo(dtype).tiny / 8
        pick = torch.randint(0, 16, (n,), generator=gen)
        special = torch.tensor([float("inf"), float("-inf"), -0.0, 0.0, tiny, -tiny], dtype=dtype)
        x = torch.where(pick < 6, special[pick.clamp(max=5)], x)
    return x


def noise(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """What an output buffer held before the call (random bytes: a region left alone shows)."""
    size = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), generator=gen, dtype=torch.uint8)
    if dtype == torch.bool:
        return (raw & 1).bool()
    if dtype.is_floating_point or dtype.is_complex:
        # finite values, so that a buffer read before it is written gives reproducible bytes
        return torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    return raw.view(dtype)


def buffers(spec: CollectiveSpec, dtype: torch.dtype, reduce_op: str, seed: int):
    """(inputs, outputs) on the CPU for ``spec``: None where a participant has no buffer."""
    gen = torch.Generator().manual_seed(seed)
    sizes = io_sizes(spec)
    present = io_sizes(replace(spec, count=1, splits=None))
    p = spec.participants
    inputs = [values(sizes["in"][i], dtype, reduce_op, gen) if present["in"][i] else None for i in range(p)]
    outputs = [noise(sizes["out"][i], dtype, gen) if present["out"][i] else None for i in range(p)]
    return inputs, outputs


def digest(tensors, h=None):
    """sha256 over the bytes of ``tensors`` (None marked), updated into ``h``."""
    h = h or hashlib.sha256()
    for t in tensors:
        if t is None:
            h.update(b"-")
            continue
        t = t.contiguous().view(-1)
        h.update(f"{t.dtype}:{t.numel()}:".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h


# -- the reference --------------------------------------------------------------------------------


def _combine(reduce_op: str, dtype: torch.dtype):
    if dtype == torch.bool and reduce_op in ("min", "max"):
        reduce_op = "band" if reduce_op == "min" else "bor"
    return {"sum": torch.add, "avg": torch.add, "premul_sum": torch.add, "prod": torch.mul,
            "min": torch.minimum, "max": torch.maximum, "band": torch.bitwise_and, "bor": torch.bitwise_or,
            "bxor": torch.bitwise_xor}[reduce_op]


def reference_run(schedule, inputs, outputs, reduce_op: str = "sum", factor=None) -> None:
    """Run ``schedule`` transfer by transfer with torch ops on chunk views (the step-by-step semantics)."""
    reduce_op, factor = executor.reduce_with_factor(reduce_op, factor)
    spec, p = schedule.spec, schedule.participants
    present = io_sizes(replace(spec, count=1, splits=None))
    inputs = [t if present["in"][i] else None for i, t in enumerate(inputs)]
    outputs = [t if present["out"][i] else None for i, t in enumerate(outputs)]
    alias, factor = executor.validate(schedule, inputs, outputs, reduce_op, factor)
    ins = [None if t is None else t.view(-1) for t in inputs]
    outs = [None if t is None else t.view(-1) for t in outputs]
    some = next((t for t in ins + outs if t is not None), None)
    if some is None:
        return
    dtype = some.dtype
    reducing = spec.op in REDUCING
    final = None
    work = dtype
    if reducing and dtype in WIDENED:
        work = torch.float32
        ins = [None if t is None else t.to(work) for t in ins]
        final, outs = outs, [None if t is None else torch.empty(t.numel(), dtype=work) for t in outs]
    elif any(a is not None for a in alias) and not inplace_safe(schedule, alias):
        ins = [None if t is None else t.clone() for t in ins]
    bufs = {"in": ins, "out": outs}
    for name, sizes in schedule.buffers.items():
        bufs.setdefault(name, [torch.empty(n, dtype=work) if n else None for n in sizes])
    combine = _combine(reduce_op, work)
    for rnd in schedule.rounds:
        for t in rnd:
            n = t.count
            if n == 0:
                continue
            srcs = [bufs[t.src_buf][s][t.src_off:t.src_off + n] for s in t.srcs]
            for d in t.dsts:
                dst = bufs[t.dst_buf][d][t.dst_off:t.dst_off + n]
                if not t.reduce:
                    dst.copy_(srcs[0])
                    continue
                operands = list(srcs)
                if t.acc_buf is not None:
                    operands.insert(0, bufs[t.acc_buf][d][t.acc_off:t.acc_off + n])
                elif len(srcs) == 1:
                    operands.insert(0, dst)
                at_dst = [k for k, v in enumerate(operands) if v.data_ptr() == dst.data_ptr()]
                if at_dst:  # the operand stored where the result goes comes first
                    operands.insert(0, operands.pop(at_dst[0]))
                value = operands[0].clone()
                for v in operands[1:]:
                    value = combine(value, v)
                dst.copy_(value)
    scale = _SCALE_AT_THE_END.get(reduce_op) if reducing else None
    for k, t in enumerate(outs):
        if t is None:
            continue
        if scale is not None:
            scale(t, factor, p)
        if final is not None:  # back to the narrow float the caller gave
            final[k].copy_(t)


def _average(t: torch.Tensor, factor, p: int) -> None:
    # NCCL's avg: a float divides, an integer truncates toward zero.
    exact = t.is_floating_point() or t.is_complex()
    torch.div(t, p, out=t) if exact else torch.div(t, p, rounding_mode="trunc", out=t)


_SCALE_AT_THE_END = {
    # Applied once to the reduced result, never per step (the step-by-step executor's semantics).
    "premul_sum": lambda t, factor, p: torch.mul(t, factor, out=t),
    "avg": _average,
}


# -- the sweep ------------------------------------------------------------------------------------


def _seed(*key) -> int:
    return zlib.crc32(repr(key).encode())


def run_variant(run, algo, op, p, count, dtype, reduce_op="sum", *, inplace=False, pipeline=1, root=None,
                splits=None, groups=None, torus=None, outer="ring"):
    """Build, fill and run one case with ``run`` (the executor or the reference); the buffers after it."""
    root = (p - 1) // 2 if root is None else root
    spec = CollectiveSpec(op=op, participants=p, count=count, itemsize=torch.empty(0, dtype=dtype).element_size(),
                          root=root, pipeline=pipeline, splits=splits, torus=torus, outer=outer,
                          groups=None if groups is None else tuple(tuple(g) for g in groups))
    schedule = algorithms.get(algo).build(spec)
    inputs, outputs = buffers(spec, dtype, reduce_op, _seed(algo, op, p, count, _name(dtype), reduce_op, pipeline))
    if inplace:
        inputs, outputs = in_place(op, inputs, outputs, count)
    run(schedule, inputs, outputs, reduce_op if op in REDUCING else "sum",
        factor_for(reduce_op, dtype) if op in REDUCING else None)
    return inputs, outputs


def _variants(algo, op):
    pipelines = [1, 3] if op in algorithms.get(algo).pipelined else [1]
    for p, count in ([(2, 1), (2, 13), (2, 1001)] if op == "send_recv" else SHAPES):
        for pipeline in pipelines:
            for inplace in ([False, True] if op in IN_PLACE_OPS else [False]):
                yield dict(p=p, count=count, pipeline=pipeline, inplace=inplace)


def group_digest(run, algo, op, dtype, reduce_op="sum") -> str:
    """One digest over every variant of (algorithm, op, reduce op, dtype)."""
    h = hashlib.sha256()
    for v in _variants(algo, op):
        p, count = v.pop("p"), v.pop("count")
        ins, outs = run_variant(run, algo, op, p, count, dtype, reduce_op, **v)
        digest(outs + ins, h)
    return h.hexdigest()[:24]


def reducing_groups(reduce_op: str):
    return [(a, op, d) for a, op in REDUCING_PAIRS for d in reduce_dtypes(reduce_op)]


def moving_groups():
    return [(a, op, d) for a, op in MOVING_PAIRS for d in MOVING_DTYPES]


def special_cases():
    """Named single cases: uneven all_to_all, hierarchical, torus, and the sizes that ran tile by tile."""
    cases = {}
    for k, splits in enumerate([((0, 3, 1, 7), (2, 0, 0, 5), (9, 1, 4, 0), (0, 0, 0, 0)),
                                ((5, 1, 0), (0, 0, 2), (3, 3, 3))]):
        for dtype in (torch.float16, torch.int32):
            cases[f"all_to_all/splits{k}/{_name(dtype)}"] = dict(
                algo="direct", op="all_to_all", p=len(splits), count=0, dtype=dtype, splits=splits)
    mixes = [("sum", torch.float32), ("max", torch.int32), ("prod", torch.bfloat16), ("avg", torch.float16),
             ("premul_sum", torch.float64), ("bxor", torch.int64), ("min", torch.float8_e4m3fn)]
    for outer in ("ring", "rabenseifner", "tree", "direct"):
        for n_groups, size in [(2, 2), (3, 3), (2, 5)]:
            groups = [list(range(g * size, (g + 1) * size)) for g in range(n_groups)]
            for reduce_op, dtype in mixes:
                for inplace in (False, True):
                    cases[f"hierarchical/{outer}/{n_groups}x{size}/{reduce_op}/{_name(dtype)}/{inplace}"] = dict(
                        algo="hierarchical", op="all_reduce", p=n_groups * size, count=333, dtype=dtype,
                        reduce_op=reduce_op, groups=groups, outer=outer, pipeline=2, inplace=inplace)
    for shape in [(4, 4), (2, 3), (2, 2, 2), (5,)]:
        p = 1
        for s in shape:
            p *= s
        for reduce_op, dtype in mixes:
            for inplace in (False, True):
                cases[f"torus/{shape}/{reduce_op}/{_name(dtype)}/{inplace}"] = dict(
                    algo="torus", op="all_reduce", p=p, count=333, dtype=dtype, reduce_op=reduce_op, torus=shape,
                    inplace=inplace)
    big = 2_097_153  # > 4 tiles of 2 MiB float32, odd
    for algo in ("ring", "rabenseifner", "direct", "tree", "in_switch"):
        for reduce_op, dtype in [("sum", torch.float32), ("max", torch.bfloat16), ("avg", torch.float16),
                                 ("premul_sum", torch.float64)]:
            for inplace in (False, True):
                cases[f"large/{algo}/all_reduce/{reduce_op}/{_name(dtype)}/{inplace}"] = dict(
                    algo=algo, op="all_reduce", p=8, count=big, dtype=dtype, reduce_op=reduce_op, inplace=inplace,
                    pipeline=4 if algo in ("tree", "in_switch") else 1)
    for algo in ("ring", "rabenseifner", "direct", "in_switch"):
        for inplace in (False, True):
            cases[f"large/{algo}/reduce_scatter/sum/float32/{inplace}"] = dict(
                algo=algo, op="reduce_scatter", p=8, count=300_007, dtype=torch.float32, inplace=inplace)
    for algo, op in [("ring", "all_gather"), ("rabenseifner", "all_gather"), ("ring", "broadcast"),
                     ("tree", "reduce"), ("binomial", "broadcast")]:
        cases[f"large/{algo}/{op}/sum/float32"] = dict(algo=algo, op=op, p=8, count=600_001, dtype=torch.float32,
                                                         pipeline=2 if op in algorithms.get(algo).pipelined else 1)
    return cases


def special_digest(run, case: dict) -> str:
    case = dict(case)
    algo, op, p, count, dtype = (case.pop(k) for k in ("algo", "op", "p", "count", "dtype"))
    ins, outs = run_variant(run, algo, op, p, count, dtype, **case)
    return digest(outs + ins).hexdigest()[:24]


# -- the in-process path over hybrid slots ---------------------------------------------------------

HYBRID_CASES = [(algo, reduce_op, dtype, inplace)
                for algo in (None, "ring", "rabenseifner", "direct", "tree")
                for reduce_op, dtype in [("sum", torch.float32), ("avg", torch.bfloat16), ("max", torch.int16),
                                         ("premul_sum", torch.float32)]
                for inplace in (False, True)]


def hybrid_digest(algo, reduce_op, dtype, inplace, count=100_003) -> str:
    """in_process.all_reduce over 8 slots of the default rack; digest of every slot tensor after it."""
    from collectives import in_process

    gen = torch.Generator().manual_seed(_seed("hybrid", algo, reduce_op, _name(dtype), inplace))
    host = [values(count, dtype, reduce_op, gen) for _ in range(8)]
    tensors = [h.to(f"hybrid:{i}") for i, h in enumerate(host)]
    outputs = None if inplace else [noise(count, dtype, gen).to(f"hybrid:{i}") for i in range(8)]
    in_process.all_reduce(tensors, reduce_op, algorithm=algo, outputs=outputs,
                          factor=factor_for(reduce_op, dtype))
    cpu = [t.cpu() for t in tensors] + ([] if outputs is None else [t.cpu() for t in outputs])
    return digest(cpu).hexdigest()[:24]


def hybrid_key(algo, reduce_op, dtype, inplace) -> str:
    return f"hybrid/{algo or 'auto'}/{reduce_op}/{_name(dtype)}/{inplace}"


# -- recording (done once, with the step-by-step executor) -----------------------------------------


def record(path: str = DIGESTS) -> dict:
    import subprocess

    out = {"recorded_with": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           cwd=os.path.dirname(DIGESTS)).stdout.strip(),
           "torch": torch.__version__, "groups": {}, "special": {}, "hybrid": {}}
    for reduce_op in REDUCE_OPS:
        for algo, op, dtype in reducing_groups(reduce_op):
            out["groups"][f"{algo}/{op}/{reduce_op}/{_name(dtype)}"] = group_digest(executor.run, algo, op, dtype,
                                                                                     reduce_op)
    for algo, op, dtype in moving_groups():
        out["groups"][f"{algo}/{op}/-/{_name(dtype)}"] = group_digest(executor.run, algo, op, dtype)
    for key, case in special_cases().items():
        out["special"][key] = special_digest(executor.run, case)
    for case in HYBRID_CASES:
        out["hybrid"][hybrid_key(*case)] = hybrid_digest(*case)
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write("\n")
    return out


def _recorded() -> dict:
    with open(DIGESTS) as f:
        return json.load(f)


# -- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduce_op", REDUCE_OPS)
def test_reductions_give_the_recorded_bytes(reduce_op):
    want = _recorded()["groups"]
    bad = []
    for algo, op, dtype in reducing_groups(reduce_op):
        key = f"{algo}/{op}/{reduce_op}/{_name(dtype)}"
        if group_digest(executor.run, algo, op, dtype, reduce_op) != want[key]:
            bad.append(key)
    assert not bad, f"bytes differ from the step-by-step executor's: {bad}"


def test_data_movement_gives_the_recorded_bytes():
    want = _recorded()["groups"]
    bad = [f"{a}/{op}/{_name(d)}" for a, op, d in moving_groups()
           if group_digest(executor.run, a, op, d) != want[f"{a}/{op}/-/{_name(d)}"]]
    assert not bad, f"bytes differ from the step-by-step executor's: {bad}"


@pytest.mark.parametrize("family", ["all_to_all", "hierarchical", "torus",
                                    pytest.param("large", marks=pytest.mark.exhaustive)])
def test_special_schedules_give_the_recorded_bytes(family):
    want = _recorded()["special"]
    cases = {k: c for k, c in special_cases().items() if k.startswith(family + "/")}
    assert cases
    bad = [k for k, c in cases.items() if special_digest(executor.run, c) != want[k]]
    assert not bad, f"bytes differ from the step-by-step executor's: {bad}"


def test_hybrid_slots_give_the_recorded_bytes():
    want = _recorded()["hybrid"]
    bad = [hybrid_key(*c) for c in HYBRID_CASES if hybrid_digest(*c) != want[hybrid_key(*c)]]
    assert not bad, f"bytes differ from the step-by-step executor's: {bad}"


def test_the_reference_reproduces_the_recorded_bytes():
    # The reference is only an oracle if it agrees with what was recorded.
    want = _recorded()
    for reduce_op, dtype in [("sum", torch.float32), ("avg", torch.bfloat16), ("min", torch.int16),
                             ("premul_sum", torch.complex64), ("prod", torch.float8_e5m2)]:
        for algo, op in REDUCING_PAIRS:
            if dtype_class(dtype) in REDUCE_RULES[reduce_op]:
                key = f"{algo}/{op}/{reduce_op}/{_name(dtype)}"
                assert group_digest(reference_run, algo, op, dtype, reduce_op) == want["groups"][key], key
    for algo, op, dtype in moving_groups()[::5]:
        assert group_digest(reference_run, algo, op, dtype) == want["groups"][f"{algo}/{op}/-/{_name(dtype)}"]
    for key in ["torus/(2, 3)/sum/float32/True", "hierarchical/tree/3x3/avg/float16/False",
                "all_to_all/splits0/float16"]:
        assert special_digest(reference_run, special_cases()[key]) == want["special"][key], key


def test_every_schedule_runs_fused(monkeypatch):
    # No schedule of any algorithm falls back to the step-by-step path on host memory.
    def refuse(schedule, *args):
        raise AssertionError(f"{schedule.algorithm} {schedule.spec.op} ran step by step")

    monkeypatch.setattr(executor, "_run_steps", refuse)
    for algo, op in PAIRS:
        for v in _variants(algo, op):
            p, count = v.pop("p"), v.pop("count")
            for dtype, reduce_op in ([(torch.float32, "avg"), (torch.bfloat16, "max"), (torch.int32, "bxor")]
                                     if op in REDUCING else [(torch.float16, "sum")]):
                run_variant(executor.run, algo, op, p, count, dtype, reduce_op, **v)
    for key, case in special_cases().items():
        if not key.startswith("large/"):
            special_digest(executor.run, case)


def test_the_step_by_step_path_still_gives_the_recorded_bytes(monkeypatch):
    # The path memory that is not the host's (cuda-backed slots) takes, and any run without the runtime.
    monkeypatch.setattr(executor, "_run_fused", lambda *args: False)
    want = _recorded()["groups"]
    for reduce_op, dtype in [("sum", torch.float32), ("avg", torch.bfloat16), ("bxor", torch.int64)]:
        for algo, op in REDUCING_PAIRS:
            key = f"{algo}/{op}/{reduce_op}/{_name(dtype)}"
            assert group_digest(executor.run, algo, op, dtype, reduce_op) == want[key], key
    for algo, op, dtype in moving_groups()[::4]:
        assert group_digest(executor.run, algo, op, dtype) == want[f"{algo}/{op}/-/{_name(dtype)}"]


def _allocations(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name == "[memory]")


@pytest.mark.parametrize("op,dtype", [("all_reduce", torch.bfloat16), ("reduce_scatter", torch.float32),
                                      ("all_reduce", torch.float32)])
def test_a_fused_run_allocates_nothing(op, dtype, monkeypatch):
    count = 50_001
    spec = CollectiveSpec(op=op, participants=8, count=count, itemsize=torch.empty(0, dtype=dtype).element_size())
    schedule = algorithms.get("ring").build(spec)
    inputs, outputs = buffers(spec, dtype, "sum", 1)
    executor.run(schedule, inputs, outputs)  # compiled once, then cached
    assert _allocations(lambda: executor.run(schedule, inputs, outputs)) == 0
    if op == "all_reduce" and dtype == torch.float32:
        return
    # The profiler does see allocations: the step-by-step path widens into float32 copies / uses scratch.
    monkeypatch.setattr(executor, "_run_fused", lambda *args: False)
    assert _allocations(lambda: executor.run(schedule, inputs, outputs)) > 0


def test_in_process_all_reduce_allocates_nothing():
    from collectives import in_process

    tensors = [torch.ones(100_003, device=f"hybrid:{i}") for i in range(8)]
    in_process.all_reduce(tensors)
    assert _allocations(lambda: in_process.all_reduce(tensors)) == 0
    assert all(bool((t.cpu() == 8.0 ** 2).all()) for t in tensors)


def test_a_schedule_that_overwrites_its_input_in_place_reads_a_copy():
    # A hand-made all_reduce on one participant that swaps the halves of its buffer: in place, the second
    # copy reads what the first overwrote, so both executors must read a copy of the input.
    spec = CollectiveSpec(op="all_reduce", participants=1, count=6, itemsize=4)
    rounds = Rounds()
    rounds.send(0, 0, 0, "in", 0, "out", 3, 3)
    rounds.send(1, 0, 0, "in", 3, "out", 0, 3)
    schedule = make(spec, "ring", rounds)
    assert fused.effective_alias(schedule, [(0, 0)], widened=False) == (None,)  # unsafe in place: a copy
    program = fused.compile_schedule(schedule, [None])
    assert fused.hazards(program, [(0, 0)]) == {("in", 0)}
    assert not fused.hazards(program, [None])
    x = torch.arange(6.0)
    executor.run(schedule, [x], [x])
    assert x.tolist() == [3.0, 4.0, 5.0, 0.0, 1.0, 2.0]


def test_a_schedule_reading_scratch_it_never_wrote_is_not_fused():
    spec = CollectiveSpec(op="all_reduce", participants=1, count=4, itemsize=4)
    rounds = Rounds()
    rounds.send(0, 0, 0, "tmp", 0, "out", 0, 4)
    assert fused.compile_schedule(make(spec, "ring", rounds, {"tmp": [4]})) is None


def test_compiled_all_reduce_reads_each_input_once_per_chunk():
    # The program of an all_reduce is one step per chunk: p leaves (every input once), p destinations.
    for algo in ("ring", "rabenseifner", "direct", "tree"):
        spec = CollectiveSpec(op="all_reduce", participants=8, count=1001, pipeline=2)
        program = fused.compile_schedule(algorithms.get(algo).build(spec))
        for step in program.steps:
            assert sorted(r for _, r, _ in step.leaves) == list(range(8)), algo
            assert sorted(r for r, _ in step.dsts) == list(range(8)), algo
        assert program.elements == 8 * 1001


_CASE = st.sampled_from(PAIRS).flatmap(lambda pair: st.tuples(
    st.just(pair),
    st.just(2) if pair[1] == "send_recv" else st.integers(1, 12),
    st.integers(0, 300),
    st.sampled_from(REDUCE_OPS if pair[1] in REDUCING else ["sum"]),
    st.sampled_from(DTYPES),
    st.booleans(),
    st.integers(1, 4)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_CASE)
def test_random_cases_match_the_reference(case):
    (algo, op), p, count, reduce_op, dtype, inplace, pipeline = case
    if op in REDUCING and dtype_class(dtype) not in REDUCE_RULES[reduce_op]:
        return
    if op not in algorithms.get(algo).pipelined:
        pipeline = 1
    inplace = inplace and op in IN_PLACE_OPS
    got = run_variant(executor.run, algo, op, p, count, dtype, reduce_op, inplace=inplace, pipeline=pipeline)
    want = run_variant(reference_run, algo, op, p, count, dtype, reduce_op, inplace=inplace, pipeline=pipeline)
    assert digest(got[1] + got[0]).hexdigest() == digest(want[1] + want[0]).hexdigest(), case


if __name__ == "__main__":
    if "--record" in sys.argv:
        result = record()
        print(f"recorded {sum(len(v) for v in result.values() if isinstance(v, dict))} digests into {DIGESTS}")
