"""How fast the ``hybrid`` command starts: the paper commands against ``python -c "import devices"``.

Three commands that need no device (issue 16, section 2): ``hybrid --help`` and ``hybrid racks``
(target <= 1.5x the baseline) and a warm ``hybrid whatif --compare`` of two million-chip racks
(target <= 2x). The baseline is a fresh interpreter importing the catalogue, timed interleaved with
the commands (A B C D A B C D ...), each a fresh process; the figures are medians of the repeats.
Each command is also run once in a child that fails if torch or interop was imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import Section, median, spread, write_section

COMMAND = "python -m benchmarks cli"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPARE = ["whatif", "--model", "llama3.1-405b", "--compare", "trn3-ultraserver*7282", "gb300-nvl72*14563"]
CASES = {
    "`hybrid --help`": (["--help"], 1.5),
    "`hybrid racks`": (["racks"], 1.5),
    "`hybrid whatif --model llama3.1-405b --compare trn3-ultraserver*7282 gb300-nvl72*14563`, warm": (COMPARE, 2.0),
}
_NO_TORCH = ("import sys, contextlib, io\nfrom hybrid_cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(sys.argv[1:])\n"
             "    except SystemExit:\n        pass\n"
             "bad = sorted(m for m in ('torch', 'interop', 'transformers') if m in sys.modules)\n"
             "sys.exit(f'imported {bad}' if bad else 0)\n")


def _time(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    took = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return took


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("cli", "how fast the hybrid command starts (measured)", COMMAND)
    # Bytecode cached as on a user's machine (this sandbox sets PYTHONDONTWRITEBYTECODE, which made every run
    # compile its modules from source: 155 ms of a warm whatif); the cache goes to a temporary prefix.
    env = dict(os.environ, PYTHONPATH=ROOT, HYBRID_INTEROP_CACHE=tempfile.mkdtemp(prefix="hybrid-cli-bench-"),
               PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="hybrid-cli-pyc-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    python = sys.executable
    baseline = [python, "-c", "import devices"]
    commands = {name: [python, "-m", "hybrid_cli", *argv] for name, (argv, _) in CASES.items()}
    torch_free = {}
    for name, (argv, _) in CASES.items():
        # The first run warms the profile cache (a cold cache traces on the meta device, with torch); the
        # check is of a warm run, which is what the timed runs are.
        subprocess.run(commands[name], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        check = subprocess.run([python, "-c", _NO_TORCH, *argv], capture_output=True, text=True, cwd=ROOT,
                               env=env, timeout=600)
        torch_free[name] = check.returncode == 0
    samples: dict[str, list[float]] = {"baseline": [], **{name: [] for name in CASES}}
    for _ in range(repeats):
        samples["baseline"].append(_time(baseline, env))
        for name, args in commands.items():
            samples[name].append(_time(args, env))
    base = median(samples["baseline"])
    section.add("`python -c \"import devices\"` (the baseline)", f"{base * 1e3:.0f} ms", "", None,
                f"median of {repeats} ({spread([s * 1e3 for s in samples['baseline']])} ms)")
    for name, (_, target) in CASES.items():
        ratio = median(samples[name]) / base
        section.add(f"{name} / baseline", f"{ratio:.2f}x", f"<= {target}x", ratio <= target and torch_free[name],
                    f"{median(samples[name]) * 1e3:.0f} ms, median of {repeats} "
                    f"({spread([s * 1e3 for s in samples[name]])} ms); imports torch: "
                    f"{'no' if torch_free[name] else 'YES'}")
    section.notes.append("Each sample is a fresh process (interpreter start included), interleaved with the "
                         "baseline; the what-if's block profiles are in a warm cache (a first run traces them).")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
