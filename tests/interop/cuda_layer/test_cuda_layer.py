"""CUDA code on the rack, unmodified: `hybrid run` / `python -m interop.run` / torchrun, checked against the
same scripts run natively on the CPU (their own reference: each falls back to the CPU without CUDA).

The layer patches torch process-wide, so every run here is a subprocess; each script is run once per
configuration (module-scoped fixtures) and several tests read its outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT
SCRIPTS = os.path.join(ROOT, "tests", "support", "cuda_scripts")


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("LOCAL_RANK", None)
    return env


def run(args, cwd, timeout=300):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=_env(),
                          cwd=cwd)


GLOO_EXIT_ABORT = "terminate called without an active exception"
"""How torch's own Gloo process group dies at exit, after training, in one rank (a C++ thread torn down at
interpreter exit, no Python frame): about 1 run in 11 of the plain mp.spawn DDP script here, with no interop in the
process, and so also under `hybrid run`, whose children tear down the same Gloo group."""


def gloo_run(args, cwd, timeout=300):
    """A distributed run (torchrun or mp.spawn) whose exit may hit :data:`GLOO_EXIT_ABORT`: that torch failure, and
    only it, is run again, up to twice; every other failure, and every result, is the test's to check."""
    out = run(args, cwd, timeout=timeout)
    for _ in range(2):
        if out.returncode == 0 or GLOO_EXIT_ABORT not in out.stderr:
            break
        out = run(args, cwd, timeout=timeout)
    return out


def gloo_reference(args, cwd, timeout=300):
    """The plain-torch CPU run a distributed test compares with (torchrun or mp.spawn): :func:`gloo_run`."""
    return gloo_run(args, cwd, timeout)


def hybrid(*args, cwd, timeout=300):
    return run(["-m", "interop.run", *args], cwd, timeout)


def hybrid_distributed(*args, cwd, timeout=300):
    """`hybrid run` of a script that starts its own Gloo ranks (mp.spawn): :func:`gloo_run`."""
    return gloo_run(["-m", "interop.run", *args], cwd, timeout)


def script(name: str) -> str:
    return os.path.join(SCRIPTS, name)


def load(path):
    with open(path) as f:
        return json.load(f)


# -- the training script: default map and --map trn vs the CPU -------------------------------------------

@pytest.fixture(scope="module")
def training(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    cpu = run([script("train_lm.py"), "--out", "cpu.json"], tmp)
    default = hybrid("--report", "default", script("train_lm.py"), "--out", "out_default.json", cwd=tmp)
    trn = hybrid("--map", "trn", "--report", "trn", script("train_lm.py"), "--out", "out_trn.json", cwd=tmp)
    return tmp, cpu, default, trn


def test_training_script_runs_unmodified_and_matches_its_cpu_run(training):
    tmp, cpu, default, trn = training
    for out in (cpu, default, trn):
        assert out.returncode == 0, out.stderr[-3000:]
    reference = load(tmp / "cpu.json")
    for name in ("out_default.json", "out_trn.json"):
        got = load(tmp / name)
        assert got["tied"] is True
        assert got["loss"] == pytest.approx(reference["loss"], rel=1e-6, abs=1e-7)
        assert got["checksum"] == pytest.approx(reference["checksum"], rel=1e-6, abs=1e-7)
    assert "training on NVIDIA B200" in default.stdout and "capability (10, 0)" in default.stdout
    assert "training on AWS Trainium4" in trn.stdout and "capability (9, 0)" in trn.stdout
    assert "CUDA events" in default.stdout


def test_training_report_lists_each_cuda_call_with_its_site(training):
    tmp, _, default, trn = training
    report = load(tmp / "default.json")
    apis = {a["api"]: a for a in report["cuda_apis"]}
    expected = {
        "torch.cuda.is_available": "mapped", "torch.cuda.manual_seed": "same", "torch.cuda.Event": "modelled",
        "torch.cuda.Event.elapsed_time": "modelled", "torch.cuda.max_memory_allocated": "mapped",
        "torch.cuda.empty_cache": "same", "torch.cuda.synchronize": "same", "torch.cuda.get_device_name": "mapped",
        "torch.cuda.reset_peak_memory_stats": "mapped", "Tensor.pin_memory": "mapped", "Tensor.to(cuda)": "mapped",
        "Module.to(cuda)": "mapped", "torch.autocast(device_type='cuda')": "mapped",
    }
    for name, served in expected.items():
        assert name in apis, f"{name} missing from the report ({sorted(apis)})"
        assert apis[name]["served"] == served, name
        assert apis[name]["sites"] and all("train_lm.py:" in s for s in apis[name]["sites"]), apis[name]
    assert apis["Tensor.to(cuda)"]["count"] == 12  # 6 steps x (inputs, targets)
    flags = {f["name"]: f for f in report["numerics_flags"]}
    assert flags["torch.backends.cuda.matmul.allow_tf32"]["changes_numerics"] is True
    assert report["divergences"] == []
    ledger = {(r["op"], r["path"]) for r in report["op_ledger"]}
    assert ("aten::mm", "zero-copy CPU kernel") in ledger and ("aten::view", "dedicated hybrid kernel") in ledger
    assert {r["slot"] for r in report["op_ledger"]} == {4}  # cuda:0 is the first B200 slot of fusion-default
    assert {r["slot"] for r in load(tmp / "trn.json")["op_ledger"]} == {0}
    assert "cuda:0 -> hybrid:0 (trn4)" in load(tmp / "trn.json")["device_map"]
    md = (tmp / "default.md").read_text()
    assert "## CUDA APIs the script touched" in md and "torch.cuda.Event.elapsed_time" in md
    assert "hybrid run:" in default.stderr and "CUDA APIs:" in default.stderr and "modelled makespan" in default.stderr


# -- device fidelity: default lists, --strict raises ------------------------------------------------------

RACK = ["--rack", "trn2:1+h100:1", "--map", "0=hybrid:0,1=hybrid:1"]


def test_default_mode_runs_and_lists_both_divergences(tmp_path):
    out = hybrid(*RACK, "--report", "rep", script("divergences.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "float64" in out.stdout and "float8" in out.stdout
    divs = {(d["op"], d["dtype"]): d for d in load(tmp_path / "rep.json")["divergences"]}
    f64 = divs[("aten::mm", "float64")]
    assert f64["kind"] == "trn2" and f64["level"] == "unsupported" and "NKI" in f64["source"]
    assert f64["sites"] == ["%s:11" % os.path.relpath(script("divergences.py"), tmp_path)] or \
        f64["sites"][0].endswith("divergences.py:11")
    f8 = divs[("aten::mm", "float8_e4m3fn")]
    assert f8["kind"] == "h100" and "torch._scaled_mm" in f8["instead"] and f8["sites"][0].endswith("divergences.py:14")
    assert f8["count"] == 1 and f64["count"] == 1
    assert "would fail" in out.stderr  # the summary


@pytest.mark.parametrize("which, expected", [
    ("float64", ["NotImplementedError", "aten::mm in float64 is not supported on trn2", "NKI", "instead: float32"]),
    ("float8", ["NotImplementedError", "\"addmm_cuda\" not implemented for 'Float8_e4m3fn'", "torch._scaled_mm",
                "Blas.cpp"]),
])
def test_strict_raises_what_the_real_device_would(tmp_path, which, expected):
    out = hybrid(*RACK, "--strict", script("divergences.py"), which, cwd=tmp_path)
    assert out.returncode == 1
    for text in expected:
        assert text in out.stderr, (text, out.stderr[-3000:])
    assert "divergences.py" in out.stderr and which not in out.stdout


# -- torchrun + DDP vs Gloo on the CPU ------------------------------------------------------------------

def test_ddp_under_torchrun_matches_gloo_on_the_cpu(tmp_path):
    import torch

    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    native = gloo_reference([*torchrun, script("ddp_train.py"), "--out", "gloo.pt"], tmp_path, timeout=240)
    assert native.returncode == 0, native.stderr[-3000:]
    layer = gloo_run([*torchrun, "-m", "interop.run", "--report", "ddp", script("ddp_train.py"), "--out",
                      "hybrid.pt"], tmp_path, timeout=240)
    assert layer.returncode == 0, layer.stderr[-3000:]
    assert "(nccl)" in layer.stdout and "(gloo)" in native.stdout  # get_backend() answers in CUDA's terms
    reference, got = torch.load(tmp_path / "gloo.pt"), torch.load(tmp_path / "hybrid.pt")
    assert reference.keys() == got.keys()
    for name in reference:
        torch.testing.assert_close(got[name], reference[name], rtol=0, atol=0)
    rank0, rank1 = load(tmp_path / "ddp.json"), load(tmp_path / "ddp.rank1.json")
    assert {r["slot"] for r in rank0["op_ledger"]} == {4} and {r["slot"] for r in rank1["op_ledger"]} == {5}
    apis = {a["api"] for a in rank0["cuda_apis"]}
    assert {"torch.distributed.init_process_group('nccl')", "DistributedDataParallel(device_ids=...)",
            "torch.cuda.set_device"} <= apis


# -- libraries that branch on CUDA ------------------------------------------------------------------------

def test_hf_generate_and_device_map_take_the_cuda_path_and_match_the_cpu(tmp_path):
    cpu = run([script("hf_generate.py"), "--out", "cpu.json"], tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    mapped = hybrid(script("hf_generate.py"), "--device-map", "--out", "map.json", cwd=tmp_path)
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    reference, got = load(tmp_path / "cpu.json"), load(tmp_path / "map.json")
    assert got["tokens"] == reference["tokens"]
    assert got["logits_sum"] == pytest.approx(reference["logits_sum"], rel=1e-6)
    assert got["device"] == "hybrid:4" and got["is_cuda"] is True and reference["is_cuda"] is False


def test_compile_and_triton_under_the_layer_run_on_the_slot_and_match_the_cpu(tmp_path):
    # Triton asks torch.cuda.is_available() which driver to load: the layer's True must not send it to a
    # GPU driver this machine lacks (it did: "libcuda.so cannot found" from torch.compile).
    cpu = run([script("compiled_train.py"), "--out", "cpu.json"], tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    # With warnings shown: the layer's own wrappers must trace cleanly (Dynamo met sys._getframe in
    # torch.accelerator's wrappers, graph-broke and warned "Dynamo does not know how to trace the builtin").
    mapped = subprocess.run([sys.executable, "-m", "interop.run", script("compiled_train.py"), "--out", "map.json"],
                            capture_output=True, text=True, timeout=300, env=dict(_env(), PYTHONWARNINGS="default"),
                            cwd=tmp_path)
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    assert "Dynamo does not know how to trace" not in mapped.stderr, mapped.stderr[-3000:]
    reference, got = load(tmp_path / "cpu.json"), load(tmp_path / "map.json")
    assert got["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    assert got["triton_sum"] == pytest.approx(reference["triton_sum"], rel=1e-6)
    assert got["device"] == "hybrid:4" and got["has_triton"] is True
    # Compiled as on the CPU: one graph, no graph break. Dynamo tried to compile the layer's torch.accelerator
    # wrapper as a frame of its own when its stream tracking called it at run time, and counted a graph break there.
    assert got["graphs"] == reference["graphs"] == 1
    assert got["graph_breaks"] == reference["graph_breaks"] == {}


def test_the_readme_example_script_runs_on_gpu_and_trainium_slots_as_on_the_cpu(tmp_path):
    example = os.path.join(ROOT, "examples", "cuda_train.py")
    cpu = run([example], tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    loss = cpu.stdout.split("final loss ")[1].split()[0]
    for args, chip in (((), "NVIDIA B200"), (("--map", "trn"), "Trainium4 (Trn4, projected)")):
        mapped = hybrid(*args, example, cwd=tmp_path)
        assert mapped.returncode == 0, mapped.stderr[-3000:]
        assert chip in mapped.stdout and f"final loss {loss}" in mapped.stdout
        assert "modelled makespan" in mapped.stderr


def test_accelerate_picks_the_mapped_device_and_matches_the_cpu(tmp_path):
    cpu = run([script("accelerate_train.py"), "--out", "cpu.json"], tmp_path)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    layer = hybrid("--report", "acc", script("accelerate_train.py"), "--out", "hyb.json", cwd=tmp_path)
    assert layer.returncode == 0, layer.stderr[-3000:]
    reference, got = load(tmp_path / "cpu.json"), load(tmp_path / "hyb.json")
    assert got["device"] == "cuda" and got["param_device"] == "hybrid:4"
    assert got["loss"] == pytest.approx(reference["loss"], rel=1e-6)
    for a, b in zip(reference["params"], got["params"]):
        assert b == pytest.approx(a, rel=1e-6, abs=1e-7)
    apis = {a["api"] for a in load(tmp_path / "acc.json")["cuda_apis"]}
    assert "torch.accelerator.current_accelerator" in apis and "torch.cuda.is_available" in apis


# -- the surface: device arguments in every form, torch.cuda answered in CUDA's terms ---------------------------

@pytest.fixture(scope="module")
def surface(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("surface")
    out = hybrid(script("surface.py"), cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_torch_cuda_answers_for_the_mapped_slots(surface):
    assert surface["is_available"] is True and surface["device_count"] == 4 and surface["current_device"] == 0
    assert surface["name0"] == "NVIDIA B200 (HGX)" and surface["capability0"] == [10, 0]
    assert surface["props0"] == {"name": "NVIDIA B200 (HGX)", "major": 10, "minor": 0,
                                 "total_memory": 180_000_000_000, "multi_processor_count": 148}
    assert surface["memory"] == [1 << 20, True, True, True, True]
    assert surface["rng"] == [True, True]
    assert surface["events"] == [True, "hybrid:4", "hybrid:4"]
    assert surface["accelerator"] == ["cuda", 4]


def test_device_arguments_in_every_form_reach_the_mapped_slot(surface):
    slot0 = ("zeros_str", "arange", "tensor", "full", "to_device_kw", "cuda_method", "module_cuda", "with_device",
             "generator", "storage")
    slot1 = ("zeros_str1", "zeros_device", "zeros_int", "randn_like", "new_zeros", "to_int", "to_str",
             "cuda_method1", "module_to_int", "set_default_device")
    for key in slot0:
        assert surface[key] == "hybrid:4", (key, surface[key])
    for key in slot1:
        assert surface[key] == "hybrid:5", (key, surface[key])
    assert surface["load"] == {k: "hybrid:5" for k in ("str", "device", "int", "dict", "callable")}
    assert surface["load_cuda_checkpoint"] == ["hybrid:4", [0.0, 1.0, 2.0]]
    assert surface["to_dtype_only"] == "torch.float16"
    assert surface["is_cuda"] == [True, False] and surface["tied_weights_stay_tied"] is True
    assert surface["generator_isinstance"] is True


def test_amp_legacy_types_nvtx_flags_and_what_is_left_alone(surface):
    assert surface["DoubleTensor"] == ["torch.float64", "hybrid:4"]  # never silently float32
    assert surface["FloatTensor_isinstance"] is True
    assert surface["amp"] == ["torch.float16", "torch.bfloat16", [True, "torch.float16"], True, "GradScaler"]
    assert surface["nvtx"] == [["forward", 4, True], ["step 3", 4, True]]
    assert surface["flags"] == [True, True]
    assert surface["untouched"] == [True, False, "torch.jit._script", "torch"]
    assert surface["unsupported"].startswith("torch.cuda.MemPool is not supported by the CUDA layer (called at ")
    assert "surface.py:" in surface["unsupported"] and "instead: the slot allocator" in surface["unsupported"]
    assert surface["annotation_still_works"] == "torch.cuda.MemPool | None"


# -- exits, tracebacks and bad input ------------------------------------------------------------------------

def test_the_scripts_exit_status_stdout_and_traceback_are_its_own(tmp_path):
    out = hybrid(script("exits.py"), "exit", "3", cwd=tmp_path)
    assert out.returncode == 3 and out.stdout == "stdout is the script's\n"
    out = hybrid(script("exits.py"), "raise", cwd=tmp_path)
    assert out.returncode == 1 and "ValueError: the script's own error" in out.stderr
    traceback = out.stderr.split("ValueError")[0]
    assert "exits.py" in traceback and "interop/run.py" not in traceback and "runpy" not in traceback
    out = hybrid(script("exits.py"), "graph", cwd=tmp_path)
    assert out.returncode == 1
    assert "torch.cuda.MemPool is not supported by the CUDA layer (called at" in out.stderr
    assert "exits.py:13" in out.stderr and "instead:" in out.stderr


def test_modules_run_like_python_dash_m_and_a_rack_without_gpus_says_so(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "main.py").write_text(
        "import sys, torch\nprint(torch.cuda.is_available(), torch.cuda.device_count(), sys.argv[1:],"
        " __name__, torch.cuda.get_device_name())\n")
    out = hybrid("--rack", "trn2:2", "-m", "pkg.main", "-a", "--b", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True 2 ['-a', '--b'] __main__ AWS Trainium2 (Trn2)"
    assert "no GPU-kind slot: CUDA devices are its slots in order" in out.stderr


def test_bad_invocations_are_usage_errors(tmp_path):
    out = hybrid(os.path.join(str(tmp_path), "missing.py"), cwd=tmp_path)
    assert out.returncode == 2 and "missing.py" in out.stderr and "not found" in out.stderr
    out = hybrid(cwd=tmp_path)
    assert out.returncode == 2 and "no script given" in out.stderr
    out = hybrid("--map", "0=hybrid:99", script("exits.py"), "exit", "0", cwd=tmp_path)
    assert out.returncode == 2 and "hybrid:99 is not a slot" in out.stderr and "hybrid:7 (b200)" in out.stderr
    out = hybrid("--rack", "h9000:2", script("exits.py"), "exit", "0", cwd=tmp_path)
    assert out.returncode == 2 and "h9000" in out.stderr
    out = run(["-m", "hybrid_cli", "run", "--map", "trn", script("exits.py"), "exit", "5"], tmp_path)
    assert out.returncode == 5 and "stdout is the script's" in out.stdout


def test_device_maps(tmp_path):
    code = r"""
import json, os, interop
from interop.cuda_layer.mapping import parse_map, MapError
rack = interop.Rack.from_spec("trn3:2+h100:2")
only_trn = interop.Rack.from_spec("trn2:3")
out = {"default": parse_map(None, rack).slots, "trn": parse_map("trn", rack).slots,
       "kind": parse_map("h100", rack).slots, "explicit": parse_map("0=hybrid:3,cuda:1=hybrid:0", rack).slots,
       "no_gpu": [parse_map("", only_trn).slots, parse_map("", only_trn).note],
       "node1": parse_map(None, rack, env={"GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "1"}).slots}
errors = []
for spec in ("0=hybrid:9", "b200", "0=4,0=5", "0=x", "0=hybrid:1,1=hybrid:1", "nonsense", "1=hybrid:2"):
    try:
        parse_map(spec, rack)
    except MapError as e:
        errors.append(str(e))
out["errors"] = errors
print(json.dumps(out))
"""
    out = run(["-c", code], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["default"] == [2, 3] and got["trn"] == [0, 1] and got["kind"] == [2, 3]
    assert got["explicit"] == [3, 0] and got["node1"] == [3]
    assert got["no_gpu"][0] == [0, 1, 2] and "no GPU-kind slot" in got["no_gpu"][1]
    assert len(got["errors"]) == 7
    for message in got["errors"]:
        assert ("hybrid:0 (trn3)" in message or "mapped twice" in message or "two CUDA devices" in message
                or "must be 0..0" in message)
    assert "has no b200 slot; it has hybrid:0 (trn3), hybrid:1 (trn3), hybrid:2 (h100)" in got["errors"][1]


def test_a_rack_switch_under_the_layer_follows_core_semantics(tmp_path):
    """cuda:N follows the rack made current (same --map, same current CUDA index); tensors stay on their
    rack: a retired one refuses ops, goes to the CPU and stays counted there; a map the new rack cannot
    satisfy is a MapError on use, and the map comes back with its rack."""
    out = hybrid("--rack", "trn2:2+h100:2", "--report", "rep", script("rack_switch.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["before"] == ["hybrid:3", "NVIDIA H100 SXM5", 1, 16]
    assert got["inside"][:4] == ["hybrid:1", "NVIDIA B200 (HGX)", 1, 2]
    assert got["inside"][4] == 8 and got["inside"][5] == "hybrid:0"  # other's accounts, other's cuda:0
    assert "rack" in got["retired_op"] and got["retired_op"].startswith("RuntimeError")
    assert got["retired_to_cpu"] == [1.0] * 4 and got["retired_counted_on_its_rack"] == 16
    assert got["after"] == ["hybrid:3", "NVIDIA H100 SXM5", [2.0] * 4]
    assert got["retired_other"][0] == 8 and got["retired_other"][1].startswith("RuntimeError")
    assert got["map_does_not_fit"].startswith("MapError") and "0=hybrid:3" in got["map_does_not_fit"]
    assert "hybrid:0 (h100)" in got["map_does_not_fit"] and got["cpu_still_fine"] == "cpu"
    assert got["map_back"] == "hybrid:3"
    report = load(tmp_path / "rep.json")
    racks = {r["rack"] for r in report["op_ledger"]}
    assert len(racks) >= 2  # ops ran on both racks, each row names its own


def test_a_malformed_launcher_variable_stops_the_run_before_the_script(tmp_path):
    # The device map (GROUP_RANK), the report's rank and file name (RANK) and the rank's slot (LOCAL_RANK) read
    # one reader; a malformed value is a usage error naming it, before the script runs (it would print).
    (tmp_path / "s.py").write_text("print('ran')\n")
    for name in ("RANK", "GROUP_RANK"):
        out = subprocess.run([sys.executable, "-m", "interop.run", "s.py"], capture_output=True, text=True,
                             timeout=300, env={**_env(), name: "one"}, cwd=tmp_path)
        assert out.returncode == 2 and "ran" not in out.stdout, out.stderr[-2000:]
        assert f"{name}: expected a non-negative integer (as torchrun sets it), got 'one'" in out.stderr
