"""Serving what-ifs: how long the queries take (the results are modelled).

1. ``interop.serving_whatif`` of 1,000 requests (Llama 3 70B, FP8, 1,000 in / 1,000 out, offline) on 8 H100 in
   TP2 replicas (target <= 1 s).
2. A fleet of replicas totalling a million chips (``h100-node*131072``, ``trn3-ultraserver*7282``), ten million
   requests (target <= 2 s): identical replicas are simulated once with their share.
3. ``hybrid serving ... --search`` under a TTFT and TPOT objective on 16 H100 (target <= 30 s), a fresh process.
4. ``interop.serving_whatif`` of 1,000 requests of 1,024 in / 32,768 out (Llama 3 70B, FP4, one B200; target <= 2 s):
   32k decode iterations a wave, the runs the simulation prices without its event loop. With
   ``HYBRID_BENCH_BEFORE=<older checkout>`` the same call on that tree runs alternated with this one, each in its own
   process (the op-cost cache warmed by a first call there).

Every in-process figure is timed on a fresh rack object (every collective and iteration cost priced anew; the
per-op cost model's own cache warm after the first run), interleaved with a baseline timed in the same run: the
same what-if of a single request (what pricing costs before any simulation). Wall time and the process's CPU
time are both reported: the machine runs other agents' work, so wall time moves with that load.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from benchmarks.harness import Section, alternated, checkout, median, spread, write_section

COMMAND = "[HYBRID_BENCH_BEFORE=<older checkout>] python -m benchmarks serving"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEARCH = ["serving", "--model", "llama3-70b", "--rack", "h100:16", "--precision", "fp8", "--isl", "2000",
          "--osl", "200", "--requests", "1000", "--rate", "20", "--slo-ttft", "1000", "--slo-tpot", "50", "--search"]


def _timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def _interleaved(fns: dict, repeats: int) -> dict[str, tuple[list[float], list[float], object]]:
    out = {name: ([], [], None) for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w, c, result = _timed(fn)
            out[name][0].append(w)
            out[name][1].append(c)
            out[name] = (out[name][0], out[name][1], result)
    return out


LONG_OUTPUT = """
import json, time
import devices
from planner.serving import Workload, serving_whatif
def call():
    return serving_whatif("llama3-70b", devices.parse_rack("b200:1"), workload=Workload(1024, 32768, requests=1000),
                          precision="fp4")
call()
cpu, wall = time.process_time(), time.perf_counter()
est = call()
print(json.dumps([time.process_time() - cpu, time.perf_counter() - wall, est.output_tokens_per_second_per_chip]))
"""


def _long_output(tree: str) -> tuple[float, float, float]:
    out = subprocess.run([sys.executable, "-c", LONG_OUTPUT], capture_output=True, text=True, cwd=tree,
                         env=dict(os.environ, PYTHONPATH=tree), timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"the long-output what-if failed on {tree}: {out.stderr[-2000:]}")
    cpu, wall, tok = json.loads(out.stdout.strip().splitlines()[-1])
    return cpu, wall, tok


def _long_output_row(section: Section, repeats: int) -> None:
    after, before, tree = alternated(_long_output, ROOT, repeats)
    cpu = median([r[0] for r in after])
    was = "before: not measured in this run"
    if before:
        b_cpu = median([r[0] for r in before])
        same = all(b[2] == a[2] for b, a in zip(before, after))
        was = (f"before ({checkout(tree)}, alternated): {b_cpu:.2f} s CPU, now/before {cpu / b_cpu:.3f}x; results "
               f"{'identical' if same else 'DIFFER'}")
    section.add("serving_whatif, 1,000 requests of 1024 in / 32768 out (llama3-70b fp4, 1 b200)", f"{cpu:.2f} s CPU",
                "<= 2 s", cpu <= 2.0,
                f"wall {median([r[1] for r in after]):.2f} s, median of {repeats} processes (op-cost cache warm); "
                f"{was}; result (modelled): {after[-1][2]:,.0f} output tok/s per GPU")


def run(repeats: int = 3, write: bool = True) -> Section:
    import devices
    from planner.serving import Workload, serving_whatif

    section = Section("serving", "serving what-ifs: 1,000 requests, a million-chip fleet, an SLO search (query time "
                      "measured; results modelled)", COMMAND)
    repeats = max(1, min(repeats, 5))

    def whatif(rack, requests, tp):
        return lambda: serving_whatif("llama3-70b", devices.parse_rack(rack), workload=Workload(
            1000, 1000, requests=requests), parallel=dict(tp=tp), precision="fp8")

    cold_wall, cold_cpu, _ = _timed(whatif("h100:8", 1000, 2))
    got = _interleaved({"base": whatif("h100:8", 1, 2), "run": whatif("h100:8", 1000, 2)}, repeats)
    wall, cpu, est = got["run"]
    bw, bc, _ = got["base"]
    section.add("serving_whatif, 1,000 requests (llama3-70b fp8, 1000/1000, 8 h100 as 4 x tp2)",
                f"{median(cpu):.2f} s CPU", "<= 1 s", median(cpu) <= 1.0,
                f"wall {median(wall):.2f} s ({spread(wall)}), median of {repeats}; baseline (one request: pricing "
                f"alone) {median(bc):.2f} s CPU, {median(bw):.2f} s wall, interleaved; first run in the process "
                f"(empty op-cost cache) {cold_cpu:.2f} s CPU / {cold_wall:.2f} s wall; result (modelled): "
                f"{est.output_tokens_per_second_per_chip:,.0f} output tok/s per GPU, TPOT p50 "
                f"{est.tpot.p50 * 1e3:.1f} ms")

    for rack, tp, chips in (("h100-node*131072", 2, "1,048,576 h100"), ("trn3-ultraserver*7282", 4, "1,048,608 trn3")):
        got = _interleaved({"base": whatif(rack, 1, tp), "run": whatif(rack, 10_000_000, tp)}, repeats)
        wall, cpu, est = got["run"]
        bw, bc, _ = got["base"]
        section.add(f"serving_whatif, fleet of {chips} (tp{tp} replicas), 10M requests", f"{median(cpu):.2f} s CPU",
                    "<= 2 s", median(cpu) <= 2.0,
                    f"wall {median(wall):.2f} s ({spread(wall)}), median of {repeats}; baseline (one request) "
                    f"{median(bc):.2f} s CPU, {median(bw):.2f} s wall, interleaved; one replica simulated with its "
                    f"share; result (modelled): {est.output_tokens_per_second:,.0f} output tok/s in all")

    _long_output_row(section, repeats)

    env = dict(os.environ, PYTHONPATH=ROOT)
    samples = []
    for _ in range(max(1, repeats - 1)):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "hybrid_cli"] + SEARCH, capture_output=True, text=True, cwd=ROOT,
                             env=env, timeout=1800)
        took = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            raise RuntimeError(f"hybrid serving --search failed: {out.stderr[-2000:]}")
        samples.append((took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out.stdout))
    cpu = [s[1] for s in samples]
    wall = [s[0] for s in samples]
    summary = next((line.strip() for line in samples[-1][2].splitlines() if line.startswith("search:")), "")
    section.add("`hybrid serving " + " ".join(SEARCH[1:]) + "`", f"{median(cpu):.1f} s CPU", "<= 30 s",
                median(cpu) <= 30.0,
                f"wall {median(wall):.1f} s ({spread(wall)}), process start and imports included, median of "
                f"{len(samples)}; {summary}")
    section.notes.append("CPU time is the what-if's own work; wall time on this shared 2-core machine moves with "
                         "the load of other processes (see the spreads).")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
