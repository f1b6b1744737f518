"""PyTorch's own distributed recipes on the rack against the same code on the CPU over Gloo.

tests/support/cuda_scripts/torch_recipes.py holds the recipes, written for CUDA as torch's docs write them (DDP,
FSDP2 with meta-device init, mixed precision, CPU offload and full/sharded state dicts with DCP, tensor and
sequence parallelism, pipelining, FSDP2 over compiled blocks, activation checkpointing, nn.DataParallel). One
torchrun launch runs them all on the rack under the CUDA layer; one runs them as plain torch on the CPU over
Gloo (``--device cpu``: no interop in that process). Each rank saves every recipe's losses and parameters;
one test per recipe compares them.

Tolerances. Every recipe but DataParallel must be bit-identical: a slot runs the CPU's kernels on the same
bytes, and every gradient reduction here is over 2 ranks, a sum of two floats, which is the same in either
order (IEEE addition is commutative), so neither the hybrid backend's reduction order nor its algorithm can
change a bit; FSDP's average divides by 2, exactly. DataParallel's reference is the plain module (on a CPU
DataParallel has no device and runs the module): on the rack each of its replicas takes a quarter of the batch
and reduce_add sums their weight gradients, the CPU sums the same 32 tokens' terms in one matmul. That is float32
re-association (observed: 2.4e-7 in a loss of 3.49, 6e-8 in parameters after 3 steps); the bound used, 1e-6
relative on losses and 1e-6 + 1e-5 relative on parameters, is over 10x that, while a replica's gradient lost or
counted twice moves parameters by lr x a quarter of a gradient (~1e-2 here).
"""

from __future__ import annotations

import pytest
import torch

from tests.interop.cuda_layer.test_cuda_layer import gloo_reference, run, script
from tests.interop.cuda_layer.test_cuda_workloads import TORCHRUN

RECIPES = ["ddp", "fsdp2_meta_init", "fsdp2_mixed_precision", "fsdp2_cpu_offload", "fsdp2_state_dicts",
           "tensor_sequence_parallel", "pipelining", "compiled_fsdp", "activation_checkpointing", "data_parallel"]

BY_DESIGN = {"seconds": "the recipe's wall time", "replicas": "DataParallel on a CPU has no device to replicate to"}
"""Result entries that are no computed number, not compared."""

RE_ASSOCIATED = {"data_parallel": {"loss_rel": 1e-6, "rtol": 1e-5, "atol": 1e-6}}
"""Recipes that sum in another order on the rack than their reference does (module doc); all others: bit equal."""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Each side's per-rank results: {"rack": [rank0, rank1], "cpu": [...]}."""
    tmp = tmp_path_factory.mktemp("recipes")
    rack = run([*TORCHRUN, "-m", "interop.run", script("torch_recipes.py"), "--out", "rack"], tmp, timeout=600)
    cpu = gloo_reference([*TORCHRUN, script("torch_recipes.py"), "--device", "cpu", "--out", "cpu"], tmp,
                          timeout=600)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert rack.returncode == 0, rack.stderr[-3000:]
    found = {side: [torch.load(tmp / side / f"rank{r}.pt", map_location="cpu") for r in (0, 1)]
             for side in ("rack", "cpu")}
    # The reference is plain torch: no interop in its processes.
    assert [r["interop_loaded"] for r in found["rack"] + found["cpu"]] == [True, True, False, False]
    assert [found["rack"][r]["device"] for r in (0, 1)] == ["cuda:0", "cuda:1"]
    assert {r["backend"] for r in found["rack"]} == {"nccl"} and {r["backend"] for r in found["cpu"]} == {"gloo"}
    assert found["rack"][0]["device_name"].startswith("NVIDIA")  # a mapped GPU slot of the default rack
    return found


def _compare(got, want, where: str, tol: dict | None) -> None:
    """``got`` equals ``want`` to the bit, or within ``tol`` (RE_ASSOCIATED)."""
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            if key not in BY_DESIGN:
                _compare(got[key], want[key], f"{where}.{key}", tol)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            _compare(a, b, f"{where}[{i}]", tol)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, where
        if tol is None:
            assert torch.equal(got, want), (where, float((got.double() - want.double()).abs().max()))
        else:
            torch.testing.assert_close(got, want, rtol=tol["rtol"], atol=tol["atol"], msg=where)
    elif isinstance(want, float) and tol is not None:
        assert got == pytest.approx(want, rel=tol["loss_rel"]), where
    else:
        assert got == want, where


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipe_trains_on_the_rack_as_on_the_cpu_over_gloo(results, recipe):
    for rank in (0, 1):
        got, want = results["rack"][rank][recipe], results["cpu"][rank][recipe]
        for side, result in (("rack", got), ("cpu", want)):
            assert not (result or {}).get("error"), f"{recipe} failed on the {side}, rank {rank}:\n{result['error']}"
        _compare(got, want, f"{recipe} rank {rank}", RE_ASSOCIATED.get(recipe))


def test_what_each_recipe_ran_is_what_it_says(results):
    """The results hold what each recipe claims to do (a recipe that did nothing would compare equal too)."""
    rack, cpu = results["rack"], results["cpu"]
    for side in (rack, cpu):
        for rank in (0, 1):
            assert all(len(side[rank][name]["losses"]) == 3 for name in RECIPES
                       if side[rank][name] is not None and name != "pipelining")
        # FSDP2's CPU offload keeps the sharded parameters on the CPU; its full state dict is rank 0's.
        assert [side[r]["fsdp2_cpu_offload"]["param_devices"] for r in (0, 1)] == [["cpu"], ["cpu"]]
        assert side[0]["fsdp2_meta_init"]["params"] and not side[1]["fsdp2_meta_init"]["params"]
        # A model restored from the DCP checkpoint (and its optimizer) continues as the one trained; one loaded
        # from the full state dict broadcast from rank 0 computes the same loss.
        for r in (0, 1):
            state = side[r]["fsdp2_state_dicts"]
            assert state["next_losses"]["from_dcp"] == state["next_losses"]["trained"]
            assert state["next_losses"]["from_full"] == state["next_losses"]["trained"]
        state = side[0]["fsdp2_state_dicts"]
        for name, value in state["params"].items():
            assert torch.equal(state["from_dcp"][name], value), name
        assert any(k.endswith(".exp_avg_sq") for k in state["full_optim"])
        # Pipelining: the loss is on the last stage, per microbatch.
        assert side[0]["pipelining"]["losses"] == [] and [len(v) for v in side[1]["pipelining"]["losses"]] == [4] * 3
        # The compiled blocks were compiled: forward and backward graphs, no graph break.
        assert side[0]["compiled_fsdp"]["graphs"] >= 1 and side[0]["compiled_fsdp"]["graph_breaks"] == {}
        assert side[1]["data_parallel"] is None
    # Tensor and sequence parallelism: every rank saw the same batch and holds half of each sharded weight.
    assert rack[0]["tensor_sequence_parallel"]["losses"] == rack[1]["tensor_sequence_parallel"]["losses"]
    shards = rack[0]["tensor_sequence_parallel"]["shards"]
    assert shards["blocks.0.mlp.0.weight"].shape == (16, 16) and shards["head.weight"].shape == (16, 16)
    # DataParallel split the batch over the mapped GPU slots on the rack; on the CPU it ran the module.
    assert rack[0]["data_parallel"]["replicas"] >= 2 and cpu[0]["data_parallel"]["replicas"] == 1
