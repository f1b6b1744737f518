"""NCCL's surface of torch.distributed under the CUDA layer, all of it: every torch path that reaches NCCL's names
once ``is_nccl_available()`` answers True or a group answers "nccl" works on the hybrid backend (the collective's
numbers against a CPU computation or a formula) or is refused by name (interop/cuda_layer/nccl_surface.py); groups
that are not NCCL's run as before in the same processes. One two-rank torchrun launch walks every row."""

from __future__ import annotations

import json

import pytest

from interop.cuda_layer import nccl_surface
from tests.interop.cuda_layer.test_cuda_layer import gloo_run, script

TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nccl")
    out = gloo_run([*TORCHRUN, "-m", "interop.run", script("nccl_walk.py"), "--out", "walk"], tmp, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ranks = []
    for rank in (0, 1):
        with open(tmp / f"walk.rank{rank}.json") as f:
            ranks.append(json.load(f))
    return ranks


def test_every_torch_function_that_names_nccl_is_a_row_of_the_walk():
    assert nccl_surface.unwalked() == [], "torch paths that reach NCCL's names and are not walked"


def test_a_new_torch_function_naming_nccl_is_reported_unwalked(tmp_path):
    package = tmp_path / "distributed"
    package.mkdir()
    (package / "new_path.py").write_text("def split(pg):\n    return isinstance(pg, ProcessGroupNCCL)\n\n"
                                         "def elsewhere():\n    return 'gloo'\n")
    assert nccl_surface.unwalked(str(tmp_path)) == ["torch.distributed.new_path.split"]


def _checks(result) -> dict:
    return result["checks"]


def test_every_row_works_or_is_refused_by_name(walk):
    for data in walk:
        rows = data["rows"]
        missing = sorted(set(nccl_surface.SURFACE) - set(rows))
        assert not missing, f"rows the walk did not exercise: {missing}"
        for name, (how, note) in nccl_surface.SURFACE.items():
            result = rows[name]
            if how == "refused":
                assert result["outcome"] == "refused", (name, result)
                message = result["message"]
                assert message.startswith(f"{result['api']} is not supported by the CUDA layer (called at "), message
                assert "nccl_walk.py:" in message and "; instead: " in message, message
            else:
                assert result["outcome"] == "works", (name, result.get("error"), result.get("traceback"))
                for check, (got, expected) in _checks(result).items():
                    # bit-equal: every reference is the same arithmetic on the CPU, or exact
                    assert got == expected, (name, check, got, expected)


def test_a_refusal_names_the_api_the_script_called(walk):
    rows = walk[0]["rows"]
    assert rows["torch.distributed.distributed_c10d.shrink_group"]["api"] == "torch.distributed.shrink_group"
    assert rows["torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm"]["api"] == \
        "torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm"
    assert "collectives.estimate" in rows["torch.distributed.distributed_c10d._time_estimator"]["message"]


def test_set_pg_timeout_changes_the_groups_timeout_and_a_collective_fails_that_soon(walk):
    for rank, data in enumerate(walk):
        checks = _checks(data["rows"]["torch.distributed.distributed_c10d._set_pg_timeout"])
        assert checks["before"][0] == 600.0  # NCCL's default, 10 minutes
        assert checks["set"][0] == [2.0, 2.0] and checks["backend's"][0] == 1.5
        if rank == 0:  # the rank left alone in the collective
            assert checks["timed out, naming the peer"][0] is True
            assert checks["within the new timeout"][0] is True


def test_nccl_options_and_device_id_reach_the_group(walk):
    for data in walk:
        checks = _checks(data["rows"]["torch.distributed.distributed_c10d.init_process_group"])
        assert checks["options kept"][0] == [True, 2]  # is_high_priority_stream, NCCL_CTA_POLICY_ZERO
        assert checks["bound_device_id"][0] == checks["bound_device_id"][1]
    assert _checks(walk[0]["rows"]["torch.distributed.distributed_c10d.init_process_group"])["bound_device_id"][0] \
        != _checks(walk[1]["rows"]["torch.distributed.distributed_c10d.init_process_group"])["bound_device_id"][0]


def test_groups_that_are_not_nccl_run_as_before_in_the_same_process(walk):
    for data in walk:
        others = _checks(data["rows"]["others"])
        assert set(others) == {"gloo", "hybrid", "fake"}
        for backend, checks in others.items():
            for check, (got, expected) in checks.items():
                assert got == expected, (backend, check, got, expected)

