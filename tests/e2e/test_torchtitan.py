"""torchtitan's llama3 debug recipe, unmodified, on the rack under torchrun, against the same recipe on the CPU over
Gloo: default FSDP over both ranks, and tensor parallelism of degree 2. torchtitan 0.3.0 (PyPI) beside torch 2.13
needs the DTensor SPMD backend (``--parallelism.spmd_backend partial_dtensor``) and two fixes of its own and
torchao's, applied to both runs alike by tests/support/torchtitan_env/sitecustomize.py; the CPU reference also
needs torchtitan's device helpers pointed at the CPU and FlexAttention computed by another route (that file says
how). On the rack the recipe runs as on NVIDIA GPUs: compiled FlexAttention with block masks, FSDP2 with bf16
parameters, selective activation checkpointing, and its forward+backward captured in a CUDA graph from the
second step.

Tolerance: 1e-4 relative per step (torchtitan prints 5 decimals). Two seeded CPU references agree exactly; a
dropped document mask moves the loss by 3e-5 to 1e-3 relative within 5 steps and another seed by 4e-3 or more
(shared/reference/torchtitan.md), so 1e-4 separates a right run from a wrong one.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.support.torchtitan_env import assets

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None,
                                reason="torchtitan is not installed (bootstrap.sh installs torchtitan==0.3.0)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV_DIR = os.path.join(ROOT, "tests", "support", "torchtitan_env")
STEPS = 4
RECIPE = ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps", str(STEPS),
          "--training.seq_len", "64", "--training.local_batch_size", "2", "--checkpoint.no-enable",
          "--validator.no-enable", "--parallelism.spmd_backend", "partial_dtensor", "--debug.seed", "42"]
LAYOUTS = {"fsdp": [], "tp": ["--parallelism.tensor_parallel_degree", "2"]}
_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("torchtitan")
    assets.make(directory)
    return directory


def _train(workdir, layout: str, on_rack: bool) -> dict[int, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ENV_DIR, ROOT, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled",
               PYTHONWARNINGS="ignore")
    env.pop("LOCAL_RANK", None)
    if not on_rack:
        env["TORCHTITAN_REFERENCE"] = "cpu"
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    program = ["-m", "interop.run", "-m", "torchtitan.train"] if on_rack else ["-m", "torchtitan.train"]
    out = subprocess.run([sys.executable, *launcher, *program, *RECIPE, *LAYOUTS[layout],
                          "--dump_folder", str(workdir / f"out-{layout}-{on_rack}")],
                         capture_output=True, text=True, timeout=600, cwd=workdir, env=env)
    text = _COLOUR.sub("", out.stdout + out.stderr)
    assert out.returncode == 0, text[-4000:]
    losses = {int(step): float(loss) for step, loss in _STEP.findall(text)}
    assert sorted(losses) == list(range(1, STEPS + 1)), text[-4000:]
    return losses


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_llama3_debug_recipe_trains_on_the_rack_as_on_the_cpu(workdir, layout):
    reference = _train(workdir, layout, on_rack=False)
    got = _train(workdir, layout, on_rack=True)
    for step, loss in reference.items():
        assert got[step] == pytest.approx(loss, rel=1e-4), (step, got, reference)
    assert got[STEPS] < got[1]  # it trains
