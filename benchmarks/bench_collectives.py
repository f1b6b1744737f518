"""Measured speed of the in-process collectives on emulated slots.

all_reduce (float32, sum) over 8 emulated slots at 1 MiB, 64 MiB and 256 MiB per slot, against
1. its physical floor here, the memory traffic: every input read once and every output written once,
   i.e. 8 memcpys of the same size, measured in the same run, interleaved (target: the algorithm the cost
   model chooses within 1.15x of it at every size; the other algorithms are listed without a target);
2. torch.distributed's Gloo all_reduce over 8 processes on this machine for the same data at 64 MiB
   (target: at least 10x faster), measured in turns with the in-process all_reduce: the Gloo workers stay
   up, blocked, while this process measures, and both sides refill their inputs before every timed call.
   Beside it, in the same turns, the in-place floor (every buffer read and written once, no arithmetic):
   Gloo over that floor is the most any in-process all_reduce could gain on this machine.
Each figure is a median over interleaved repeats (at 1 MiB each repeat is itself the median of several
calls), every all_reduce timed alone from fresh inputs written before the clock starts; #wrong counts a
checked run of every algorithm at every size and the Gloo results.

``python -m benchmarks.bench_collectives --profile [MiB]`` prints where one all_reduce's time goes
(torch.profiler: ATen ops by kind, the fused pass, allocations; the rest is Python and dispatch).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from benchmarks.harness import Section, median, spread, write_section

import interop  # noqa: F401  (registers the hybrid device)

try:
    from collectives import in_process as hc
except ImportError:  # older trees (the profile is also run on them, for the record of before and after)
    from collectives import hybrid as hc

COMMAND = "python -m benchmarks collectives"
SLOTS = 8
SIZES = (1 << 20, 64 << 20, 256 << 20)
GLOO_BYTES = 64 << 20
ALGORITHMS = (None, "ring", "rabenseifner", "direct", "tree")
TARGET_RATIO = 1.15
TARGET_SPEEDUP = 10.0


def _mib(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB"


class _Bench:
    """Slots, inputs and the memcpy floor for one size."""

    def __init__(self, nbytes: int) -> None:
        n = nbytes // 4
        self.n = n
        self.values = [torch.full((n,), float(v)) for v in range(3)]  # participant i gets i % 3
        self.expected = float(sum(i % 3 for i in range(SLOTS)))
        self.slots = [torch.empty(n, device=f"hybrid:{i}") for i in range(SLOTS)]
        self.aliases = [interop._C._execution_alias(t) for t in self.slots]
        self.src = [torch.ones(n) for _ in range(SLOTS)]
        self.dst = [torch.empty(n) for _ in range(SLOTS)]
        self.chosen: dict = {}

    def refill(self) -> None:
        for i, a in enumerate(self.aliases):
            a.copy_(self.values[i % 3])

    def all_reduce(self, algorithm) -> float:
        self.refill()  # fresh inputs every run, outside the timed region
        start = time.perf_counter()
        result = hc.all_reduce(self.slots, algorithm=algorithm)
        elapsed = time.perf_counter() - start
        self.chosen[algorithm] = result.estimate.algorithm
        return elapsed

    def floor(self) -> float:
        start = time.perf_counter()
        for s, d in zip(self.src, self.dst):
            d.copy_(s)
        return time.perf_counter() - start

    def in_place_floor(self) -> float:
        """Read and write every slot's buffer once, in place: the least memory traffic any in-place all_reduce
        can move (each input read, each output written), with nothing to compute that a load/store pair
        does not already pay for."""
        self.refill()
        start = time.perf_counter()
        for a in self.aliases:
            a.mul_(1.0)
        return time.perf_counter() - start

    def wrong(self, algorithm) -> int:
        self.all_reduce(algorithm)  # one more run whose result is checked element by element
        return sum(int((a != self.expected).sum()) for a in self.aliases)


def _ratios(section: Section, nbytes: int, repeats: int) -> int:
    """The rows of one size; returns the wrong elements of a checked run of every algorithm."""
    bench = _Bench(nbytes)
    calls = max(1, min(15, (16 << 20) // nbytes))  # small sizes: each repeat the median of several calls
    for a in ALGORITHMS:  # warm-up: plans, compiled schedules, page faults
        bench.all_reduce(a)
        bench.all_reduce(a)
    bench.floor()
    samples: dict = {"floor": []}
    for _ in range(repeats):  # interleaved: every series sees the same machine
        per_call: dict = {"floor": []}
        for _ in range(calls):
            per_call["floor"].append(bench.floor())
            for a in ALGORITHMS:
                per_call.setdefault(a, []).append(bench.all_reduce(a))
        for key, xs in per_call.items():
            samples.setdefault(key, []).append(statistics.median(xs))
    floor_s = samples["floor"]
    how = f"median of {repeats} interleaved repeats" + (f" (each the median of {calls} calls)" if calls > 1 else "")
    for a in ALGORITHMS:
        net = samples[a]
        ratio = median([x / f for x, f in zip(net, floor_s)])
        size = _mib(nbytes)
        label = (f"all_reduce {size} x {SLOTS} slots, algorithm chosen by modelled time ({bench.chosen[a]})"
                 if a is None else f"all_reduce {size} x {SLOTS} slots, algorithm {a}")
        section.add(f"{label} / 8 memcpys of {size}", f"{ratio:.2f}x", f"<= {TARGET_RATIO}x" if a is None else "",
                    ratio <= TARGET_RATIO if a is None else None,
                    f"all_reduce {median(net) * 1e3:.3g} ms ({spread([x * 1e3 for x in net])}), floor "
                    f"{median(floor_s) * 1e3:.3g} ms; {how}")
    wrong = sum(bench.wrong(a) for a in ALGORITHMS)
    del bench
    return wrong


def _gloo_row(section: Section, repeats: int) -> int:
    try:
        from benchmarks.gloo_baseline import gloo_interleaved
    except ImportError as e:  # pragma: no cover - reported in the results
        section.notes.append(f"Gloo baseline not measured: {e}")
        return 0
    bench = _Bench(GLOO_BYTES)
    for _ in range(2):
        bench.all_reduce(None)
        bench.in_place_floor()
    floors: list[float] = []

    def mine() -> float:
        floors.append(bench.in_place_floor())
        return bench.all_reduce(None)

    gloo, ours, gloo_wrong = gloo_interleaved(mine, world_size=SLOTS, nbytes=GLOO_BYTES, repeats=repeats)
    speedup = median([g / o for g, o in zip(gloo, ours)])
    ceiling = median([g / f for g, f in zip(gloo, floors)])
    section.add(f"speed-up over torch.distributed Gloo all_reduce, {SLOTS} processes, same data "
                f"({_mib(GLOO_BYTES)} float32 each)", f"{speedup:.1f}x", f">= {TARGET_SPEEDUP:g}x",
                speedup >= TARGET_SPEEDUP,
                f"Gloo {median(gloo) * 1e3:.1f} ms ({spread([g * 1e3 for g in gloo])}), hybrid "
                f"{median(ours) * 1e3:.1f} ms ({spread([o * 1e3 for o in ours])}), algorithm "
                f"{bench.chosen[None]}; {repeats} repeats taken in turns, fresh inputs on both sides, "
                f"median of the per-repeat ratios")
    section.add(f"the most any in-process all_reduce could gain over Gloo here: Gloo / reading and writing "
                f"{SLOTS} x {_mib(GLOO_BYTES)} in place", f"{ceiling:.1f}x", "", None,
                f"in-place read+write {median(floors) * 1e3:.1f} ms ({spread([f * 1e3 for f in floors])}), "
                f"taken in the same turns; all_reduce / in-place floor "
                f"{median([o / f for o, f in zip(ours, floors)]):.2f}x")
    wrong = bench.wrong(None) + gloo_wrong
    del bench
    return wrong


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("collectives", "in-process all_reduce on emulated slots (measured)", COMMAND)
    wrong = 0
    for nbytes in SIZES:
        wrong += _ratios(section, nbytes, repeats)
    wrong += _gloo_row(section, repeats)
    section.add("#wrong elements", str(wrong), "0", wrong == 0,
                f"a checked run of every algorithm at every size ({SLOTS} slots each), and Gloo's last result")
    prof = profile_all_reduce(GLOO_BYTES)
    section.notes.append(f"Profile of one {_mib(GLOO_BYTES)} all_reduce ({prof['algorithm']}), torch.profiler: "
                         + _profile_text(prof))
    step = profile_all_reduce(GLOO_BYTES, fused=False)
    section.notes.append(f"Before, the same all_reduce ({step['algorithm']}) step by step (the executor's path "
                         "without the fused pass, as every call took before it; still the path for GPU memory): "
                         + _profile_text(step))
    if write:
        write_section(section)
    return section


# -- profile --------------------------------------------------------------------------------------

_KINDS = {
    "reduction": ("aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::minimum", "aten::maximum",
                  "aten::bitwise_and", "aten::bitwise_or", "aten::bitwise_xor", "aten::div_"),
    "copies": ("aten::copy_",),
    "views": ("aten::slice", "aten::view", "aten::as_strided", "aten::alias", "aten::narrow"),
    "allocations": ("aten::empty", "aten::empty_like", "aten::empty_strided", "aten::clone", "aten::to",
                    "aten::_to_copy"),
    "fused pass": ("hybrid::fused_collective",),
}


def profile_all_reduce(nbytes: int = GLOO_BYTES, algorithm=None, fused: bool = True) -> dict:
    """Where one in-place all_reduce of ``nbytes`` per slot spends its time (median-of-3 wall time unprofiled;
    op counts, self times and allocations from one run under torch.profiler). ``fused=False`` profiles the
    step-by-step executor (one torch op per transfer) instead of the fused pass."""
    if not fused:
        from collectives import executor

        saved = executor._run_fused
        executor._run_fused = lambda *args: False  # the executor falls back to its step-by-step path
        try:
            return profile_all_reduce(nbytes, algorithm)
        finally:
            executor._run_fused = saved
    from torch.profiler import ProfilerActivity, profile

    bench = _Bench(nbytes)
    for _ in range(2):
        bench.all_reduce(algorithm)
    wall = statistics.median(bench.all_reduce(algorithm) for _ in range(3))
    bench.refill()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        start = time.perf_counter()
        hc.all_reduce(bench.slots, algorithm=algorithm)
        profiled = time.perf_counter() - start
    kinds = {k: [0, 0.0] for k in _KINDS}
    allocations = allocated = 0
    for e in prof.events():
        if e.name == "[memory]":
            allocations += e.cpu_memory_usage > 0
            allocated += max(0, e.cpu_memory_usage)
            continue
        for kind, names in _KINDS.items():
            if e.name in names:
                kinds[kind][0] += 1
                kinds[kind][1] += e.self_cpu_time_total / 1e6
    accounted = sum(t for _, t in kinds.values())
    chosen = bench.chosen[algorithm]
    del bench
    return {"algorithm": chosen, "wall": wall,
            "profiled": profiled, "kinds": kinds, "allocations": allocations, "allocated": allocated,
            "rest": max(0.0, profiled - accounted)}


def _profile_text(prof: dict) -> str:
    parts = [f"{kind} {count} ops {seconds * 1e3:.1f} ms" for kind, (count, seconds) in prof["kinds"].items()
             if count]
    return (f"wall {prof['wall'] * 1e3:.1f} ms unprofiled ({prof['profiled'] * 1e3:.1f} ms profiled); "
            + "; ".join(parts) + f"; allocations {prof['allocations']} ({prof['allocated'] / 2**20:.1f} MiB); "
            f"Python and dispatch (the rest) {prof['rest'] * 1e3:.1f} ms")


if __name__ == "__main__":
    if "--profile" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--profile"]
        size = int(float(args[0]) * (1 << 20)) if args else GLOO_BYTES
        for algo in ALGORITHMS:
            p = profile_all_reduce(size, algo)
            print(f"{_mib(size)} {algo or 'chosen'} ({p['algorithm']}): {_profile_text(p)}", flush=True)
    else:
        run().print()
