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


def _profiled(steps: int) -> tuple[float, int, float]:
    """(seconds in the layer's own Python, its calls, seconds in the script's main) of a profiled migrated run."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "prof.out")
        subprocess.run([sys.executable, "-m", "interop.run", "-m", "cProfile", "-o", out, WORKLOAD, "--steps",
                        str(steps)], capture_output=True, text=True, env=_env(), timeout=900, check=True)
        stats = pstats.Stats(out)
    layer = os.path.join(ROOT, "interop", "cuda") + os.sep
    callsite = os.path.join(ROOT, "interop", "callsite.py")
    own = calls = 0
    for (filename, _, _), (_, ncalls, tottime, _, _) in stats.stats.items():
        if filename.startswith(layer) or filename == callsite:
            own += tottime
            calls += ncalls
    main = max(v[3] for (f, _, name), v in stats.stats.items() if f == WORKLOAD and name == "main")
    return own, calls, main


def _layer_share() -> dict:
    """The layer's Python per training step: profiled runs of STEPS and 2 * STEPS steps, differenced, so that
    installing the layer and building the model cancel out."""
    own1, calls1, main1 = _profiled(STEPS)
    own2, calls2, main2 = _profiled(2 * STEPS)
    per_step = max(0.0, own2 - own1) / STEPS
    step = (main2 - main1) / STEPS
    return {"per_step_us": per_step * 1e6, "fraction": per_step / step if step > 0 else float("nan"),
            "calls_per_step": (calls2 - calls1) / STEPS}


def _install_time(repeats: int) -> list[float]:
    code = ("import time, interop; t = time.perf_counter(); import interop.cuda; "
            "print('{\"install_s\": %r}' % (time.perf_counter() - t))")
    return [_run(["-c", code])["install_s"] for _ in range(repeats)]


_IN_PROCESS = r"""
import json, statistics, time, torch, interop
from benchmarks.cuda_layer_workload import CONFIG, train_step
from interop.models import GPT
import interop.cuda

def trainer(device, autocast):
    torch.manual_seed(0)
    model = GPT(CONFIG).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, CONFIG.vocab_size, (8, CONFIG.seq_len + 1)).pin_memory()
    def step():
        train_step(model, opt, x[:, :-1], x[:, 1:], device, autocast)
    return step

def timed(step, sync, steps=2):
    sync()
    start = time.process_time()
    for _ in range(steps):
        step()
    sync()
    return time.process_time() - start

migrated_step = trainer(torch.device("cuda"), "cuda")      # the layer is installed (import above)
interop.cuda.uninstall()
torch.hybrid.set_device(4)
ported_step = trainer(torch.device("hybrid"), "hybrid")
interop.cuda.configure()
migrated_step(); interop.cuda.uninstall(); ported_step()    # warm both

def migrated():
    interop.cuda.configure()
    try:
        return timed(migrated_step, torch.cuda.synchronize)
    finally:
        interop.cuda.uninstall()

def ported():
    torch.hybrid.set_device(4)
    return timed(ported_step, torch.hybrid.synchronize)

ratios = []
for i in range(%d):
    if i %% 2 == 0:  # neither always goes first
        m = migrated(); p = ported()
    else:
        p = ported(); m = migrated()
    ratios.append(m / p)
print(json.dumps({"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)], "pairs": len(ratios)}))
"""

_CALLS = r"""
import json, statistics, time, torch, interop, interop.cuda
from interop.cuda_layer.patch_ledger import ORIGINAL
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
        for i in range(repeats):
            order = (("migrated", migrated_argv), ("ported", ported_argv))
            for name, argv in (order if i % 2 == 0 else order[::-1]):  # neither always goes first
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
    same = _run(["-c", _IN_PROCESS % (4 * repeats + 1)])
    section.add("same training step in one process, layer installed / uninstalled (CPU time)",
                f"{same['ratio']:.3f}x", "<= 1.02", same["ratio"] <= 1.02,
                f"median of {same['pairs']} interleaved pairs of 2-step blocks on two persistent trainers (the layer "
                f"installed for the migrated steps on 'cuda', uninstalled for the hand-ported ones on 'hybrid'; "
                f"alternating which goes first); spread {same['spread'][0]:.3f}..{same['spread'][1]:.3f}; one process, "
                "so the machine's other load hits both alike")
    share = _layer_share()
    section.add("the layer's own Python per training step (profiled)", f"{share['per_step_us']:.1f} us",
                "", None, f"{100 * share['fraction']:.3f} % of a profiled step; {share['calls_per_step']:.0f} calls "
                "per step into interop/cuda_layer/ and interop/callsite.py (cProfile of `python -m interop.run -m cProfile "
                f"cuda_layer_workload.py`, runs of {STEPS} and {2 * STEPS} steps differenced)")
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
