"""torch.compile's own work stays off the step's modelled figures (interop/compile/compile_time.py): the same
compiled training step, compiled on a cold Inductor cache and again on a warm one, has the same modelled
timeline and peak memory, though the cold compile ran more on the slot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support import ROOT

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch, interop

    def step(model, x):
        return torch.nn.functional.gelu(model(x)).pow(2).mean()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64)).to("hybrid:4")
    x = torch.randn(16, 32, device="hybrid:4")
    interop.reset_timeline()
    torch.hybrid.reset_peak_memory_stats(4)
    loss = torch.compile(step)(model, x)
    loss.backward()
    records = [r for r in interop.timeline() if r.slot == 4]
    json.dump({"ops_run": sum(r.count for r in interop.ledger().rows if r.slot == 4),
               "records": [r.op for r in records], "modelled_ps": sum(r.duration_ps for r in records),
               "peak": torch.hybrid.max_memory_allocated(4), "loss": loss.item()}, sys.stdout)
""")


@pytest.mark.slow  # two Inductor compiles, one on a cold cache (C++ codegen and a compiler run)
def test_a_cold_and_a_warm_compile_model_the_same_step(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONWARNINGS="ignore")
    rounds = []
    for _ in ("cold", "warm"):  # the same script twice: the second finds Inductor's on-disk cache warm
        out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env,
                             cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = rounds
    assert cold["ops_run"] > warm["ops_run"]  # the cold compile did run work on the slot...
    assert cold["records"] == warm["records"]  # ...none of it on the modelled timeline
    assert any(op.startswith("inductor:") for op in cold["records"])
    assert cold["modelled_ps"] == warm["modelled_ps"] and cold["peak"] == warm["peak"]
    assert cold["loss"] == warm["loss"]


def test_the_window_nests_and_restores_recording():
    from interop import _C
    from interop.compile import compile_time

    assert not compile_time.compiling() and _C._timeline_enabled()
    with compile_time.window():
        with compile_time.window():
            assert compile_time.compiling() and not _C._timeline_enabled()
        assert compile_time.compiling()
    assert not compile_time.compiling() and _C._timeline_enabled()
