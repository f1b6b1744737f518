"""``hybrid bench collectives`` and ``hybrid check collectives``: the
nccl-tests of the rack, on tensors that live on its slots.

Every row runs the real collective on the slots (zero-copy, the schedule the
cost model chose) and checks it against an exactly predictable reference
(``collectives.verify``): ``#wrong`` counts differing elements (0 ulp; 2 ulp
for AVG). Times are printed twice: modelled (the schedule on the rack's
topology) and measured (wall time of the emulation on this host).
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass

import torch

from collectives import verify
from collectives import in_process as hc
from collectives.algorithm_choice import plan
from collectives.ops import REDUCING, SCALED
from collectives.schedule import CollectiveSpec
from devices.output_files import atomic_path

BENCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")


@dataclass
class Row:
    op: str
    nbytes: int
    count: int
    dtype: str
    redop: str
    root: int
    algorithm: str
    modelled_us: float
    algbw: float
    busbw: float
    wrong_oop: int
    measured_oop_us: float
    wrong_ip: int
    measured_ip_us: float


def _on_slots(tensors, slots):
    return [None if t is None else t.to(f"hybrid:{s}") for t, s in zip(tensors, slots)]


def run_case(op: str, slots: list[int], count: int, dtype: torch.dtype, redop: str = "sum", *, root: int = 0,
             algorithm: str | None = None, iters: int = 1, in_place: bool = True, seed: int = 0):
    """One checked case on hybrid slots: (Result of the last out-of-place run, #wrong oop, wall s oop,
    #wrong in-place or None, wall s in-place or None)."""
    p = len(slots)
    factor = (0.5 if dtype.is_floating_point else 2) if redop == "premul_sum" else None
    spec = CollectiveSpec(op=op, participants=p, count=count, itemsize=torch.empty(0, dtype=dtype).element_size(),
                          root=root)
    inputs, outputs, expected = verify.expected_and_inputs(spec, dtype, redop, factor, seed)
    ins, outs = _on_slots(inputs, slots), _on_slots(outputs, slots)
    times = []
    result = None
    for _ in range(iters):
        start = time.perf_counter()
        result = hc.run(op, ins, outs, reduce_op=redop, algorithm=algorithm, root=root, factor=factor)
        times.append(time.perf_counter() - start)
    wrong, _ = verify.count_wrong([None if t is None else t.cpu() for t in outs], expected, redop, op)
    if iters > 1:  # repeated reductions would accumulate: check only the first result
        pass
    wrong_ip = time_ip = None
    if in_place and iters == 1:
        if op in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"):
            ip_in, ip_out = verify.in_place(op, _on_slots(inputs, slots), _on_slots(outputs, slots), count)
            start = time.perf_counter()
            hc.run(op, ip_in, ip_out, reduce_op=redop, algorithm=result.estimate.algorithm, root=root, factor=factor)
            time_ip = time.perf_counter() - start
            wrong_ip, _ = verify.count_wrong([None if t is None else t.cpu() for t in ip_out], expected, redop, op)
    return result, wrong, statistics.median(times), wrong_ip, time_ip


def bench(op: str, sizes: list[int], *, dtype: str = "float32", redop: str = "sum", root: int = 0,
          algorithm: str | None = None, slots: list[int] | None = None, printer=print) -> list[Row]:
    """nccl-tests table on the current rack's slots; returns the rows."""
    import interop

    rack = interop.current_rack()
    slots = list(range(len(rack))) if slots is None else list(slots)
    p = len(slots)
    dt = verify.DTYPES[dtype]
    item = torch.empty(0, dtype=dt).element_size()
    printer(f"# hybrid bench collectives: {op} on rack {rack.name}, slots {slots}, {dtype}, redop {redop}")
    printer("# time/algbw/busbw: modelled on the rack's topology; meas: measured wall time of the emulation here")
    # 120 columns: the columns of nccl-tests' table, each as narrow as its widest usual value
    printer(f"# {'':>56}{'out-of-place':^44}{'in-place':^18}".rstrip())
    printer(f"# {'size':>11} {'count':>10} {'type':>8} {'redop':>6} {'root':>4} {'algorithm':>12} "
            f"{'time(us)':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'meas(us)':>10} {'#wrong':>6} {'meas(us)':>10}")
    rows = []
    for size in sizes:
        count = size // item // (p if op in SCALED else 1)
        result, wrong, secs, wrong_ip, secs_ip = run_case(op, slots, count, dt, redop, root=root, algorithm=algorithm)
        est = result.estimate
        row = Row(op, est.nbytes, count, dtype, redop, root, est.algorithm, est.seconds * 1e6, est.algbw / 1e9,
                  est.busbw / 1e9, wrong, secs * 1e6, -1 if wrong_ip is None else wrong_ip,
                  float("nan") if secs_ip is None else secs_ip * 1e6)
        rows.append(row)
        ip = ("{:>6} {:>10}".format("n/a", "n/a") if wrong_ip is None
              else f"{wrong_ip:>6} {secs_ip * 1e6:>10.1f}")
        printer(f"  {est.nbytes:>11} {count:>10} {dtype:>8} {redop:>6} {root:>4} {est.algorithm:>12} "
                f"{est.seconds * 1e6:>9.2f} {est.algbw / 1e9:>7.2f} {est.busbw / 1e9:>7.2f} {wrong:>6} "
                f"{secs * 1e6:>10.1f} {ip}")
    total = sum(r.wrong_oop + max(r.wrong_ip, 0) for r in rows)
    printer(f"# Out of bounds values : {total} {'OK' if total == 0 else 'FAILED'}")
    return rows


def plot(rows: list[Row], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    sizes = [r.nbytes for r in rows]
    ax.plot(sizes, [r.busbw for r in rows], marker="o", label="busbw, modelled (GB/s)")
    ax.plot(sizes, [r.nbytes / r.measured_oop_us / 1e3 if r.measured_oop_us else 0 for r in rows], marker="x",
            linestyle="--", label="algbw, measured emulation on this host (GB/s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes, nccl-tests S)")
    ax.set_ylabel("GB/s")
    ax.set_title(f"{rows[0].op}: modelled vs measured" if rows else "collectives")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, "path") as tmp:  # a whole picture or none
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return path


def check(*, participants=(1, 2, 3, 5, 8), sizes=(0, 1, 13, 4099), dtypes=("float32", "bfloat16", "int32"),
          ops=None, algorithms=True, progress: bool = True, printer=print) -> int:
    """Correctness sweep on the current rack's slots: op x redop x dtype x participants x size x algorithm.

    Returns the total number of wrong elements (0 means every case was exact).
    Participant counts larger than the rack are skipped with a note; a sweep
    that would check nothing at all raises ValueError saying why (a check that
    checks nothing must not pass).
    """
    import interop

    from collectives.algorithms import names as algorithm_names

    rack = interop.current_rack()
    ops = ops or ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "gather",
                  "scatter")
    too_many = sorted({p for p in participants if p > len(rack)})
    fitting = [p for p in participants if p <= len(rack)]
    for what, values in (("participants", fitting), ("sizes", sizes), ("dtypes", dtypes), ("ops", ops)):
        if not values:
            why = (f"every participant count ({', '.join(map(str, too_many))}) is larger than the rack "
                   f"{rack.name!r} ({len(rack)} slots)" if what == "participants" and too_many else "none given")
            raise ValueError(f"{what}: nothing to check: {why}")
    if too_many:
        printer(f"note: skipped participants {', '.join(map(str, too_many))}: more than the rack {rack.name!r} "
                f"has ({len(rack)} slots)")
    cases = []
    for op, dtype, p, n in itertools.product(ops, dtypes, fitting, sizes):
        redops = ["sum"]
        if op in REDUCING:
            dt = verify.DTYPES[dtype]
            redops = ["sum", "prod", "min", "max", "premul_sum"] + (["avg"] if dt.is_floating_point else
                                                                     ["band", "bor", "bxor"])
        for redop in redops:
            cases.append((op, dtype, p, n, redop))
    bar = _progress(len(cases), progress)
    total = failures = runs = 0
    for op, dtype, p, n, redop in cases:
        slots = list(range(p))
        item = torch.empty(0, dtype=verify.DTYPES[dtype]).element_size()
        algos = [None]
        if algorithms:
            est = plan(rack.spec, op, n, item, slots, build=False).estimate
            # Alternatives are labelled by candidate (hierarchical(ring)...); rerun those that are algorithms.
            algos = [a for a in est.alternatives if a in algorithm_names()] or [None]
        for algo in algos:
            _, wrong, _, wrong_ip, _ = run_case(op, slots, n, verify.DTYPES[dtype], redop, algorithm=algo)
            runs += 1
            bad = wrong + (wrong_ip or 0)
            if bad:
                failures += 1
                printer(f"WRONG: {op} {dtype} {redop} p={p} count={n} algorithm={algo}: {bad} elements")
            total += bad
        bar.update(1)
    bar.close()
    if runs == 0:
        raise ValueError(f"nothing was checked on rack {rack.name!r}: no case ran")
    printer(f"hybrid check collectives: {runs} runs over {len(cases)} cases on rack {rack.name}: "
            f"{total} wrong elements in {failures} runs -> {'OK' if total == 0 else 'FAILED'}")
    return total


def _progress(total: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    if enabled:
        return tqdm(total=total, desc="collectives", unit="case", leave=False)

    class _Null:
        def update(self, n):
            pass

        def close(self):
            pass

    return _Null()
