"""Training loops on an emulated slot against the CPU, before and after the timeline's placing moved to C++
(issue 29): an LSTM language model, an MLP with LayerNorm under per-tensor AdamW, transformers' GPT-2; recording
on against off; a one-element ``add_``'s overhead.

``python -m benchmarks training_loops`` times this checkout in process and, when ``HYBRID_BENCH_BEFORE`` names
an older checkout with its extension built, the same loops against it in a subprocess (the loops live in
:mod:`benchmarks.training_loops`). Every figure is a ratio to the CPU (or to recording off) timed in the same
process, interleaved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.harness import Section, checkout, write_section
from benchmarks.training_loops import LOOPS, measure

COMMAND = "HYBRID_BENCH_BEFORE=<older checkout> python -m benchmarks training_loops"


def _before(tree: str, repeats: int) -> dict | None:
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training_loops.py")
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, script, str(repeats)], env=env, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("training_loops", "training loops on an emulated slot over the CPU (measured)", COMMAND)
    tree = os.environ.get("HYBRID_BENCH_BEFORE")
    before = _before(tree, repeats) if tree else None
    after = measure(repeats)
    label = f"before ({checkout(tree)})" if before else "before: not measured in this run"

    def was(name: str, key: str, fmt: str, unit: str) -> str:
        return f"{label} {format(before[name][key], fmt)}{unit}" if before else label

    for name, (what, _, goal) in LOOPS.items():
        ratio = after[name]["ratio"]
        section.add(f"{what}: hybrid:4 / CPU", f"{ratio:.3f}x", f"<= {goal}x", ratio <= goal,
                    f"median of {repeats} interleaved steps, CPU {after[name]['cpu_ms']:.1f} ms/step; "
                    f"{was(name, 'ratio', '.3f', 'x')}")
    for name in ("gpt2", "lstm"):
        on_off = after[name]["recording"]
        section.add(f"{LOOPS[name][0]}: recording on / off", f"{on_off:.3f}x", "<= 1.03x", on_off <= 1.03,
                    f"median of {repeats} interleaved steps; {was(name, 'recording', '.3f', 'x')}")
    overhead = after["add_"]["overhead_us"]
    section.add("one-element add_ overhead over the CPU (recording on)", f"{overhead:.2f} us", "<= 1 us",
                overhead <= 1.0, f"median of {repeats} x 20,000 calls; {was('add_', 'overhead_us', '.2f', ' us')}")
    section.notes.append("One intra-op thread (torch.set_num_threads(1)) on both sides: see benchmarks/training_loops.py.")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
