"""Rack files with many ``[[overrides]]``: the time to load one, against the time the TOML parser itself takes
on the same text (the part no rack loader can avoid).

Each override used to split every run made so far, so a file's load grew with the square of its overrides
(100,000 took 25 s in the issue's probe); they are now resolved in one sorted pass
(:mod:`devices.rack.intervals`). Median of interleaved repeats.
"""

from __future__ import annotations

import tomllib

from benchmarks.harness import Section, interleaved, median, spread, write_section

COMMAND = "python -m benchmarks rack_file"
OVERRIDES = 100_000


def text(n: int) -> str:
    """A rack file of 2n H100 slots with n overrides (capacity and numerics on every other slot)."""
    return f'[[slots]]\nkind = "h100"\ncount = {2 * n}\n' + "".join(
        f'[[overrides]]\nslots = "{2 * i}"\ncapacity = {2**30 + i}\nnumerics = "device"\n' for i in range(n))


def run(repeats: int = 7, write: bool = True) -> Section:
    from devices.rack.toml_file import loads

    section = Section("rack_file", "rack files with many overrides (measured)", COMMAND)
    repeats = max(3, repeats // 2)
    medians = {}
    for n in (OVERRIDES // 10, OVERRIDES):
        doc = text(n)
        samples = interleaved({"load": lambda: loads(doc), "toml": lambda: tomllib.loads(doc)}, repeats=repeats,
                              warmup=0)
        load, toml = median(samples["load"]), median(samples["toml"])
        medians[n] = load, toml
        section.add(f"load a rack file with {n:,} [[overrides]]", f"{load:.2f} s", "", None,
                    f"median of {repeats} ({spread(samples['load'])} s); tomllib alone {toml:.2f} s, so "
                    f"{load / toml:.2f}x the parse")
    (small_load, small_toml), (large_load, large_toml) = medians[OVERRIDES // 10], medians[OVERRIDES]
    section.add("ten times the overrides: load time ratio / tomllib's own ratio",
                f"{(large_load / small_load) / (large_toml / small_toml):.2f}", "", None,
                f"load {large_load / small_load:.1f}x, tomllib {large_toml / small_toml:.1f}x: 1 is linear in the "
                f"parse; a quadratic pass would add a factor near 10")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
