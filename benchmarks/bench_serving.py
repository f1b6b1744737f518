"""Serving what-ifs: how long the queries take (the results are modelled).

1. ``interop.serving_whatif`` of 1,000 requests (Llama 3 70B, FP8, 1,000 in / 1,000 out, offline) on 8 H100 in
   TP2 replicas (target <= 1 s).
2. A fleet of replicas totalling a million chips (``h100-node*131072``, ``trn3-ultraserver*7282``), ten million
   requests (target <= 2 s): identical replicas are simulated once with their share.
3. ``hybrid serving ... --search`` under a TTFT and TPOT objective on 16 H100 (target <= 30 s), a fresh process.

Every in-process figure is timed on a fresh rack object (every collective and iteration cost priced anew; the
per-op cost model's own cache warm after the first run), interleaved with a baseline timed in the same run: the
same what-if of a single request (what pricing costs before any simulation). Wall time and the process's CPU
time are both reported: the machine runs other agents' work, so wall time moves with that load.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

from benchmarks.harness import Section, median, spread, write_section

COMMAND = "python -m benchmarks serving"
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
