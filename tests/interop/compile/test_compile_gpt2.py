"""torch.compile of Hugging Face GPT-2 (built from a small config, random weights, no download) on a hybrid
slot: logits, loss and every parameter's gradient equal eager on the same slot; one timeline record per
launch of a compiled kernel. The one compile here is the slowest test of the compile suite (~30-70 s)."""

from __future__ import annotations

import os
import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import interop

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

SLOT = 5  # a b200 slot of fusion-default


@pytest.fixture(autouse=True)
def offline_and_fresh(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    interop.set_recording(True)
    interop.reset_timeline()
    torch._dynamo.reset()
    yield
    interop.reset_timeline()
    torch._dynamo.reset()


def _step(model, ids):
    """Logits, loss and gradients of one training step (the loss computed outside the model)."""
    logits = model(ids).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    module = getattr(model, "_orig_mod", model)  # a compiled model's parameters are the original's
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}
    model.zero_grad(set_to_none=True)
    return logits.detach(), loss.detach(), grads


def test_gpt2_compiled_equals_eager_forward_and_backward():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=97, n_positions=32, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).to(f"hybrid:{SLOT}")
    ids = torch.randint(0, 97, (2, 16), device=f"hybrid:{SLOT}")
    eager = _step(model, ids)

    compiled = torch.compile(model)
    _, sources = run_and_get_code(_step, compiled, ids)
    interop.reset_timeline()
    logits, loss, grads = _step(compiled, ids)

    torch.testing.assert_close(logits, eager[0])
    torch.testing.assert_close(loss, eager[1])
    assert grads.keys() == eager[2].keys()
    for name in grads:
        torch.testing.assert_close(grads[name], eager[2][name], msg=name)
    assert logits.device == torch.device("hybrid", SLOT)

    kernels = [r for r in interop.timeline() if r.kind == "kernel"]
    calls = [m for code in sources for m in re.findall(r"^\s+(cpp_fused_\w+)\(", code, re.MULTILINE)]
    assert calls and sorted(r.op.removeprefix("inductor:") for r in kernels if "cpp_fused" in r.op) == sorted(calls)
    assert all(r.slot == SLOT for r in kernels)
    assert any(r.op.startswith("inductor:aten::") and r.flops > 0 for r in kernels)  # the projections' GEMMs
    report = interop.report().slot(SLOT)
    assert report.kernels == len(kernels) and report.kernel_s > 0
