"""The shared timing harness: interleaved repeats, medians, and RESULTS.md.

These machines are noisy, so every figure is a ratio against a baseline timed
in the same run, interleaved with it (A B A B ...), reported as the median of
several repeats, with the spread.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def time_call(fn: Callable[[], object], inner: int) -> float:
    """Seconds per call of ``fn`` over ``inner`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int, inner: int = 1, warmup: int = 1) -> dict[str, list[float]]:
    """Time each function ``repeats`` times, alternating between them so that
    drift in the machine's speed hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            time_call(fn, inner)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(time_call(fn, inner))
    return samples


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float]) -> str:
    """min..max as a short string, for the reader to judge the noise."""
    return f"{min(xs):.4g}..{max(xs):.4g}"


@dataclass
class Row:
    """One line of a results table."""

    metric: str
    value: str
    target: str = ""
    verdict: str = ""
    detail: str = ""


@dataclass
class Section:
    """One benchmark's section of RESULTS.md."""

    name: str
    title: str
    command: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, metric: str, value: str, target: str = "", ok: bool | None = None, detail: str = "") -> None:
        verdict = "" if ok is None else ("met" if ok else "NOT MET")
        self.rows.append(Row(metric, value, target, verdict, detail))

    def markdown(self) -> str:
        lines = [
            f"<!-- bench:{self.name} -->",
            f"## {self.title}",
            "",
            f"- command: `{self.command}`",
            f"- machine: {machine()}",
            f"- date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
            "",
            "| metric | value | target | verdict | detail |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {r.metric} | {r.value} | {r.target} | {r.verdict} | {r.detail} |" for r in self.rows]
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        lines.append(f"<!-- /bench:{self.name} -->")
        return "\n".join(lines)

    def print(self) -> None:
        print(f"\n== {self.title} ==")
        width = max(len(r.metric) for r in self.rows) if self.rows else 10
        for r in self.rows:
            print(f"  {r.metric.ljust(width)}  {r.value:>14}  target {r.target or '-':>10}  {r.verdict:8}  {r.detail}")
        for n in self.notes:
            print(f"  note: {n}")


def alternated(measure: Callable[[str], object], here: str, runs: int) -> tuple[list, list, str | None]:
    """``measure(tree)`` on this checkout ``here`` and, when ``HYBRID_BENCH_BEFORE`` names an older checkout, on that
    one, alternated run by run (before, after, before, ...) so that the machine's load moves both alike.
    Returns (after, before, the older tree or None); ``before`` is empty without one."""
    tree = os.environ.get("HYBRID_BENCH_BEFORE")
    after, before = [], []
    for _ in range(runs):
        if tree:
            before.append(measure(tree))
        after.append(measure(here))
    return after, before, tree


def checkout(tree: str) -> str:
    """The commit checked out at ``tree`` (an older checkout a benchmark compares with), or the path where git
    cannot say."""
    import subprocess

    done = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else tree


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"Python {sys.version.split()[0]}{gpu}")


def write_section(section: Section, path: str = RESULTS) -> None:
    """Replace (or append) this section in RESULTS.md, leaving the others."""
    header = "# Benchmark results\n\nWritten by `python -m benchmarks` (see benchmarks/__init__.py). " \
             "Every speed figure is a ratio or difference against a baseline measured in the same run, " \
             "medians of interleaved repeats. Modelled figures are labelled modelled.\n"
    text = open(path).read() if os.path.exists(path) else header
    block = section.markdown()
    pattern = re.compile(rf"<!-- bench:{re.escape(section.name)} -->.*?<!-- /bench:{re.escape(section.name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)
