"""Measured cost of torch.compile and Triton on emulated slots, against the same work on the CPU.

1. A compiled GPT block, forward + backward, on an emulated slot vs the same block compiled for the CPU:
   wall time per step after compilation (target <= 1.10x). The slot's graph is Inductor's CPU code plus
   what the slot adds: its tensors aliased on entry, every allocation drawn from the slot's allocator,
   one timeline record per kernel.
2. Triton kernels (vector add, fused softmax) on hybrid tensors vs the same kernels on CPU tensors
   through Triton's interpreter (target <= 1.10x). Both run in one subprocess with TRITON_INTERPRET=1
   (the baseline needs it set before Triton is imported); hybrid launches take interop's path there too.
3. Compile time of that block on a hybrid slot vs on the CPU (target <= 1.2x): Dynamo, AOTAutograd and
   Inductor run in full each time (FX-graph and AOTAutograd caches off); the C++ kernel binaries come
   from Inductor's cache for both, their sources being identical.
Every figure is the median of interleaved repeats (CPU, hybrid, CPU, hybrid, ...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import torch

from benchmarks.harness import Section, interleaved, median, spread, write_section

import interop  # noqa: F401  (registers the hybrid device)
from interop.models import Block, GPTConfig

COMMAND = "python -m benchmarks compile"
SLOT = 4  # a b200 slot of fusion-default (emulated here)
BLOCK = GPTConfig(dim=256, heads=4, seq_len=128)
BATCH = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _step_fn(model, x):
    def step():
        out = model(x)
        out.square().mean().backward()
        model.zero_grad(set_to_none=True)
    return step


def _block_pair():
    torch.manual_seed(0)
    cpu_block = Block(BLOCK)
    slot_block = Block(BLOCK).to(f"hybrid:{SLOT}")
    slot_block.load_state_dict(cpu_block.state_dict())
    x = torch.randn(BATCH, BLOCK.seq_len, BLOCK.dim)
    return cpu_block, slot_block, x


def _wall_time(section: Section, repeats: int) -> None:
    cpu_block, slot_block, x = _block_pair()
    cpu_step = _step_fn(torch.compile(cpu_block), x)
    slot_step = _step_fn(torch.compile(slot_block), x.to(f"hybrid:{SLOT}"))
    cpu_step()
    slot_step()  # compiles both, forward and backward
    samples = interleaved({"cpu": cpu_step, "slot": slot_step}, repeats=repeats, inner=3, warmup=1)
    ratio = median([s / c for s, c in zip(samples["slot"], samples["cpu"])])
    section.add("compiled GPT block fwd+bwd wall time, hybrid:4 (b200, emulated) / CPU", f"{ratio:.3f}x",
                "<= 1.10", ratio <= 1.10,
                f"median of {repeats} interleaved pairs x 3 steps; CPU {median(samples['cpu']) * 1e3:.1f} ms "
                f"({spread([s * 1e3 for s in samples['cpu']])}), hybrid {median(samples['slot']) * 1e3:.1f} ms; "
                f"block dim {BLOCK.dim}, {BLOCK.heads} heads, batch {BATCH}x{BLOCK.seq_len}")


def _compile_time(section: Section, repeats: int) -> None:
    from torch._inductor import config as inductor_config
    from torch._functorch import config as functorch_config

    cpu_block, slot_block, x = _block_pair()
    slot_x = x.to(f"hybrid:{SLOT}")

    def compile_and_step(model, inp):
        def run():
            torch._dynamo.reset()
            _step_fn(torch.compile(model), inp)()
        return run

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        samples = interleaved({"cpu": compile_and_step(cpu_block, x), "slot": compile_and_step(slot_block, slot_x)},
                              repeats=repeats, inner=1, warmup=1)
    ratio = median([s / c for s, c in zip(samples["slot"], samples["cpu"])])
    section.add("compile time of that block (fwd+bwd graphs), hybrid:4 / CPU", f"{ratio:.3f}x", "<= 1.2",
                ratio <= 1.2,
                f"median of {repeats} interleaved pairs; CPU {median(samples['cpu']):.2f} s "
                f"({spread(samples['cpu'])}), hybrid {median(samples['slot']):.2f} s; Dynamo + AOTAutograd + "
                "Inductor with FX/AOT caches off, kernel binaries from Inductor's cache")


_TRITON_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import torch, interop
    from benchmarks.harness import interleaved
    from tests.support import triton_kernels as K
    from interop.compile.triton_bounds import Bounds

    repeats = int(sys.argv[1])
    checked = Bounds.check

    def unchecked(fn):  # the same launch with the bounds check switched off, for its cost alone
        def run():
            Bounds.check = lambda *a: None
            try:
                return fn()
            finally:
                Bounds.check = checked
        return run

    cases = {
        "vector add, 2^18 float32": (K.add, lambda d: (torch.randn(1 << 18, device=d), torch.randn(1 << 18, device=d)),
                                     {"block": 1 << 12}),
        "fused softmax, 128 x 1024 float32": (K.softmax, lambda d: (torch.randn(128, 1024, device=d),), {}),
    }
    out = {}
    for name, (kernel, make, kw) in cases.items():
        torch.manual_seed(0)
        cpu_args = make("cpu")
        slot_args = tuple(a.to("hybrid:4") for a in cpu_args)
        assert torch.allclose(kernel(*cpu_args, **kw), kernel(*slot_args, **kw).cpu())
        slot = lambda: kernel(*slot_args, **kw)  # noqa: E731
        samples = interleaved({"cpu": lambda: kernel(*cpu_args, **kw), "slot": slot, "unchecked": unchecked(slot)},
                              repeats=repeats, inner=2, warmup=1)
        out[name] = samples
    print(json.dumps(out))
""")


def _triton(section: Section, repeats: int) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _TRITON_SCRIPT, str(repeats)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the Triton benchmark's subprocess failed:\n{proc.stderr[-4000:]}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, samples in results.items():
        ratio = median([s / c for s, c in zip(samples["slot"], samples["cpu"])])
        section.add(f"Triton {name}: hybrid:4 / CPU tensors, both interpreted", f"{ratio:.3f}x", "<= 1.10",
                    ratio <= 1.10,
                    f"median of {repeats} interleaved triples x 2 launches; CPU {median(samples['cpu']) * 1e3:.1f} ms "
                    f"({spread([s * 1e3 for s in samples['cpu']])}), hybrid {median(samples['slot']) * 1e3:.1f} ms "
                    f"(bounds checked)")
        check = median([s / u for s, u in zip(samples["slot"], samples["unchecked"])])
        section.add(f"Triton {name}: the bounds check's cost, hybrid:4 checked / unchecked", f"{check:.3f}x", "", None,
                    f"median of the same {repeats} interleaved triples; unchecked "
                    f"{median(samples['unchecked']) * 1e3:.1f} ms: every load and store's active addresses compared "
                    f"with the launch's allocations")


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("compile", "torch.compile and Triton on an emulated slot vs the CPU (measured)", COMMAND)
    start = time.perf_counter()
    _wall_time(section, repeats)
    _triton(section, repeats)
    _compile_time(section, max(5, repeats // 2 + 1))
    section.notes.append(
        "The hybrid side also records every kernel launch on the modelled timeline (recording on, the default); "
        "its Triton launches also count each load's, store's and tl.dot's work while the interpreter runs.")
    section.notes.append(f"whole benchmark: {time.perf_counter() - start:.0f} s")
    if write:
        write_section(section)
    return section
