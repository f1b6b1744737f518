"""Whole user-facing planning calls (wall time and peak memory measured; plans modelled).

1. ``interop.plan`` of a 100-block model, every step included (torch.export of the model, the split into
   blocks, each distinct block traced on the meta device, the search) on the 216-slot paper rack
   ``trn3:72+h100:72+b200:72``: a transformers GPT-2 with 98 layers (dim 64, 4 heads, vocabulary 256),
   batch 8 x 16 tokens. Target: <= 5 s. The cut alone (export and split) is timed after it in the same
   process, so the row says where the time goes.
2. The README's flagship, ``hybrid plan --model gpt2 --rack trn3:4+h100:4 --run 3``: wall time and the peak
   resident memory of the process (``ru_maxrss`` of the child). Targets: <= 60 s and <= 4 GB (issue 29: what a
   laptop user can run first). Medians of up to :data:`FLAGSHIP_RUNS` runs; with ``HYBRID_BENCH_BEFORE=<older
   checkout>`` each is alternated with a run of the older checkout (``python -m hybrid_cli`` on its tree), whose
   medians the rows' detail gives.

Each runs in a fresh interpreter (imports and first-call costs included, as a user meets them).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import Section, alternated, checkout, write_section

COMMAND = "HYBRID_BENCH_BEFORE=<older checkout> python -m benchmarks plan_call"
RACK = "trn3:72+h100:72+b200:72"
FLAGSHIP = ["plan", "--model", "gpt2", "--rack", "trn3:4+h100:4", "--run", "3"]
PLAN_TARGET_S = 5.0
FLAGSHIP_TARGET_S = 60.0
FLAGSHIP_TARGET_BYTES = 4 * 10**9
FLAGSHIP_RUNS = 3
"""The most flagship runs a measurement makes (about a minute each), whatever ``--repeats`` asks."""

_PLAN_SCRIPT = f"""
import json, time
import torch, transformers
import interop
from interop.live.cut import cut
config = transformers.GPT2Config(n_layer=98, n_embd=64, n_head=4, vocab_size=256, n_positions=64, use_cache=False)
model = transformers.GPT2LMHeadModel(config)
tokens = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(0))
start = time.perf_counter()
plan = interop.plan(model, (tokens,), {RACK!r}, optimizer="adamw")
whole = time.perf_counter() - start
start = time.perf_counter()
blocks = cut(model, (tokens,))
cutting = time.perf_counter() - start
print(json.dumps({{"whole": whole, "cut": cutting, "blocks": len(blocks), "search": plan.stats.seconds,
                  "step_ms": plan.predicted.seconds * 1e3, "stages": len(plan.layout.stages)}}))
"""


def _plan_row(section: Section) -> None:
    out = subprocess.run([sys.executable, "-c", _PLAN_SCRIPT], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    section.add(f"interop.plan, whole call: GPT-2 with 98 layers ({r['blocks']} blocks) on {RACK} (216 slots)",
                f"{r['whole']:.1f} s", f"<= {PLAN_TARGET_S:g} s", r["whole"] <= PLAN_TARGET_S,
                f"of which the cut (torch.export and the split) {r['cut']:.1f} s and the search {r['search']:.2f} s; "
                f"the rest traces each distinct block; plan (modelled): {r['stages']} stage(s), "
                f"{r['step_ms']:.2f} ms/step; one run in a fresh interpreter")


def _flagship(tree: str) -> tuple[float, int, float, bool]:
    """One run of the flagship in a fresh interpreter on the checkout at ``tree``: (wall seconds, peak resident
    bytes of the process, CPU seconds, whether it matched single-device training)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "hybrid_cli", *FLAGSHIP], stdout=out, stderr=err, cwd=tree,
                                 env={**os.environ, "PYTHONPATH": tree})
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its peak, not the largest child's
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if child.returncode not in (0, 1):
        raise RuntimeError(f"the flagship failed on {tree}: {(errors.strip().splitlines() or ['no output'])[-1]}")
    return wall, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime, "matches single-device" in text


def _flagship_rows(section: Section, runs: int) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    after, before, tree = alternated(_flagship, here, runs)
    wall = statistics.median(r[0] for r in after)
    peak = statistics.median(r[1] for r in after)
    cpu = statistics.median(r[2] for r in after)
    matched = all(r[3] for r in after)
    label = f"before ({checkout(tree)}, alternated)" if tree else "before: not measured in this run"
    if before:
        b_wall, b_peak = statistics.median(r[0] for r in before), statistics.median(r[1] for r in before)
        was_wall = f"{label}: median {b_wall:.1f} s (runs {', '.join(f'{r[0]:.1f}' for r in before)}), now/before {wall / b_wall:.2f}x"
        was_peak = f"{label}: median {b_peak / 1e9:.2f} GB"
    else:
        was_wall = was_peak = label
    section.add("flagship `hybrid " + " ".join(FLAGSHIP) + "`: wall time", f"{wall:.1f} s",
                f"<= {FLAGSHIP_TARGET_S:g} s", wall <= FLAGSHIP_TARGET_S,
                f"median of {runs} run(s) ({', '.join(f'{r[0]:.1f}' for r in after)} s), {cpu:.0f} s CPU (user + "
                f"system); every run {'matches' if matched else 'does NOT match'} single-device training; {was_wall}")
    # Two decimals: a peak a few tens of MB either side of the target must not print as the target itself.
    section.add("flagship: peak resident memory of the process", f"{peak / 1e9:.2f} GB ({peak / 2**30:.2f} GiB)",
                f"<= {FLAGSHIP_TARGET_BYTES / 1e9:g} GB", peak <= FLAGSHIP_TARGET_BYTES,
                f"median of the runs' ru_maxrss (largest {max(r[1] for r in after) / 1e9:.2f} GB); {was_peak}")


def run(repeats: int = 1, write: bool = True) -> Section:
    section = Section("plan_call", "whole planning calls: interop.plan of 100 blocks and the README's flagship "
                      "(time and memory measured; plans modelled)", COMMAND)
    _plan_row(section)
    _flagship_rows(section, min(repeats, FLAGSHIP_RUNS))
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
