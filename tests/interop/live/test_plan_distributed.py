"""A plan across processes: torchrun, 4 ranks on the "hybrid" backend, torch.distributed.pipelining (+ FSDP2, or
tensor parallelism through parallelize_module/DTensor);
the parameters equal the same plan run in one process, the executed step (one modelled clock across the ranks)
matches the plan's prediction, and rank 0 writes one trace of every rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import interop
from interop.models import token_batch
from tests.support.plan_distributed_case import BATCH, CFG, batches, layout_and_blocks, optimizer

from tests.support import ROOT

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with Gloo is needed")


def _torchrun(out, variant):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
           os.path.join(ROOT, "tests", "support", "plan_distributed_worker.py"), str(out), variant]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


@pytest.mark.parametrize("variant", ["pp4", "pp2dp2", "pp2tp2"])
def test_the_plan_across_four_processes_equals_the_one_process_run(tmp_path, use_rack, variant):
    _torchrun(tmp_path, variant)
    result = torch.load(tmp_path / "result.pt")
    use_rack("trn3:2+h100:2", backing="emulated")
    from interop.models import GPT
    from interop.live.runner import PlanRunner

    torch.manual_seed(0)
    model = GPT(CFG)
    layout, blocks = layout_and_blocks(model, variant)
    runner = PlanRunner(layout, blocks, model, optimizer)
    losses = [float(runner.step(x, y, lambda o, t: F.cross_entropy(o.flatten(0, 1), t.flatten())))
              for x, y in batches()]
    state = runner.state_dict()
    for name, value in result["state"].items():
        torch.testing.assert_close(value, state[name], rtol=1e-5, atol=1e-6, msg=name)
    ranks = [f for f in os.listdir(tmp_path) if f.startswith("losses")]
    mean = [sum(vals) / len(vals) for vals in zip(*(torch.load(tmp_path / f) for f in ranks))]
    assert mean == pytest.approx(losses, rel=1e-5)
    if variant == "pp2tp2":
        # Run by PyTorch's tensor-parallel engine: rank 0 (stage 0, tensor rank 0) holds DTensor shards of its
        # block's column/row linears (q|k|v and the MLP's first layer by output features, the projections by input
        # features), the rest whole.
        from interop.live.distributed import _model_name

        held = {_model_name(n): v for n, v in result["held"].items()}
        assert held["blocks.0.attn.qkv.weight"] == ("(Shard(dim=0),)", (3 * CFG.dim // 2, CFG.dim)), held
        assert held["blocks.0.attn.proj.weight"] == ("(Shard(dim=1),)", (CFG.dim, CFG.dim // 2)), held
        assert held["blocks.0.attn.proj.bias"] == ("(Replicate(),)", (CFG.dim,)), held
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert {0, 1, 2, 3} <= {e["pid"] for e in events}  # every rank's slot is in the one trace
    # One clock: a transfer both ends placed is in the trace once, drawn on its two slots at one start.
    sends = [e for e in events if e["name"].startswith("send_recv") and e["cat"] == "collective"]
    starts = {}
    for e in sends:
        starts.setdefault((e["ts"], e["dur"]), []).append(e["pid"])
    # (the data-parallel lanes run alike: their transfers may share a start, on other slots)
    assert sends and all(len(pids) % 2 == 0 and len(set(pids)) == len(pids) for pids in starts.values()), starts
    x, _ = token_batch(CFG, BATCH)
    plan = interop.plan(model, (x,), optimizer="sgd", microbatches=layout.microbatches).with_layout(layout)
    executed = result["seconds"][-1]  # a step after the first (the schedule infers shapes on its first)
    print(f"{variant}: executed step across processes {executed * 1e3:.3f} ms, predicted "
          f"{plan.predicted.seconds * 1e3:.3f} ms, in one process {runner.last_step.modelled_seconds * 1e3:.3f} ms "
          f"(modelled)")
    # The step across processes on one modelled clock is the plan's step: pp2tp2's row-parallel sums are
    # all-reduced in place, as the plan prices them (DTensor's functional all_reduce copied its input first:
    # +4.4 % before); pp2dp2's FSDP2 copy-out and copy-in are one kernel each, as on CUDA (they were a copy per
    # parameter: +13 % before).
    assert executed == pytest.approx(plan.predicted.seconds, rel=0.03), plan.table()
    assert runner.last_step.modelled_seconds == pytest.approx(plan.predicted.seconds, rel=0.03)
    del runner


def test_the_export_refuses_what_it_does_not_run_with_a_message(use_rack):
    """Checked before any process group is needed: a plan the export cannot run is refused, naming why."""
    from interop.models import GPT
    from planner import Stage
    from interop.live.distributed import DistributedPlanRunner
    from planner.layout import Layout

    use_rack("trn3:2+h100:2", backing="emulated")
    torch.manual_seed(0)
    model = GPT(CFG)
    _, blocks = layout_and_blocks(model, "pp4")
    mixed_tp = Layout((Stage(chunks=range(0, 2), kind="trn3", slots=(0, 1), tp=2),
                       Stage(chunks=range(2, 4), kind="h100", slots=(2,))), "1f1b", 2, BATCH)
    with pytest.raises(ValueError, match=r"tensor-parallel degrees \[1, 2\].*Plan.apply"):
        DistributedPlanRunner(mixed_tp, blocks, model)
    tp_and_dp = Layout((Stage(chunks=range(0, 4), kind="trn3", slots=(0, 1, 2, 3), tp=2),), "1f1b", 2, BATCH)
    with pytest.raises(NotImplementedError, match=r"tp=2.*dp=2.*not exported"):
        DistributedPlanRunner(tp_and_dp, blocks, model)
    asymmetric = Layout((Stage(chunks=range(0, 2), kind="trn3", slots=(0, 1)),
                         Stage(chunks=range(2, 4), kind="h100", slots=(2,))), "1f1b", 2, BATCH)
    with pytest.raises(ValueError, match=r"\[1, 2\] data-parallel replicas"):
        DistributedPlanRunner(asymmetric, blocks, model)
    assert not dist.is_initialized()  # refused before anything was set up
