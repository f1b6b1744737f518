"""Whole models: forward + backward + optimizer steps on a slot give the CPU's
parameters exactly (the slot runs the CPU kernels on the same bytes)."""

from __future__ import annotations

import copy

import pytest
import torch

from interop.models import GPT, GPTConfig, SmallCNN, token_batch


def train(model, batches, device, make_opt, loss_fn):
    model = model.to(device)
    opt = make_opt(model.parameters())
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()], loss.item()


@pytest.mark.parametrize("slot", [0, 5])
def test_gpt_three_steps_equal_cpu(slot):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=128, seq_len=32, dim=64, heads=4, layers=2)
    model = GPT(cfg)
    batches = [token_batch(cfg, 3, seed=s) for s in range(3)]

    def loss_fn(logits, y):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    def make_opt(params):
        return torch.optim.AdamW(params, lr=1e-3, foreach=True)

    cpu_params, cpu_loss = train(copy.deepcopy(model), batches, "cpu", make_opt, loss_fn)
    hyb_params, hyb_loss = train(copy.deepcopy(model), batches, f"hybrid:{slot}", make_opt, loss_fn)
    assert hyb_loss == cpu_loss
    for a, b in zip(cpu_params, hyb_params):
        assert torch.equal(a, b)


def test_cnn_three_steps_equal_cpu():
    torch.manual_seed(1)
    model = SmallCNN()
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(3)]

    def make_opt(params):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=True)

    cpu_params, cpu_loss = train(copy.deepcopy(model), batches, "cpu", make_opt, torch.nn.functional.cross_entropy)
    hyb_params, hyb_loss = train(copy.deepcopy(model), batches, "hybrid:2", make_opt, torch.nn.functional.cross_entropy)
    assert hyb_loss == cpu_loss
    for a, b in zip(cpu_params, hyb_params):
        assert torch.equal(a, b)


def test_default_optimizer_implementations_are_close_to_cpu():
    # With torch's defaults the accelerator takes the foreach path and the CPU
    # the per-tensor loop; they round differently, within float32 noise.
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, seq_len=16, dim=32, heads=2, layers=1)
    model = GPT(cfg)
    batches = [token_batch(cfg, 2, seed=s) for s in range(3)]

    def loss_fn(logits, y):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    cpu_params, _ = train(copy.deepcopy(model), batches, "cpu", lambda p: torch.optim.AdamW(p, lr=1e-3), loss_fn)
    hyb_params, _ = train(copy.deepcopy(model), batches, "hybrid:1", lambda p: torch.optim.AdamW(p, lr=1e-3), loss_fn)
    for a, b in zip(cpu_params, hyb_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
