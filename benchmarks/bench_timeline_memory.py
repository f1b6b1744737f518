"""Memory of a long run: the process's resident set over 20,000 training steps of a small MLP on one
emulated slot, after a warm-up, with the timeline's default window and with every record kept (the
behaviour before the window; ``interop.set_timeline_window(None)``).

Each configuration runs in a fresh process (``python -m benchmarks.bench_timeline_memory --child``) so
that one's heap does not carry into the other. The loop never reads a clock: the runtime places its
records in batches by itself. At the end the child reads the report, so the totals are exercised too.
Target: growth <= 20 MiB with the defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from benchmarks.harness import Section, write_section

COMMAND = "python -m benchmarks timeline_memory"
STEPS = 20_000
WARMUP = 1_000
TARGET_MIB = 20.0


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(window: str, steps: int, warmup: int) -> dict:
    import gc

    import torch

    import interop

    if window != "default":
        interop.set_timeline_window(None if window == "none" else int(window))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to("hybrid:4")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device="hybrid:4")
    target = torch.randint(0, 10, (32,), device="hybrid:4")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(warmup):
        step()
    interop.timeline()
    gc.collect()
    before = _rss_mib()
    placed0 = interop.current_rack().timeline.placed
    start = time.perf_counter()
    for _ in range(steps):
        step()
    report = interop.report()
    seconds = time.perf_counter() - start
    gc.collect()
    after = _rss_mib()
    t = interop.current_rack().timeline
    return {"before_mib": before, "after_mib": after, "records": t.placed - placed0, "kept": len(t.records),
            "us_per_step": seconds / steps * 1e6, "busy_ms": report.slot(4).busy_s * 1e3}


def _measure(window: str, steps: int, warmup: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_timeline_memory", "--child", window, str(steps),
                          str(warmup)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(repeats: int = 7, write: bool = True, steps: int = STEPS, warmup: int = WARMUP) -> Section:
    section = Section("timeline_memory", "memory of a long run (measured)", COMMAND)
    bounded = _measure("default", steps, warmup)
    unbounded = _measure("none", steps, warmup)
    growth = bounded["after_mib"] - bounded["before_mib"]
    section.add(f"RSS growth over {steps:,} MLP steps after {warmup:,} of warm-up, default window",
                f"{growth:+.1f} MiB", f"<= {TARGET_MIB:.0f} MiB", growth <= TARGET_MIB,
                f"{bounded['before_mib']:.0f} -> {bounded['after_mib']:.0f} MiB; {bounded['records']:,} records placed, "
                f"{bounded['kept']:,} kept in full")
    grown = unbounded["after_mib"] - unbounded["before_mib"]
    section.add("the same, every record kept (set_timeline_window(None))", f"{grown:+.1f} MiB", "", None,
                f"{unbounded['before_mib']:.0f} -> {unbounded['after_mib']:.0f} MiB; "
                f"{grown * 2**20 / max(1, unbounded['records']):.0f} B per record")
    section.add("wall time per step, default window / every record kept",
                f"{bounded['us_per_step'] / unbounded['us_per_step']:.3f}", "", None,
                f"{bounded['us_per_step']:.0f} us vs {unbounded['us_per_step']:.0f} us per step (one run each)")
    same = bounded["busy_ms"] == unbounded["busy_ms"]
    section.add("modelled busy time of the slot, both runs", f"{bounded['busy_ms']:.6f} ms", "equal", same,
                "the report reads the totals of folded records: the same sums in the same order")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        run().print()
