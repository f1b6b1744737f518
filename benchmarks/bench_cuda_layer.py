"""The CUDA layer's cost: a CUDA training script run unmodified through ``python -m interop.run`` against the
same script hand-ported to ``hybrid`` (``torch.cuda.`` -> ``torch.hybrid.``, ``"cuda"`` -> ``"hybrid"``, the
slot set explicitly), each in its own process, interleaved (A B A B ...).

The figure is the median ratio of the training loop's wall time (warm-up steps excluded; each process
measures its own loop), target <= 1.02: nothing of the layer sits on the per-op path. The one-time cost
of installing the layer is measured separately (``import interop.cuda`` in a fresh process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from benchmarks.harness import Section, median, spread, write_section

COMMAND = "python -m benchmarks cuda_layer"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOAD = os.path.join(HERE, "cuda_layer_workload.py")
SLOT = 4  # cuda:0 under the default map of fusion-default: the first B200 slot
STEPS = 20


def hand_port(source: str) -> str:
    """What a user's sed port gives, plus the two lines it needs: import interop, pick the slot."""
    ported = source.replace("torch.cuda.", "torch.hybrid.").replace('"cuda"', '"hybrid"')
    return ported.replace("import torch\n", f"import torch\n\nimport interop\n", 1).replace(
        "    torch.manual_seed(0)\n", f"    torch.hybrid.set_device({SLOT})\n    torch.manual_seed(0)\n", 1)


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONWARNINGS="ignore")


def _run(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=_env(), timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{argv} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _install_time(repeats: int) -> list[float]:
    code = ("import time, interop; t = time.perf_counter(); import interop.cuda; "
            "print('{\"install_s\": %r}' % (time.perf_counter() - t))")
    return [_run(["-c", code])["install_s"] for _ in range(repeats)]


_CALLS = r"""
import json, statistics, time, torch, interop, interop.cuda
from interop.cuda.patching import ORIGINAL
zeros = torch.zeros.__wrapped__
to = ORIGINAL["Tensor.to"]
x = torch.ones(8)
slot = torch.device("hybrid", 4)
def t(fn, n=2000):
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n
pairs = {"factory": (lambda: torch.zeros(8, device="cuda"), lambda: zeros(8, device=slot)),
         "to": (lambda: x.to("cuda"), lambda: to(x, slot))}
out = {}
for name, (layer, plain) in pairs.items():
    t(layer, 200), t(plain, 200)
    diffs = []
    for _ in range(%d):
        diffs.append(t(layer) - t(plain))
    out[name] = statistics.median(diffs)
print(json.dumps(out))
"""


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("cuda_layer", "the CUDA layer's overhead: migrated script vs hand-ported (measured)", COMMAND)
    with open(WORKLOAD) as f:
        source = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        ported = os.path.join(tmp, "ported.py")
        with open(ported, "w") as f:
            f.write(hand_port(source))
        migrated_argv = ["-m", "interop.run", WORKLOAD, "--steps", str(STEPS)]
        ported_argv = [ported, "--steps", str(STEPS)]
        samples: dict[str, list[float]] = {"migrated": [], "ported": []}
        cpu: dict[str, list[float]] = {"migrated": [], "ported": []}
        losses = set()
        _run(migrated_argv), _run(ported_argv)  # warm the file cache and the op caches
        for _ in range(repeats):
            for name, argv in (("migrated", migrated_argv), ("ported", ported_argv)):
                result = _run(argv)
                samples[name].append(result["loop_s"])
                cpu[name].append(result["loop_cpu_s"])
                losses.add(round(result["loss"], 6))
    ratios = [m / p for m, p in zip(samples["migrated"], samples["ported"])]
    ratio = median(ratios)
    cpu_ratio = median([m / p for m, p in zip(cpu["migrated"], cpu["ported"])])
    steps = STEPS
    section.add(
        "training loop wall time, migrated (hybrid run) / hand-ported", f"{ratio:.3f}x", "<= 1.02", ratio <= 1.02,
        f"median of {repeats} interleaved process pairs; per step: migrated {median(samples['migrated']) / steps * 1e3:.1f} ms "
        f"({spread([s / steps * 1e3 for s in samples['migrated']])}), hand-ported "
        f"{median(samples['ported']) / steps * 1e3:.1f} ms ({spread([s / steps * 1e3 for s in samples['ported']])}); "
        f"GPT 2x128, batch 8x64, AdamW, bf16 autocast, {steps} timed steps after 2 warm-up; "
        f"final losses equal across runs: {len(losses) == 1}",
    )
    section.add("training loop CPU time (process_time), migrated / hand-ported", f"{cpu_ratio:.3f}x", "", None,
                f"same runs; CPU time is what the processes themselves used, less sensitive than wall time to "
                f"the other processes sharing the machine (load average {os.getloadavg()[0]:.1f} at the end)")
    calls = _run(["-c", _CALLS % repeats])
    section.add("device-argument translation, torch.zeros(8, device='cuda') vs the same on hybrid:4",
                f"{calls['factory'] * 1e6:.2f} us", "", None,
                f"median of {repeats} interleaved batches of 2000 calls, one process (the wrapper's own cost: "
                "paid per factory / .to call, never per op)")
    section.add("device-argument translation, x.to('cuda') vs x.to(hybrid:4)", f"{calls['to'] * 1e6:.2f} us", "",
                None, f"median of {repeats} interleaved batches of 2000 calls, one process")
    installs = _install_time(repeats)
    section.add("installing the layer (import interop.cuda, once per process)", f"{median(installs) * 1e3:.0f} ms", "",
                None, f"median of {repeats} fresh processes ({spread([s * 1e3 for s in installs])} ms)")
    section.notes.append("Each process measures its own training loop (perf_counter around the timed steps); "
                         "process start-up and imports are outside the figure, the layer's one-time install is "
                         "the second row.")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
