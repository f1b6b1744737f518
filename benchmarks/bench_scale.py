"""What-ifs at scale, modelled: how long the queries themselves take.

1. A million-chip rack spec (``trn3-ultraserver*7282``, 1,048,608 Trn3) parsed.
2. ``collectives.estimate`` of a 1 GiB all_reduce over all of them
   (target: under 50 ms), warm and cold (fresh topology).
Nothing is built per chip (checked by the tests with tracemalloc).
"""

from __future__ import annotations

import time

from benchmarks.harness import Section, median, spread, write_section

import collectives
import devices
from devices import rack_parse

COMMAND = "python -m benchmarks scale"
SPEC = "trn3-ultraserver*7282"


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("scale", "million-chip what-ifs (query time measured; results modelled)", COMMAND)
    devices.parse_rack("h100-node")  # imports done: what is timed is the work

    def cold_parse():
        rack_parse._load_preset_text.cache_clear()
        devices.parse_rack(SPEC)

    cold = [_timed(cold_parse) for _ in range(repeats)]
    section.add(f"parse `{SPEC}` (1,048,608 slots), preset file read each time", f"{median(cold) * 1e3:.2f} ms",
                "< 10 ms", median(cold) < 0.010, f"median of {repeats} ({spread([c * 1e3 for c in cold])} ms)")

    rack = devices.parse_rack(SPEC)
    collectives.estimate(rack, "all_reduce", 1 << 30)
    warm = [_timed(lambda: collectives.estimate(rack, "all_reduce", 1 << 30)) for _ in range(repeats)]
    fresh = [_timed(lambda: collectives.estimate(devices.parse_rack(SPEC), "all_reduce", 1 << 30))
             for _ in range(repeats)]
    est = collectives.estimate(rack, "all_reduce", 1 << 30)
    section.add("collectives.estimate all_reduce 1 GiB over 1,048,608 trn3", f"{median(warm) * 1e3:.2f} ms",
                "< 50 ms", median(warm) < 0.050,
                f"median of {repeats}; with a fresh spec and topology each time {median(fresh) * 1e3:.2f} ms; "
                f"result (modelled): {est.seconds * 1e3:.2f} ms, busbw {est.busbw / 1e9:.0f} GB/s, "
                f"{est.algorithm} ({est.detail}), {est.path}")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
