"""The first run of a paper command against the second (issue 29: goal, first <= 2x warm).

A new user's first what-if meets an empty profile cache (``$HYBRID_INTEROP_CACHE`` a new, empty directory
here); the second finds what the first stored. Each sample is a fresh process; the cold and warm runs of
``before`` (another checkout, ``BEFORE_ROOT``, default /work/main: the code without shipped profiles) and of
this checkout are interleaved (before cold, before warm, after cold, after warm, ...), so that the machine's
load hits all four alike.

1. ``interop.whatif("llama3.1-405b", "trn3-ultraserver*7282", tp16 pp16 cp4 vp2, fp8)``: the call's own time,
   measured inside the process (``import interop``, paid by both runs alike, excluded).
2. ``hybrid whatif --model llama3.1-405b --compare trn3-ultraserver*7282 gb300-nvl72*14563``: the whole process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import Section, median, spread, write_section

COMMAND = "python -m benchmarks first_run"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEFORE_ROOT = os.environ.get("BEFORE_ROOT", "/work/main")
_CALL = ("import time, interop; t = time.perf_counter(); "
         "interop.whatif('llama3.1-405b', 'trn3-ultraserver*7282', parallel={'tp': 16, 'pp': 16, 'cp': 4, 'vp': 2}, "
         "global_batch=16384, seq_len=8192, precision='fp8'); print('took', time.perf_counter() - t)")
_CLI = ["-m", "hybrid_cli", "whatif", "--model", "llama3.1-405b", "--compare", "trn3-ultraserver*7282",
        "gb300-nvl72*14563"]


def _sample(root: str, args: list[str], cache: str, inner: bool) -> float:
    env = dict(os.environ, PYTHONPATH=root, HYBRID_INTEROP_CACHE=cache)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, env=env, timeout=600)
    took = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} in {root} failed: {out.stderr[-2000:]}")
    if inner:
        return float(next(line for line in out.stdout.splitlines() if line.startswith("took")).split()[1])
    return took


def _pairs(args: list[str], inner: bool, repeats: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in ("before cold", "before warm", "after cold", "after warm")}
    for _ in range(repeats):
        for label, root in (("before", BEFORE_ROOT), ("after", ROOT)):
            cache = tempfile.mkdtemp(prefix="hybrid-first-run-")  # a new user: nothing cached
            samples[f"{label} cold"].append(_sample(root, args, cache, inner))
            samples[f"{label} warm"].append(_sample(root, args, cache, inner))
    return samples


def _commit(root: str) -> str:
    out = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{root} at {out.stdout.strip()}" if out.returncode == 0 else root


def run(repeats: int = 3, write: bool = True) -> Section:
    section = Section("first_run", "the first run of a paper command against the second (measured; results "
                      "modelled)", COMMAND)
    repeats = max(1, min(repeats, 5))  # each sample is a process start of seconds
    for what, args, inner in (
            ("`interop.whatif('llama3.1-405b', 'trn3-ultraserver*7282', tp16 pp16 cp4 vp2, fp8)`, the call",
             ["-c", _CALL], True),
            ("`hybrid whatif --model llama3.1-405b --compare trn3-ultraserver*7282 gb300-nvl72*14563`, the process",
             _CLI, False)):
        s = _pairs(args, inner, repeats)
        ratio = {k: median(s[f"{k} cold"]) / median(s[f"{k} warm"]) for k in ("before", "after")}
        section.add(f"{what}: first run / second run", f"{ratio['after']:.2f}x", "<= 2x", ratio["after"] <= 2.0,
                    f"after: first {median(s['after cold']):.2f} s ({spread(s['after cold'])}), second "
                    f"{median(s['after warm']):.2f} s ({spread(s['after warm'])}); before ({_commit(BEFORE_ROOT)}): "
                    f"{ratio['before']:.2f}x, first {median(s['before cold']):.2f} s ({spread(s['before cold'])}), "
                    f"second {median(s['before warm']):.2f} s ({spread(s['before warm'])}); medians of {repeats} "
                    f"interleaved fresh processes, each first run on a new empty profile cache")
    section.notes.append("After: the documented what-ifs' block profiles ship with the package "
                         "(planner/shipped_profiles.bin, checked by tests/planner/test_shipped_profiles.py), so a "
                         "first run neither imports transformers nor traces. Before: the first run imported "
                         "transformers and traced each distinct block (the machine was shared with other agents: "
                         "see the spreads).")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
