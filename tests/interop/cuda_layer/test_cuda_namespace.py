"""CUDA's namespace under the layer, all of it: every public name of torch.cuda (and its submodules),
torch.backends.cuda/cudnn and torch.version is served, answered in CUDA's terms, or refused by name with its call
site and what to use (interop/cuda_layer/namespace.py); docs/cuda_namespace.md is that table, kept current."""

from __future__ import annotations

import json
import os

import pytest

from tests.interop.cuda_layer.test_cuda_layer import hybrid, script
from tests.support import ROOT


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("walk")
    out = hybrid(script("namespace_walk.py"), "--out", "walk.json", cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp / "walk.json") as f:
        return json.load(f)


def test_every_public_name_is_served_answered_or_refused(walk):
    unclassified = [name for name, how, _ in walk["rows"] if how not in ("served", "answered", "refused")]
    assert not unclassified, f"names of CUDA's namespace the layer neither serves, answers nor refuses: {unclassified}"
    names = {name for name, _, _ in walk["rows"]}
    for expected in ("torch.cuda.nccl.version", "torch.cuda.tunable.enable", "torch.version.cuda",
                     "torch.cuda.set_per_process_memory_fraction", "torch.backends.cudnn.version",
                     "torch.cuda.graphs.CUDAGraph", "torch.cuda.comm.broadcast_coalesced", "torch.cuda.memory.MemPool"):
        assert expected in names
    assert len(names) > 250


def test_every_refusal_names_the_api_its_call_site_and_what_to_use(walk):
    line = next(i for i, text in enumerate(open(walk["script"]), 1) if "getattr(importlib.import_module" in text)
    assert walk["refusals"]
    for name, (kind, message) in walk["refusals"].items():
        assert kind == "UnsupportedCudaAPI", (name, kind, message)
        # A submodule's re-export of a torch.cuda name is refused under that name (one API, two spellings).
        named = (name, "torch.cuda." + name.rsplit(".", 1)[1])
        assert any(message.startswith(f"{n} is not supported by the CUDA layer (called at ") for n in named), message
        assert f"namespace_walk.py:{line})" in message and "; instead: " in message, message


def test_versions_nccl_tunable_and_the_memory_fraction_answer_in_cuda_terms(walk):
    checks = walk["checks"]
    assert checks["version.cuda"] == "12.8" and checks["cudnn.version"] == 91002 and checks["cudnn.is_available"]
    assert checks["nccl.version"] == [2, 27, 3] and checks["backends.cuda.is_built"]
    assert checks["tunable"] == [True, 7, []]
    assert checks["fraction"] == pytest.approx(4.0 * (1 << 20) / 180e9)  # of the B200 slot's 180 GB
    assert "this process's limit of 4.00 MiB" in checks["over_fraction"]
    assert "set_per_process_memory_fraction" in checks["over_fraction"]


def test_c10d_logs_a_failed_collective_of_an_nccl_group_with_the_nccl_version(walk):
    log = walk["checks"]["c10d_log"]
    assert log["backend"] == "nccl" and log["nccl_version"] == "2.27.3"


def test_the_docs_table_is_the_walk(walk):
    with open(os.path.join(ROOT, "docs", "cuda_namespace.md"), encoding="utf-8") as f:
        assert f.read() == walk["markdown"], ("docs/cuda_namespace.md is stale: "
                                              "python -m interop.cuda_layer.namespace_doc > docs/cuda_namespace.md")


def test_every_wrapper_keeps_torchs_signature(tmp_path):
    out = hybrid(script("signatures.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    checked = int(out.stdout.split("checked ")[1].split()[0])
    assert checked > 200  # the layer's replacements and the profiler's wrappers were all looked at
