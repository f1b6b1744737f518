"""``hybrid diverge`` / ``interop.diverge``: injected bugs located, clean recipes agreeing, exit statuses, errors.

The injected-bug cases run in three launches for all of them: torch's recipes with their bugs
(tests/support/cuda_scripts/diverge_recipes.py ``--all``) once under torchrun on the rack, once as the
plain-torch reference (a world of one) and once as plain torch under torchrun over Gloo (the reference of the
same parallelism, ``--reference gloo``), each case recorded by its own recorder; the comparisons then run here.
The comparison rules on records written by hand are tests/interop/test_diverge_compare.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from interop.diverge import compare
from interop.diverge.result import build
from tests.support import ROOT

RECIPES = os.path.join(ROOT, "tests", "support", "cuda_scripts", "diverge_recipes.py")
RACK_FAULTS = os.path.join(ROOT, "tests", "support", "rack_faults")

# case -> (module, phase, rank or None for any, what the cause starts with or None); None: the runs agree.
EXPECTED = {
    "ddp-clean": None, "manual_dp-clean": None, "fsdp2-clean": None, "tp-clean": None, "sp-clean": None,
    "pp-clean": None,
    "ddp-dropout": ("blocks.0.mlp.drop", "forward", None, "randomness"),
    "manual_dp-skip_allreduce": ("head", "param_grad", None, None),
    "fsdp2-double_scale": ("embed", "param_grad", None, None),
    "tp-sharded_norm": ("blocks.0.mlp.mid_norm", "forward", None, None),
    "sp-mask_dropped": ("blocks.0.attn", "forward", None, "first seen at 'blocks.0.attn.wo'"),
    "pp-wrong_microbatch": ("", "forward", 1, "first seen at 'blocks.1.norm'"),
    "pipelining-clean": None,
    "pipelining-wrong_targets": ("head", "input_grad", 1, None),
    # Scripts and bugs the finder was not built against (checked after it was):
    "ddp_loss-per_rank_scale": ("<loss>", "forward", None, None),
    "ddp_loss-rank_seeds": ("blocks.0.mlp.drop", "forward", None, "randomness"),
    "megatron-clean": None,  # a row-parallel partial sum all-reduced next agrees
    "megatron-no_backward_reduce": ("blocks.1.mlp.up", "input_grad", None, "a partial sum never all-reduced"),
    "megatron-no_forward_reduce": ("blocks.0.mlp.down", "forward", None, "a partial sum never all-reduced"),
    "fsdp2_mp-clean": None,  # bfloat16 compute: float32 gradients judged at bfloat16's rounding
}
COLLECTIVE_BEFORE = {"manual_dp-skip_allreduce": "all_reduce", "fsdp2-double_scale": "reduce_scatter"}


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def _hybrid(*args, cwd, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hybrid_cli", "diverge", *args], capture_output=True, text=True,
                          cwd=cwd, env=_env(), timeout=timeout)


@pytest.fixture(scope="module")
def recipes(tmp_path_factory):
    """Every case's records: the run under test (2 ranks on the rack), the reference (plain torch, 1 rank) and the
    reference of the same parallelism (plain torch, 2 ranks over Gloo)."""
    from interop.diverge.launch import free_port

    tmp = tmp_path_factory.mktemp("diverge")
    plain = "import sys, runpy; sys.modules['interop._C'] = None; sys.argv = sys.argv[1:]; " \
            "runpy.run_path(sys.argv[0], run_name='__main__')"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    commands = [
        ([sys.executable, "-c", plain, RECIPES, "--all", str(tmp / "ref"), "--steps", "2"],
         _env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))),
        ([*torchrun, "--no-python", sys.executable, "-c", plain, RECIPES, "--all", str(tmp / "gloo"), "--steps", "2"],
         _env())]
    references = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
                                   env=env) for command, env in commands]
    run = subprocess.run([*torchrun, "-m", "interop.run", RECIPES, "--all", str(tmp / "run"), "--steps", "2"],
                         capture_output=True, text=True, cwd=tmp, env=_env(), timeout=300)
    for reference, (command, env) in zip(references, commands):
        ref_out, _ = reference.communicate(timeout=300)
        for _ in range(2):  # torch's own Gloo abort at exit (test_cuda_layer.gloo_reference): run again, twice at most
            if reference.returncode == 0 or "terminate called without an active exception" not in ref_out:
                break
            reference = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
                                       env=env, timeout=300)
            ref_out = reference.stdout
        assert reference.returncode == 0, ref_out[-3000:]
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return tmp


def _load(folder):
    return [torch.load(os.path.join(folder, f), weights_only=False) for f in sorted(os.listdir(folder))]


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_injected_bugs_are_located_and_clean_recipes_agree(recipes, case):
    [reference] = _load(recipes / "ref" / case)
    ranks = _load(recipes / "run" / case)
    assert [r["rank"] for r in ranks] == [0, 1] and reference["steps"] == 2
    result = build(reference, ranks, "2 ranks", "cpu")
    expected = EXPECTED[case]
    if expected is None:
        assert not result.diverged, str(result)
        assert result.exit_status == 0 and result.points_compared > 10
        return
    module, phase, rank, cause = expected
    first = result.first
    assert result.diverged and result.exit_status == 1
    assert (first.step, first.module, first.phase) == (1, module, phase), str(result)
    assert rank is None or first.rank == rank
    assert (first.cause or "").startswith(cause) if cause else first.cause is None, first.cause
    assert first.max_rel_diff > 1e-2 and "diverge_recipes.py:" in first.call_site
    assert result.last_agreed is not None and result.last_agreed.max_rel_diff <= 1e-4
    if case in COLLECTIVE_BEFORE:
        assert first.collective_before.startswith(COLLECTIVE_BEFORE[case]), first.collective_before


def test_a_shard_is_compared_with_its_slice_of_the_full_tensor(recipes):
    """FSDP2's parameters are DTensor shards: each rank's is set against its rows of the reference's."""
    [reference] = _load(recipes / "ref" / "fsdp2-double_scale")
    ranks = _load(recipes / "run" / "fsdp2-double_scale")
    result = build(reference, ranks, "2 ranks", "cpu")
    assert result.first.compared.startswith("shard at offset [")
    assert result.first.rank in (0, 1) and 0.49 < result.first.test_max / result.first.reference_max < 0.51


# -- the reference of the same parallelism: the same ranks on the CPU over Gloo ----------------------------------

# Against the same ranks over Gloo, only what the rack computes otherwise shows: the recipes' bugs are the
# script's own, in both runs alike. Dropout still differs: the run draws from its slot's generator, the
# reference from the CPU's, which the model's initialisation on the CPU has moved on.
GLOO_DIFFERS = {"ddp-dropout": ("blocks.0.mlp.drop", "forward", "randomness")}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_against_the_same_ranks_over_gloo_a_bug_of_the_script_does_not_show(recipes, case):
    from interop.diverge.result import build_peers

    ranks, references = _load(recipes / "run" / case), _load(recipes / "gloo" / case)
    assert [r["rank"] for r in references] == [0, 1] and all(r["steps"] == 2 for r in references)
    result = build_peers(references, ranks, "2 ranks", "gloo")
    if case not in GLOO_DIFFERS:
        assert not result.diverged, str(result)
        assert result.points_compared > 100 and "rank against rank" in result.last_agreed.compared
        return
    module, phase, cause = GLOO_DIFFERS[case]
    assert (result.first.step, result.first.module, result.first.phase) == (1, module, phase), str(result)
    assert result.first.cause.startswith(cause) and result.first.rank in (0, 1)


def test_against_the_same_ranks_a_shard_is_compared_with_the_same_shard(recipes):
    """FSDP2's rank 1 holds the second halves: at init each is set whole against the reference's rank 1's (the
    same shard), and would differ against rank 0's; references of other ranks than the run's are refused."""
    from interop.diverge.result import build_peers

    ranks, references = _load(recipes / "run" / "fsdp2-clean"), _load(recipes / "gloo" / "fsdp2-clean")
    init = [(point, results) for point, results, _, _ in compare.walk(references[1], ranks[1:], peer=True)
            if point["phase"] == "init"]
    shards = [r for _, results in init for r in results.values() if r["compared"].startswith("shard at offset [")]
    assert shards and all(r["compared"].endswith("rank against rank") and not r["differs"] for r in shards)
    assert any(r["compared"].startswith("shard at offset [16, 0] of [32, 16]") for r in shards)
    against_rank_0 = [r for point, results, _, _ in compare.walk(references[0], ranks[1:], peer=True)
                      if point["phase"] == "init" for r in results.values()]
    assert against_rank_0 == []  # another shard's offset: not set side by side
    with pytest.raises(ValueError, match=r"the reference recorded ranks \[0\], the run under test ranks \[0, 1\]"):
        build_peers(references[:1], ranks, "2 ranks", "gloo")


def test_a_collective_the_rack_computes_otherwise_is_located_against_the_gloo_reference(tmp_path):
    """The rack's third all-reduce on each rank returns 1.5 times its sum (tests/support/rack_faults: the rack's
    processes only): the averaged gradient it carried, blocks.0.norm's bias, is the first point that differs."""
    env = _env(RACK_FAULT_ALL_REDUCE="3", PYTHONPATH=os.pathsep.join((RACK_FAULTS, ROOT)))
    out = subprocess.run([sys.executable, "-m", "hybrid_cli", "diverge", "--nproc-per-node", "2", "--steps", "1",
                          "--reference", "gloo", "--json", "where.json", RECIPES, "--recipe", "manual_dp"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-3000:]
    assert "2 ranks (torchrun) against the CPU over Gloo (2 ranks, rank against rank)" in out.stdout
    first = json.loads((tmp_path / "where.json").read_text())["first"]
    assert (first["step"], first["module"], first["phase"], first["tensor"], first["call_index"]) == \
        (1, "blocks.0.norm", "param_grad", "bias", 0)
    assert first["max_rel_diff"] == pytest.approx(0.5, rel=1e-5) and first["compared"] == "full, rank against rank"
    assert first["collective_before"].startswith("all_reduce of float32[")


# -- the command line: each exit status, the JSON, the documented sample ----------------------------------------


def test_exit_status_1_under_torchrun_names_the_missing_all_reduce_in_json(tmp_path):
    """The run under test launched as torchrun launches it (2 ranks), the reference as a world of one."""
    out = _hybrid("--nproc-per-node", "2", "--steps", "1", "--json", "where.json", RECIPES, "--recipe", "manual_dp",
                  "--bug", "skip_allreduce", cwd=tmp_path)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-3000:]
    assert "2 ranks (torchrun) against the CPU" in out.stdout and "DIVERGED at step 1, module 'head'" in out.stdout
    data = json.loads((tmp_path / "where.json").read_text())
    assert data["diverged"] is True and data["steps"] == 1
    for point in ("first", "last_agreed"):
        assert {"step", "module", "phase", "call_index", "max_abs_diff", "max_rel_diff", "call_site",
                "collective_before"} <= set(data[point])
    first = data["first"]
    assert (first["step"], first["module"], first["phase"], first["call_index"]) == (1, "head", "param_grad", 0)
    assert first["collective_before"].startswith("all_reduce of float32[16] over 2 ranks")
    assert "diverge_recipes.py:" in first["call_site"]


def test_exit_status_0_and_dropout_drawn_alike_against_a_slot(tmp_path):
    """One process with dropout, against one slot: a slot's generator draws what the reference's slot draws."""
    (tmp_path / "train.py").write_text(
        "import torch, torch.nn as nn\n"
        "torch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 4)).cuda()\n"
        "optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)\n"
        "for step in range(3):\n"
        "    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(step)).cuda()\n"
        "    model(x).pow(2).mean().backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n")
    out = _hybrid("--reference", "slot", "train.py", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "against one slot" in out.stdout and "the runs agree" in out.stdout


def test_a_script_that_fails_before_its_first_step_is_exit_status_2_with_its_error(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('no data here')\n")
    out = _hybrid("broken.py", cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert "recorded no optimizer step" in out.stderr and "RuntimeError: no data here" in out.stderr


@pytest.mark.parametrize("reference, hint", [("cpu", "runs its reference with --reference slot"),
                                             ("gloo", "has no reference of its ranks"), ("slot", None)])
def test_a_reference_that_recorded_nothing_is_exit_status_2_with_the_hint_of_its_kind(tmp_path, monkeypatch, capsys,
                                                                                      reference, hint):
    """The runs themselves are left out (their failure is test_a_script_that_fails_before_its_first_step...'s)."""
    import interop.diverge as package
    from hybrid_cli import main

    def fails(*args, **kwargs):
        raise package.RunFailed(f"the reference ({reference}) recorded no optimizer step, so there is nothing to "
                                f"compare; it said:\nrank0: RuntimeError: Distributed package doesn't have NCCL")

    monkeypatch.setattr(package, "diverge", fails)
    (tmp_path / "ok.py").write_text("pass\n")
    monkeypatch.chdir(tmp_path)
    assert main(["diverge", "--nproc-per-node", "2", "--reference", reference, "ok.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hybrid diverge: error: the reference ({reference}) recorded no optimizer step")
    assert (hint in err) if hint else err.rstrip().endswith("have NCCL"), err


@pytest.mark.parametrize("args, named", [
    (["missing.py"], "SCRIPT 'missing.py' not found"),
    ([], "no SCRIPT given"),
    (["--steps", "0", "ok.py"], "--steps 0"),
    (["--nproc-per-node", "0", "ok.py"], "--nproc-per-node 0"),
    (["--reference", "gpu", "ok.py"], "--reference 'gpu'"),
    (["--reference", "gloo", "ok.py"], "--reference gloo runs the same parallelism over Gloo: give --nproc-per-node"),
    (["--json", ".", "ok.py"], "--json"),
    (["--json", "/no/such/folder/where.json", "ok.py"], "--json: cannot write '/no/such/folder/where.json'"),
    (["--rack", "nonsense", "ok.py"], "--rack 'nonsense': preset: unknown preset 'nonsense'"),
    (["--", "missing.py"], "SCRIPT 'missing.py' not found"),  # '--' before SCRIPT, as torchrun accepts it
])
def test_bad_arguments_are_exit_status_2_naming_the_argument(tmp_path, monkeypatch, capsys, args, named):
    from hybrid_cli import main

    (tmp_path / "ok.py").write_text("pass\n")
    monkeypatch.chdir(tmp_path)
    assert main(["diverge", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hybrid diverge: error:") and named in err


def test_a_non_integer_steps_is_refused_by_name(capsys):
    from hybrid_cli import main

    with pytest.raises(SystemExit) as e:
        main(["diverge", "--steps", "two", "x.py"])
    assert e.value.code == 2 and "--steps" in capsys.readouterr().err


def test_help_lists_the_options():
    from hybrid_cli import build_parser

    text = build_parser(["diverge"])._subparsers._group_actions[0].choices["diverge"].format_help()
    for option in ("--nproc-per-node", "--steps", "--reference", "--json", "exit status"):
        assert option in text


@pytest.mark.parametrize("kwargs, named", [
    (dict(steps=0), "steps"), (dict(steps=1.5), "steps"), (dict(reference="gpu"), "reference"),
    (dict(reference="gloo"), "reference 'gloo' .* nproc_per_node of at least 2, got 1"),
    (dict(nproc_per_node=0), "nproc_per_node"), (dict(args="--lr 1"), "args"), (dict(rack="nonsense"), "rack"),
])
def test_the_api_refuses_bad_arguments_by_name(tmp_path, kwargs, named):
    import interop

    script = tmp_path / "ok.py"
    script.write_text("pass\n")
    with pytest.raises(ValueError, match=named):
        interop.diverge(str(script), **kwargs)
    with pytest.raises(ValueError, match="script"):
        interop.diverge(str(tmp_path / "missing.py"))
