"""Workloads people bring, unmodified, through `hybrid run` and torchrun, against their own CPU runs: a recurrent
language model, DDP started by mp.spawn, FSDP2 with init_process_group(device_id=...), the profiler's
tensorboard recipe; children a script starts itself; checkpoints; crashes; CUDA IPC. Each script under
tests/support/cuda_scripts is written for CUDA and falls back to the CPU without it (its own reference)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
import torch

from tests.interop.cuda_layer.test_cuda_layer import (_env, gloo_reference, gloo_run, hybrid, hybrid_distributed,
                                                      load, run, script)

TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]


def _on_the_cpu_and_the_layer(tmp_path, name, *args):
    """Run a script of tests/support/cuda_scripts as its own CPU reference and under `hybrid run`; return both
    outputs and the layer's completed process."""
    cpu = run([script(name), *args, "--out", "cpu.json"], tmp_path)
    layer = hybrid(script(name), *args, "--out", "slot.json", cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert layer.returncode == 0, layer.stderr[-3000:]
    return load(tmp_path / "cpu.json"), load(tmp_path / "slot.json"), layer


@pytest.mark.parametrize("model", ["LSTM", "GRU"])
def test_a_recurrent_language_model_trains_as_on_the_cpu(tmp_path, model):
    reference, got, layer = _on_the_cpu_and_the_layer(tmp_path, "recurrent_lm.py", "--model", model)
    assert reference["device"] == "cpu" and got["device"] == "cuda"
    assert got["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    assert got["cell"] == pytest.approx(reference["cell"], rel=1e-5)
    assert got["cell_grad"] == pytest.approx(reference["cell_grad"], rel=1e-5)
    assert "fused" not in layer.stderr  # no refusal, no fallback message


def test_a_graph_network_with_sparse_adjacency_trains_as_on_the_cpu(tmp_path):
    reference, got, _ = _on_the_cpu_and_the_layer(tmp_path, "graph_conv.py")
    assert reference["device"] == "cpu" and got["device"] == "cuda" and got["adj_device"] != "cpu"
    assert got["layout"] == "torch.sparse_coo"
    # The same kernels over the same bytes, the dropout masks from the same seeded generator: equal to the bit.
    assert got["losses"] == reference["losses"] and got["accuracy"] == reference["accuracy"]


def test_cuda_graphs_capture_and_replay_as_the_eager_steps_on_the_cpu(tmp_path):
    reference, got, layer = _on_the_cpu_and_the_layer(tmp_path, "cuda_graphs.py")
    assert reference["device"] == "cpu" and got["device"] == "cuda"
    # A captured training step replayed on new data, a forward graph, a graphed module: the eager CPU's numbers.
    assert got["losses"] == reference["losses"] and got["weight"] == reference["weight"]
    assert got["forward"] == reference["forward"] and got["graphed"] == reference["graphed"]
    assert "reads a value to the host, which a capturing stream does not allow" in got["capture_error"]
    assert "unsupported" not in layer.stderr.lower()  # no CUDA API refused


def test_ddp_started_by_mp_spawn_runs_its_children_on_the_rack(tmp_path):
    cpu = gloo_reference([script("spawn_ddp.py"), "--world", "2", "--port", "29611", "--out", "cpu.pt"], tmp_path,
                         timeout=300)
    layer = hybrid_distributed("--rack", "trn3:1+h100:2", script("spawn_ddp.py"), "--port", "29612", "--out",
                               "slot.pt", cwd=tmp_path, timeout=400)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert layer.returncode == 0, layer.stderr[-3000:]
    assert "rank 0 of 2 on cuda:0: NVIDIA H100" in layer.stdout  # the children saw the parent's rack and map
    reference, got = torch.load(tmp_path / "cpu.pt"), torch.load(tmp_path / "slot.pt")
    for name in reference:
        assert torch.equal(got[name], reference[name]), name


def test_fsdp2_with_device_id_and_cuda_graphs_under_torchrun_equals_gloo_on_the_cpu(tmp_path):
    # One eager step, then forward+backward captured in a CUDA graph and replayed (torchtitan's trainer): the
    # replays must issue FSDP's collectives and redo its storage frees and allocations, or the losses go NaN.
    cpu = gloo_reference([*TORCHRUN, script("fsdp2_train.py"), "--steps", "4", "--graphs", "--out", "cpu.pt"],
                          tmp_path, timeout=400)
    layer = gloo_run([*TORCHRUN, "-m", "interop.run", script("fsdp2_train.py"), "--steps", "4", "--graphs",
                      "--out", "slot.pt"], tmp_path, timeout=400)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert layer.returncode == 0, layer.stderr[-3000:]
    assert "rank 0 on cuda:0 (nccl)" in layer.stdout and "rank 0 on cpu (gloo)" in cpu.stdout
    reference, got = torch.load(tmp_path / "cpu.pt"), torch.load(tmp_path / "slot.pt", map_location="cpu")
    assert got["losses"] == reference["losses"]
    for name, value in reference["state"].items():
        assert torch.equal(got["state"][name], value), name


def test_children_a_script_starts_run_under_the_same_layer_and_rack(tmp_path):
    out = hybrid("--rack", "trn2:1+h200:2", "--report", "rep", script("children.py"), "--out", "children.json",
                 cwd=tmp_path, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    found = load(tmp_path / "children.json")
    parent = found.pop("parent")
    assert parent["available"] and parent["count"] == 2 and parent["name"].startswith("NVIDIA H200")
    assert set(found) == {"dataloader_spawn", "pool_spawn", "pool_forkserver"}
    for name, child in found.items():
        assert child["pid"] != parent["pid"], name
        assert {k: child[k] for k in ("available", "count", "name", "sum", "is_cuda")} == \
            {k: parent[k] for k in ("available", "count", "name", "sum", "is_cuda")}, name
    children_reports = [p for p in os.listdir(tmp_path) if p.startswith("rep.pid") and p.endswith(".json")]
    assert len(children_reports) >= 2  # the spawned workers exit normally and write theirs
    assert all(load(tmp_path / p)["device_map"].startswith("cuda:0 -> hybrid:1 (h200)") for p in children_reports)


def test_a_child_that_cannot_install_the_layer_says_why_at_its_first_cuda_call(tmp_path):
    from interop.cuda_layer import children

    env = _env()
    children.export("no-such-rack", None, False, None, env=env)
    code = "import torch; torch.cuda.set_device(0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode != 0
    assert "this process is a child of `hybrid run` (HYBRID_CUDA_LAYER is set) but the CUDA layer could not be " \
           "installed in it: ValueError" in out.stderr
    assert "no-such-rack" in out.stderr and "unset HYBRID_CUDA_LAYER" in out.stderr


def test_the_profilers_tensorboard_recipe_runs_and_gets_the_modelled_slot_ops(tmp_path):
    cpu = run([script("profile_tensorboard.py"), "--logdir", "cpu", "--gzip", "--out", "cpu.json"], tmp_path)
    layer = hybrid(script("profile_tensorboard.py"), "--logdir", "slot", "--gzip", "--out", "slot.json", cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert layer.returncode == 0, layer.stderr[-3000:]
    assert load(tmp_path / "slot.json")["losses"] == load(tmp_path / "cpu.json")["losses"]
    (trace,) = os.listdir(tmp_path / "slot")
    assert trace.startswith("worker.") and trace.endswith(".pt.trace.json.gz")
    import gzip

    with gzip.open(tmp_path / "slot" / trace, "rt") as f:
        doc = json.load(f)
    modelled = [e for e in doc["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("pid"), int)
                and e["pid"] >= 10_000_000]
    assert modelled and all(e["args"]["modelled"] for e in modelled)
    assert "hybrid-interop" in doc["otherData"]


def test_a_checkpoint_saved_under_the_layer_is_a_cuda_checkpoint(tmp_path):
    # torch.distributed.checkpoint too: its writer copies tensors of "the available device type" to the CPU
    # (torch._utils._get_available_device_type(), "cuda" under the layer, while the tensors are on "hybrid"
    # slots), and it refused them with "Tensor must be on CPU".
    code = ("import torch; m = torch.nn.Linear(3, 2).cuda(1); "
            "torch.save({'model': m.state_dict(), 'x': torch.ones(2, device='cuda:0')}, 'ckpt.pt')\n"
            "import torch.distributed.checkpoint as dcp\n"
            "dcp.save({'model': m.state_dict()}, checkpoint_id='dcp')\n"
            "back = {'model': torch.nn.Linear(3, 2).cuda(0).state_dict()}\n"
            "dcp.load(back, checkpoint_id='dcp')\n"
            "print('dcp', all(torch.equal(back['model'][k].cpu(), v.cpu()) for k, v in m.state_dict().items()),"
            " back['model']['weight'].device)")
    saved = hybrid(script("run_code.py"), code, cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr[-3000:]
    assert saved.stdout.split() == ["dcp", "True", "hybrid:4"]  # loaded into the slot cuda:0 maps to
    with zipfile.ZipFile(tmp_path / "ckpt.pt") as z:
        pickle = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert b"cuda:1" in pickle and b"cuda:0" in pickle and b"hybrid" not in pickle
    if not torch.cuda.is_available():  # a CUDA checkpoint needs a map_location on a machine without CUDA
        with pytest.raises(RuntimeError, match="deserialize object on a CUDA device"):
            torch.load(tmp_path / "ckpt.pt")
    plain = torch.load(tmp_path / "ckpt.pt", map_location="cpu")  # as any CUDA checkpoint loads on a CPU
    assert plain["model"]["weight"].shape == (2, 3)
    reload = hybrid(script("run_code.py"), "import torch; s = torch.load('ckpt.pt'); "
                    "print(s['model']['weight'].device, s['x'].device, s['model']['weight'].is_cuda)", cwd=tmp_path)
    assert reload.returncode == 0, reload.stderr[-3000:]
    assert reload.stdout.split()[:3] == ["hybrid:5", "hybrid:4", "True"]  # back on the slots cuda:1, cuda:0 map to


@pytest.mark.parametrize("mode,kind,name", [("api", "api", "torch.cuda.MemPool"), ("op", "op", "aten::mm"),
                                            ("python", "exception", "KeyError"),
                                            ("assert", "exception", "AssertionError")])
def test_the_report_of_a_crashed_run_names_what_failed(tmp_path, mode, kind, name):
    out = hybrid("--report", "rep", script("crashes.py"), mode, cwd=tmp_path)
    assert out.returncode == 1
    failure = load(tmp_path / "rep.json")["failure"]
    assert failure["kind"] == kind and failure["name"] == name
    marker = {"api": "torch.cuda.MemPool()", "op": "x @ x", "python": '{}["missing"]',
              "assert": "assert x.sum()"}[mode]  # an exception without a message is not the op that failed before
    line = next(i for i, text in enumerate(open(script("crashes.py")), 1) if marker in text)
    assert failure["site"].endswith(f"crashes.py:{line}")
    if kind == "op":
        assert failure["slot"] == 4
    md = (tmp_path / "rep.md").read_text()
    assert "## The run failed" in md and f"`{name}`" in md and "Nothing: every op ran" not in md
    assert f"`{name}`" in out.stderr  # the summary names it too (the traceback has no backquotes)


def test_sharing_a_slot_tensor_with_another_process_is_refused_by_name(tmp_path):
    code = ("import torch, torch.multiprocessing as mp\n"
            "x = torch.ones(3, device='cuda')\n"
            "try:\n    x.untyped_storage()._share_cuda_()\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
            "from multiprocessing.reduction import ForkingPickler\n"
            "try:\n    ForkingPickler.dumps(x)\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
            "print(ForkingPickler.loads(ForkingPickler.dumps(x.cpu())).sum().item())\n"
            "import warnings\n"
            # A TypedStorage, as a DataLoader worker's batches send (made without torch's one-time warning)
            "s = torch.storage.TypedStorage(wrap_storage=torch.ones(2).untyped_storage(), dtype=torch.float32,"
            " _internal=True)\n"
            "with warnings.catch_warnings():\n    warnings.simplefilter('error')\n"
            "    print(ForkingPickler.loads(ForkingPickler.dumps(s))._size())\n")
    out = hybrid(script("run_code.py"), code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second, third, fourth = out.stdout.splitlines()
    assert first.startswith("UnsupportedCudaAPI torch.UntypedStorage._share_cuda_ is not supported") and \
        "instead: send tensor.cpu()" in first
    assert second.startswith("UnsupportedCudaAPI torch.multiprocessing (a tensor on a mapped slot sent to another "
                             "process: CUDA IPC) is not supported")
    assert third == "3.0"  # CPU tensors still share as torch shares them
    assert fourth == "2"  # and storages, without the layer raising TypedStorage's deprecation warning


def test_data_parallel_over_the_mapped_slots_trains_as_one_module_on_the_cpu(tmp_path):
    cpu = run([script("data_parallel.py"), "--out", "cpu.json"], tmp_path)
    layer = hybrid("--rack", "trn3:1+h100:3", "--report", "rep", script("data_parallel.py"), "--out", "slot.json",
                   cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert layer.returncode == 0, layer.stderr[-3000:]
    reference, got = load(tmp_path / "cpu.json"), load(tmp_path / "slot.json")
    assert got["replicas"] == 3 and got["device"] == "hybrid:1"  # cuda:0 of the map
    assert got["losses"] == pytest.approx(reference["losses"], rel=1e-6)
    for a, b in zip(got["params"], reference["params"]):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    report = load(tmp_path / "rep.json")
    assert {r["slot"] for r in report["op_ledger"] if r["op"] == "aten::addmm"} == {1, 2, 3}
    assert any(a["api"] == "torch.nn.DataParallel" for a in report["cuda_apis"])


def test_tensor_parallel_attention_on_dtensors_trains_as_the_unsharded_model(tmp_path):
    """The FSDP + TP example's attention: SDPA on DTensors sharded by heads runs the CPU's attention kernel on
    a slot, which has DTensor sharding rules of ours (interop/dtensor_attention.py); reference: the same model
    unsharded on the CPU, in the same process. After one eager step the parallel forward and backward are
    captured in a CUDA graph and replayed (torchtitan's trainer): the capture holds the plain ops under DTensor
    and its functional collectives, which each replay issues and waits for."""
    layer = gloo_run([*TORCHRUN, "-m", "interop.run", script("tp_attention_train.py"), "--steps", "4", "--graphs",
                      "--out", "tp.json"], tmp_path, timeout=400)
    assert layer.returncode == 0, layer.stderr[-3000:]
    got = load(tmp_path / "tp.json")
    assert got["device"] == "cuda" and got["world"] == 2
    assert got["parallel"] == pytest.approx(got["reference"], rel=1e-5)
    assert got["parallel"][-1] < got["parallel"][0]
