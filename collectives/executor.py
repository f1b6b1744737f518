"""Run a schedule on real tensors: move and reduce the data exactly as the schedule says.

:func:`run` executes a :class:`~collectives.schedule.Schedule` over one tensor
per participant (CPU tensors, or CPU aliases of device memory that the hybrid
layer passes).  On host memory, with the runtime loaded (``import interop``
registers its kernel in ``collectives.device_hooks``), the schedule is compiled
once (``collectives.fused``: every output region as one expression of the
inputs, in the schedule's order and association) and run in one pass per
chunk: each input element read once, each output element written once,
nothing allocated.  Elsewhere (memory of a real GPU, no runtime) it walks the
rounds transfer by transfer with in-place torch ops on chunk views.  Both give
the same bytes.

Numerics:

* Reductions of float16, bfloat16 and float8 (e4m3fn, e5m2) accumulate in
  float32 and round to the output dtype once at the end (CPU torch has no float8
  arithmetic, and one rounding keeps results independent of the algorithm).
  float32, float64 and integers reduce in their own dtype (integers wrap).
* Which reduce op takes which dtype is the one rule of ``collectives.ops``
  (:data:`~collectives.ops.REDUCE_RULES`, NCCL's where NCCL defines it).
* ``avg`` divides the sum by p once at the end (integers: truncated toward
  zero, as NCCL's ``FuncSumPostDiv``); ``premul_sum`` multiplies the sum by
  ``factor`` once at the end, which equals NCCL's multiply-then-sum in exact
  arithmetic with fewer roundings (integers wrap the same way either way).
* bool sum and prod are logical or and and; complex tensors take sum, avg and
  premul_sum.
* Ops that only move data (all_gather, broadcast, all_to_all, gather, scatter,
  send/recv) copy bytes in the native dtype: any dtype, bit-exact.

Everything is validated before anything is written: lengths, shapes, dtypes,
devices, contiguity, buffers that overlap (a tensor passed twice), whether
the reduce op is defined on the dtype, and premul_sum's factor.  In-place use follows NCCL: input and output
the same tensor for all_reduce, broadcast and reduce; the input being rank i's
slice of the output for all_gather (and the output rank i's slice of the input
for reduce_scatter).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from functools import lru_cache
from typing import Sequence

import torch

from collectives import algorithms, device_hooks, fused
from collectives.ops import REDUCING, check_op, check_reduce, parse_reduce_op, premul_factor
from collectives.schedule import CollectiveSpec, Schedule, inplace_safe, io_sizes
from devices.dtypes import dtype_name

FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
"""Floating dtypes reductions accept."""
INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
"""Integer dtypes reductions accept."""
COMPLEX = (torch.complex64, torch.complex128)
"""Complex dtypes reductions accept (sum, avg, premul_sum: ``collectives.ops.REDUCE_RULES``)."""
REDUCIBLE = FLOATS + INTEGERS + COMPLEX + (torch.bool,)
"""Every dtype this executor reduces; which reduce op takes which is ``collectives.ops.REDUCE_RULES``."""
WIDENED = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
"""Dtypes reduced in float32 and rounded once at the end."""
TILE_BYTES = 2 << 20
"""Large aligned schedules run one tile of this many bytes at a time (measured best on a 2-core, 1 MiB-L2 host)."""



def _binary(op: str, dtype: torch.dtype):
    """(out-of-place with out=, in-place) torch functions applying reduce op ``op`` to two tensors."""
    if dtype == torch.bool and op in ("min", "max"):
        op = "band" if op == "min" else "bor"
    if op in ("sum", "avg", "premul_sum"):
        return (lambda a, b, d: torch.add(a, b, out=d)), (lambda d, b: d.add_(b))
    if op == "prod":
        return (lambda a, b, d: torch.mul(a, b, out=d)), (lambda d, b: d.mul_(b))
    if op == "min":
        return (lambda a, b, d: torch.minimum(a, b, out=d)), (lambda d, b: torch.minimum(d, b, out=d))
    if op == "max":
        return (lambda a, b, d: torch.maximum(a, b, out=d)), (lambda d, b: torch.maximum(d, b, out=d))
    fn = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
    return (lambda a, b, d: fn(a, b, out=d)), (lambda d, b: fn(d, b, out=d))


def _flat(t: torch.Tensor | None) -> torch.Tensor | None:
    return t if t is None or t.dim() == 1 else t.view(-1)


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def _inplace_offset(op: str, i: int, t_in: torch.Tensor, t_out: torch.Tensor, count: int,
                    spans: tuple | None = None) -> tuple[int, int] | None:
    """(in_base, out_base) in elements when rank i's input and output share memory the NCCL way, else None.

    ``spans``: the two tensors' (start, end) byte addresses when the caller has them."""
    (a0, a1), (b0, b1) = spans if spans is not None else (_span(t_in), _span(t_out))
    size = t_out.element_size()
    if op in ("all_reduce", "broadcast", "reduce") and (a0, a1) == (b0, b1):
        return 0, 0
    if op == "all_gather" and a0 == b0 + i * count * size and a1 - a0 == count * size:
        return i * count, 0
    if op == "reduce_scatter" and b0 == a0 + i * count * size and b1 - b0 == count * size:
        return 0, i * count
    return None


_checked_reduce: set[tuple[str, torch.dtype]] = set()


def _check_reduce(op: str, reduce_op: str, dtype: torch.dtype) -> None:
    """check_reduce and the executor's own dtype list, remembering the pairs that passed."""
    if (reduce_op, dtype) in _checked_reduce:
        return
    check_reduce(reduce_op, dtype, where=f"{op}: op")
    if dtype not in REDUCIBLE:
        raise TypeError(f"{op}: this executor does not reduce {dtype}; it reduces "
                        f"{', '.join(dtype_name(d) for d in REDUCIBLE)}")
    _checked_reduce.add((reduce_op, dtype))


def validate(schedule: Schedule, inputs: Sequence, outputs: Sequence, reduce_op: str = "sum",
             factor=None) -> tuple[list[tuple[int, int] | None], int | float | None]:
    """Check tensors against the schedule before anything is written.

    Returns the in-place layout per rank and premul_sum's factor as a number
    of the tensors' dtype class (None for other ops).  Raises ValueError for
    wrong lengths, sizes, devices, layouts, overlapping buffers and a bad
    factor value; TypeError for non-tensors, mixed dtypes, a reduce op the
    dtype does not take (``collectives.ops.REDUCE_RULES``) and a factor that
    is not a real number or one-element tensor.
    """
    spec, p = schedule.spec, schedule.participants
    op = spec.op
    if len(inputs) != p or len(outputs) != p:
        raise ValueError(f"{op}: expected {p} inputs and {p} outputs (one per participant), "
                         f"got {len(inputs)} and {len(outputs)}")
    tensors = []
    shapes = {"in": set(), "out": set()}
    dtypes, devices = set(), set()
    for kind, seq in (("in", inputs), ("out", outputs)):
        want = schedule.buffers[kind]
        for i, t in enumerate(seq):
            if want[i] == 0 and t is None:
                continue
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{op}: {kind}put of participant {i} must be a torch.Tensor, got {type(t).__name__}")
            if t.numel() != want[i]:
                raise ValueError(f"{op}: {kind}put of participant {i} has {t.numel()} elements, expected {want[i]}")
            if not t.is_contiguous():
                raise ValueError(f"{op}: {kind}put of participant {i} must be contiguous")
            tensors.append((kind, i, t))
            shapes[kind].add(t.shape)
            dtypes.add(t.dtype)
            devices.add(t.device)
    if factor is not None and (op not in REDUCING or reduce_op != "premul_sum"):
        raise ValueError(f"{op}: factor: only the premul_sum reduce op takes a factor (op is {reduce_op!r})")
    if not tensors:
        return [None] * p, None
    if spec.splits is None:  # equal sizes everywhere: the shapes must agree too
        for kind in ("in", "out"):
            if len(shapes[kind]) > 1:
                raise ValueError(f"{op}: {kind}put shapes differ between participants: "
                                 f"{sorted(tuple(s) for s in shapes[kind])}")
        if op in ("all_reduce", "broadcast", "reduce", "send_recv"):
            both = shapes["in"] | shapes["out"]
            if len(both) > 1:
                raise ValueError(f"{op}: input and output shapes differ: {sorted(tuple(s) for s in both)}")
    if len(dtypes) > 1:
        raise TypeError(f"{op}: all tensors must share one dtype, got {sorted(str(d) for d in dtypes)}")
    if len(devices) > 1:
        raise ValueError(f"{op}: all tensors must be on one device, got {sorted(str(d) for d in devices)}")
    dtype = dtypes.pop()
    scale = None
    if op in REDUCING:
        _check_reduce(op, reduce_op, dtype)
        if reduce_op == "premul_sum":
            scale = premul_factor(factor, dtype, where=f"{op}: factor")
    alias: list[tuple[int, int] | None] = [None] * p
    spans = sorted((_span(t) + (kind, i, t) for kind, i, t in tensors if t.numel()), key=lambda x: x[0])
    active: list[tuple] = []  # earlier spans that reach past the current start, in start order
    for b0, b1, kb, ib, tb in spans:
        if active:
            active = [a for a in active if a[1] > b0]
        for a0, a1, ka, ia, ta in active:
            if ia == ib and ka != kb:
                t_in, t_out, pair = ((ta, tb, ((a0, a1), (b0, b1))) if ka == "in" else
                                     (tb, ta, ((b0, b1), (a0, a1))))
                off = _inplace_offset(op, ia, t_in, t_out, spec.count, pair)
                if off is not None:
                    alias[ia] = off
                    continue
            raise ValueError(f"{op}: the {ka}put of participant {ia} and the {kb}put of participant {ib} share "
                             f"memory (the same tensor twice?); only NCCL-style in-place use is allowed")
        active.append((b0, b1, kb, ib, tb))
    return alias, scale


def run(schedule: Schedule, inputs: Sequence, outputs: Sequence, reduce_op: str = "sum",
        factor: float | int | None = None) -> None:
    """Execute ``schedule``: read ``inputs[i]``, write ``outputs[i]`` for every participant i.

    ``reduce_op`` is one of :data:`collectives.ops.REDUCE_OPS`; ``factor`` is
    premul_sum's scalar (a number or a one-element tensor).  See the module
    docstring for numerics and in-place use.
    """
    reduce_op, factor = reduce_with_factor(reduce_op, factor)
    inputs, outputs = _unused_dropped(schedule, inputs, outputs)
    alias, factor = validate(schedule, inputs, outputs, reduce_op, factor)
    ins = [_flat(t) for t in inputs]
    outs = [_flat(t) for t in outputs]
    if all(t is None for t in ins + outs):
        return
    if not _run_fused(schedule, ins, outs, alias, reduce_op, factor):
        _run_steps(schedule, ins, outs, alias, reduce_op, factor)


# -- one pass per chunk ---------------------------------------------------------------------------

_REDUCE_CODES = {"sum": 0, "avg": 0, "premul_sum": 0, "prod": 1, "min": 2, "max": 3, "band": 4, "bor": 5, "bxor": 6}
"""The kernel's reduce ops (avg and premul_sum sum, then scale once at the end)."""
_POST_NONE, _POST_DIV, _POST_DIV_TRUNC, _POST_MUL = 0, 1, 2, 3
FUSED_CACHE_SIZE = 512
"""Compiled schedules kept (least recently used dropped first), like the plan cache they sit beside."""
_fused_cache: OrderedDict[tuple, tuple] = OrderedDict()
_fused_lock = threading.Lock()


def _compiled(schedule: Schedule, alias: tuple, widened: bool, hooks) -> tuple | None:
    """(program, the runtime's handle, buffers to read from a copy) for ``schedule`` under ``alias``; cached."""
    key = (id(schedule), alias, widened)
    with _fused_lock:
        hit = _fused_cache.get(key)
        if hit is not None and hit[0] is schedule:
            _fused_cache.move_to_end(key)
            return hit[1]
    p = schedule.participants
    program = fused.compile_schedule(schedule, fused.effective_alias(schedule, alias, widened))
    entry = None
    if program is not None and not (widened and (program.reads_out or any(s.identity for s in program.steps))):
        # (Narrow floats reduce in a float32 copy of the output: what it held before the call is not there.)
        steps = [(s.count, list(s.code), [(r if buf == "in" else p + r, off) for buf, r, off in s.leaves],
                  list(s.dsts), s.identity) for s in program.steps]
        handle = hooks.fused_program(steps, program.depth, 2 * p, p)
        entry = (program, handle, fused.hazards(program, alias), fused.hazards(program, alias, scaled=True))
    with _fused_lock:
        _fused_cache[key] = (schedule, entry)
        _fused_cache.move_to_end(key)
        while len(_fused_cache) > FUSED_CACHE_SIZE:
            _fused_cache.popitem(last=False)
    return entry


def _run_fused(schedule: Schedule, ins: list, outs: list, alias, reduce_op: str, factor) -> bool:
    """Run ``schedule`` compiled (``collectives.fused``) in the runtime's one-pass kernel; False where that does
    not apply (no runtime loaded, memory that is not the host's, a schedule the compiler leaves alone)."""
    hooks = device_hooks.registered()
    if hooks is None or hooks.run_fused is None:
        return False
    first = next(t for t in ins + outs if t is not None)
    if first.device.type != "cpu":
        return False
    spec, p = schedule.spec, schedule.participants
    dtype = first.dtype
    reducing = spec.op in REDUCING
    widened = reducing and dtype in WIDENED
    entry = _compiled(schedule, tuple(alias), widened, hooks)
    if entry is None:
        return False
    program, handle, hazards, hazards_scaled = entry
    post, divisor, fval, ival, after = _POST_NONE, 1, 1.0, 1, None
    if reducing and reduce_op in ("avg", "premul_sum"):
        if dtype.is_complex:
            after = reduce_op  # complex division and products: torch's own kernels, on the outputs
        elif reduce_op == "premul_sum":
            post = _POST_MUL
            if dtype.is_floating_point:
                fval = float(factor)
            else:
                ival = int(factor)
        elif dtype.is_floating_point:
            post, divisor = _POST_DIV, p
        else:
            if int(torch.tensor(p).to(dtype)) == 0:
                return False  # p is 0 in the tensor's type: the step-by-step path raises torch's error
            post, divisor = _POST_DIV_TRUNC, p
    sources = ins + outs
    for buf, rank in (hazards_scaled if post != _POST_NONE else hazards):  # in-place use would overwrite these before every step has read them
        k = rank if buf == "in" else p + rank
        sources[k] = sources[k].clone()
    hooks.run_fused(handle, sources, outs, _REDUCE_CODES[reduce_op] if reducing else 0, post, fval, ival, divisor,
                    widened)
    if after is not None:
        for t in outs:
            if t is None:
                continue
            if after == "premul_sum":
                t.mul_(factor)
            else:
                t.div_(p)
    return True


# -- transfer by transfer -------------------------------------------------------------------------


def _run_steps(schedule: Schedule, ins: list, outs: list, alias, reduce_op: str, factor) -> None:
    """Walk the rounds transfer by transfer with torch ops on chunk views (any device)."""
    spec, p = schedule.spec, schedule.participants
    present = [t for t in ins + outs if t is not None]
    dtype, device = present[0].dtype, present[0].device
    reducing = spec.op in REDUCING
    work = dtype
    if reducing and dtype in WIDENED:
        work = torch.float32
        ins = [None if t is None else t.to(work) for t in ins]
        final = outs
        outs = [None if t is None else torch.empty(t.numel(), dtype=work, device=device) for t in outs]
    else:
        final = None
        if any(a is not None for a in alias) and not inplace_safe(schedule, alias):
            ins = [None if t is None else t.clone() for t in ins]
    bufs = {"in": ins, "out": outs}
    for name, sizes in schedule.buffers.items():
        if name not in bufs:
            bufs[name] = [torch.empty(n, dtype=work, device=device) if n else None for n in sizes]
    fn, fn_ = _binary(reduce_op, work)
    tile = max(1, TILE_BYTES // torch.empty(0, dtype=work).element_size())
    length = max((n for sizes in schedule.buffers.values() for n in sizes), default=0)
    if length >= 4 * tile and _aligned(schedule):
        # Element k only ever meets element k of other buffers, so the schedule can run one
        # cache-sized tile at a time: partial sums stay in cache from round to round.
        for lo in range(0, length, tile):
            hi = lo + tile
            for rnd in schedule.rounds:
                for t in rnd:
                    a, b = max(lo, t.dst_off), min(hi, t.dst_off + t.count)
                    if a < b:
                        _apply(t, bufs, fn, fn_, a, b - a)
    else:
        for rnd in schedule.rounds:
            for t in rnd:
                _apply(t, bufs, fn, fn_)
    if reducing and reduce_op in ("avg", "premul_sum"):
        for t in outs:
            if t is None:
                continue
            if reduce_op == "premul_sum":
                t.mul_(factor)
            elif t.is_floating_point() or t.is_complex():
                t.div_(p)
            else:
                t.div_(p, rounding_mode="trunc")
    if final is not None:
        for dst, src in zip(final, outs):
            if dst is not None:
                dst.copy_(src)


def reduce_with_factor(reduce_op, factor=None) -> tuple[str, object]:
    """(reduce op name, factor): a premul_sum ReduceOp built by torch.distributed carries its own factor."""
    name, carried = parse_reduce_op(reduce_op)
    if carried is not None:
        if factor is not None:
            raise ValueError(f"factor: given twice, in the reduce op ({carried!r}) and as factor ({factor!r})")
        factor = carried
    return name, factor


def _unused_dropped(schedule: Schedule, inputs: Sequence, outputs: Sequence) -> tuple[list, list]:
    """Inputs and outputs with the buffers the op never uses set to None (NCCL ignores them too).

    A non-root rank's send buffer in broadcast and scatter, and its receive
    buffer in reduce and gather, may be passed (torch.distributed passes one
    tensor per rank) and are ignored.
    """
    if len(inputs) != schedule.participants or len(outputs) != schedule.participants:
        return list(inputs), list(outputs)  # validate() reports the lengths
    shape = _used(schedule.spec.op, schedule.participants, schedule.spec.root)
    return ([t if shape["in"][i] else None for i, t in enumerate(inputs)],
            [t if shape["out"][i] else None for i, t in enumerate(outputs)])


@lru_cache(maxsize=1024)
def _used(op: str, participants: int, root: int) -> dict[str, tuple[int, ...]]:
    """Which participants have an input and an output buffer (nonzero) in ``op``, whatever the count."""
    return io_sizes(CollectiveSpec(op=op, participants=participants, count=1, root=root))


def _aligned(schedule: Schedule) -> bool:
    """True when every transfer reads and writes the same offsets in buffers of one size (tiling is exact)."""
    sizes = {n for s in schedule.buffers.values() for n in s if n}
    if len(sizes) > 1:
        return False
    for rnd in schedule.rounds:
        for t in rnd:
            if t.src_off != t.dst_off or (t.acc_buf is not None and t.acc_off != t.dst_off):
                return False
    return True


def _apply(t, bufs, fn, fn_, off: int | None = None, count: int | None = None) -> None:
    # (off, count) restrict an aligned transfer to one tile.
    n = t.count if count is None else count
    if n == 0:
        return
    so, do, ao = (t.src_off, t.dst_off, t.acc_off) if off is None else (off, off, off)
    srcs = [bufs[t.src_buf][s][so:so + n] for s in t.srcs]
    for d in t.dsts:
        dst = bufs[t.dst_buf][d][do:do + n]
        if not t.reduce:
            dst.copy_(srcs[0])
            continue
        operands = list(srcs)
        if t.acc_buf is not None:
            operands.insert(0, bufs[t.acc_buf][d][ao:ao + n])
        elif len(srcs) == 1:
            operands.insert(0, dst)
        # An operand stored where the result goes must be read first (in-place use).
        for k, v in enumerate(operands):
            if v.data_ptr() == dst.data_ptr():
                operands.insert(0, operands.pop(k))
                break
        head, rest = operands[0], operands[1:]
        if head.data_ptr() == dst.data_ptr():
            for v in rest:
                fn_(dst, v)
        else:
            fn(head, rest[0], dst)
            for v in rest[1:]:
                fn_(dst, v)


def infer_count(op: str, inputs: Sequence, outputs: Sequence, splits=None) -> int:
    """The per-participant element count (``collectives.ops`` conventions) these tensors describe.

    ``op`` must be canonical (:func:`collectives.ops.check_op`).
    """
    p = len(inputs)
    if len(outputs) != p:
        raise ValueError(f"{op}: expected as many outputs as inputs ({p}), got {len(outputs)}")
    if p == 0:
        raise ValueError(f"{op}: needs at least one participant")
    ref = _COUNT_FROM.get(op)
    if ref is not None:
        ref = inputs if ref == "in" else outputs
        pick = ref[0] if ref[0] is not None else next((t for t in ref if t is not None), None)
        if pick is None:
            raise ValueError(f"{op}: no tensor to take the element count from")
        return pick.numel()
    if op == "all_to_all" and splits is None:
        count, rem = divmod(inputs[0].numel(), p)
        if rem:
            raise ValueError(f"all_to_all: input of {inputs[0].numel()} elements does not split evenly over {p} "
                             f"participants; pass splits")
        return count
    return 0


_COUNT_FROM = {"all_reduce": "in", "all_gather": "in", "reduce": "in", "gather": "in", "send_recv": "in",
               "reduce_scatter": "out", "broadcast": "out", "scatter": "out"}


def infer_spec(op: str, inputs: Sequence, outputs: Sequence, *, root: int = 0, splits=None,
               pipeline: int = 1, itemsize: int | None = None) -> CollectiveSpec:
    """The :class:`CollectiveSpec` a list of per-participant tensors describes (count from their sizes)."""
    op = check_op(op)
    count = infer_count(op, inputs, outputs, splits)
    first = next((t for t in list(inputs) + list(outputs) if t is not None), None)
    size = itemsize or (first.element_size() if first is not None else 1)
    return CollectiveSpec(op=op, participants=len(inputs), count=count, itemsize=size, root=root, splits=splits,
                          pipeline=pipeline)


def execute(op: str, inputs: Sequence, outputs: Sequence, *, reduce_op: str = "sum", algorithm: str = "ring",
            root: int = 0, splits=None, factor=None, pipeline: int = 1, groups=None, outer: str = "ring") -> Schedule:
    """Build ``algorithm``'s schedule for these tensors, run it, and return the schedule that ran."""
    spec = infer_spec(op, inputs, outputs, root=root, splits=splits, pipeline=pipeline)
    if groups is not None:
        spec = replace(spec, groups=tuple(tuple(g) for g in groups), outer=outer)
    schedule = algorithms.get(algorithm).build(spec)
    run(schedule, inputs, outputs, reduce_op, factor)
    return schedule
