"""One registry of model names (planner.models), torch-free, that the what-if and the live plan both read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from planner.models import MODELS, lookup, model_names, model_presets
from tests.support import ROOT


def test_the_registry_is_read_without_torch():
    code = ("import sys; from planner.models import MODELS, model_names; names = model_names(); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules); "
            "print(','.join(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(",") == list(MODELS)


def test_names_of_each_command():
    assert model_names(whatif=True) == ["llama3-8b", "llama3-70b", "llama3.1-405b", "mixtral-8x7b", "llama3.1-8b",
                                        "llama3.1-70b", "llama2-7b", "llama2-13b", "llama2-70b"]
    assert set(model_names()) == set(MODELS) >= {"gpt", "gpt-tiny", "cnn"} | set(model_presets())
    assert lookup(" GPT-Tiny ") is MODELS["gpt-tiny"] and lookup("nope") is None


def test_the_live_plan_builds_every_named_model_from_the_registry():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from interop.live.plan_models import build

    for name, entry in MODELS.items():
        if entry.config_class and name != "llama3-8b":
            continue  # one transformers architecture is enough here (each is a module of its layers on meta)
        pm = build(name, real=False)
        assert pm.name == name and pm.description == (entry.description if entry.module else pm.description)
        params = sum(p.numel() for p in pm.model.parameters())
        if entry.module:
            assert pm.inputs[0].shape[0] == entry.batch
            assert next(pm.model.parameters()).dtype == getattr(torch, entry.dtype)
        if entry.config_class:  # the plan's module has the what-if's parameters: one architecture, one count
            from planner.models import model_blocks

            assert params == model_blocks(name).parameters()
    with pytest.raises(ValueError, match="unknown model 'llama-17'.*or module:factory"):
        build("llama-17", real=False)
