"""Dropout on a slot draws from the slot's generator, as CUDA's draws from its device's (csrc/aten/HybridDropout.cpp,
interop/compile/slot_random.py). The reference: a slot seeded with s gives, bit for bit, what the CPU gives after
torch.manual_seed(s) for the same ops, forward and backward; slot dropout never moves the CPU's generator."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import interop

SLOT = "hybrid:5"

FORMS = {
    "dropout": lambda t: F.dropout(t, 0.3),  # aten::native_dropout on a slot (the fused path)
    "dropout_inplace": lambda t: F.dropout(t.clone(), 0.3, inplace=True),
    "dropout1d": lambda t: F.dropout1d(t.flatten(2), 0.3),
    "dropout2d": lambda t: F.dropout2d(t, 0.3),
    "dropout3d": lambda t: F.dropout3d(t.unsqueeze(0), 0.3),
    "alpha_dropout": lambda t: F.alpha_dropout(t, 0.3, True),
    "feature_alpha_dropout": lambda t: F.feature_alpha_dropout(t, 0.3, True),
    "rrelu": lambda t: F.rrelu(t, training=True),
    "attention_dropout": lambda t: F.scaled_dot_product_attention(t, t, t, dropout_p=0.3),
}


def _seeded_on_cpu(seed, fn, x):
    torch.manual_seed(seed)
    return fn(x)


def _seeded_on_slot(seed, fn, x, slot=SLOT):
    torch.hybrid.default_generator(slot).manual_seed(seed)
    with torch.hybrid.device(slot):
        return fn(x.to(slot))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_draws_the_cpu_masks_from_the_slot_generator(form):
    fn = FORMS[form]
    x = torch.randn(3, 4, 5, 6)
    reference = _seeded_on_cpu(11, fn, x)
    torch.manual_seed(0)
    cpu_state = torch.get_rng_state()
    got = _seeded_on_slot(11, fn, x)
    assert torch.equal(got.cpu(), reference)
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU's stream did not move
    assert torch.equal(_seeded_on_slot(11, fn, x).cpu(), reference)  # the seed fixes the masks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropout_forward_and_backward_equal_the_cpu(dtype, p):
    x = torch.randn(257, dtype=dtype)
    cpu_in, slot_in = x.clone().requires_grad_(), x.to(SLOT).requires_grad_()
    reference = _seeded_on_cpu(3, lambda t: F.dropout(t, p), cpu_in)
    got = _seeded_on_slot(3, lambda t: F.dropout(t, p), slot_in)
    assert torch.equal(got.detach().cpu(), reference.detach())
    weights = torch.randn(257, dtype=dtype)
    (reference * weights).sum().backward()
    (got * weights.to(SLOT)).sum().backward()
    if dtype == torch.bfloat16 and 0 < p < 1:
        # A slot's dropout is torch's fused one (native_dropout), as on CUDA: its backward scales the gradient
        # in float and rounds once, where the CPU's composite rounds the scaled mask to bfloat16 first. It
        # equals the CPU's own native_dropout_backward to the bit, and the composite's to one bfloat16 unit.
        torch.manual_seed(3)
        mask = torch.native_dropout(x, p, True)[1]
        cpu_fused = torch.ops.aten.native_dropout_backward(weights, mask, 1 / (1 - p))
        assert torch.equal(slot_in.grad.cpu(), cpu_fused)
        torch.testing.assert_close(slot_in.grad.cpu(), cpu_in.grad, rtol=2 ** -7, atol=0)  # 1 unit: 2^-7 at most
    else:
        assert torch.equal(slot_in.grad.cpu(), cpu_in.grad)


def test_native_dropout_equals_the_cpu_kernel_in_every_mode(fresh_timeline):
    x = torch.randn(6, 4).t()  # not contiguous: the mask follows the input's strides
    for train in (True, False, None):
        reference = _seeded_on_cpu(1, lambda t: torch.native_dropout(t, 0.4, train), x)
        got = _seeded_on_slot(1, lambda t: torch.native_dropout(t, 0.4, train), x)
        for r, g in zip(reference, got):
            assert g.device == torch.device(SLOT) and g.dtype == r.dtype and g.stride() == r.stride()
            assert torch.equal(g.cpu(), r)
    output, mask = torch.native_dropout(torch.empty(0, 3, device=SLOT), 0.5, True)
    assert output.shape == (0, 3) and output.device == torch.device(SLOT) and mask.shape == (0, 3)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.native_dropout(torch.arange(5, device=SLOT), 0.5, True)  # as the CPU refuses it
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\], but got p=-0.5"):
        torch.native_dropout(torch.ones(3, device=SLOT), 1.5, True)
    out0, out1 = torch.empty(0, device=SLOT), torch.empty(0, dtype=torch.bool, device=SLOT)
    torch.hybrid.default_generator(SLOT).manual_seed(2)
    torch.ops.aten.native_dropout.out(x.to(SLOT), 0.5, True, out0=out0, out1=out1)
    reference = _seeded_on_cpu(2, lambda t: torch.native_dropout(t, 0.5, True), x)
    assert torch.equal(out0.cpu(), reference[0]) and torch.equal(out1.cpu(), reference[1])
    # One record on the slot's timeline per dropout, as CUDA's fused kernel is one launch.
    ones = torch.ones(8, device=SLOT)
    interop.reset_timeline()
    F.dropout(ones, 0.5)
    assert [r.op for r in interop.timeline() if r.kind == "op"] == ["hybrid::native_dropout"]


def test_two_slots_draw_independently_whatever_runs_between():
    x = torch.randn(64)
    torch.hybrid.default_generator(1).manual_seed(21)
    torch.hybrid.default_generator(2).manual_seed(22)
    a1 = F.dropout(x.to("hybrid:1"), 0.5)
    b1 = F.dropout(x.to("hybrid:2"), 0.5)
    torch.rand(100)  # the CPU's generator moves: the slots' masks must not
    a2 = F.dropout(x.to("hybrid:1"), 0.5)
    b2 = F.dropout(x.to("hybrid:2"), 0.5)
    torch.manual_seed(21)
    ra1, ra2 = F.dropout(x, 0.5), F.dropout(x, 0.5)
    torch.manual_seed(22)
    rb1, rb2 = F.dropout(x, 0.5), F.dropout(x, 0.5)
    for got, reference in ((a1, ra1), (a2, ra2), (b1, rb1), (b2, rb2)):
        assert torch.equal(got.cpu(), reference)
    assert not torch.equal(ra1, rb1)


def _random_graph(x):
    return (F.dropout(x, 0.5), torch.bernoulli(x.sigmoid()), torch.rand_like(x) + torch.randn(x.shape, device=x.device),
            x.clone().bernoulli_(0.3), F.dropout1d(x.view(1, 4, -1), 0.5))


@pytest.mark.parametrize("fallback_random", [False, True])
def test_compiled_random_ops_draw_from_the_slot_generator(fallback_random):
    from torch._inductor import config

    x = torch.randn(64)
    with config.patch(fallback_random=fallback_random):
        torch._dynamo.reset()
        compiled = torch.compile(_random_graph)
        torch.manual_seed(8)
        reference = compiled(x) + compiled(x)  # two calls: the second's seeds follow the first's draws
        torch._dynamo.reset()
        compiled = torch.compile(_random_graph)
        torch.manual_seed(0)
        cpu_state = torch.get_rng_state()
        torch.hybrid.default_generator(2).manual_seed(8)
        xs = x.to("hybrid:2")
        got = compiled(xs) + compiled(xs)
    torch._dynamo.reset()
    assert all(torch.equal(g.cpu(), r) for g, r in zip(got, reference))
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_a_retired_racks_tensor_is_refused_by_name(use_rack):
    x = torch.randn(10, device="hybrid:6")
    use_rack("h100:2")
    with pytest.raises(RuntimeError, match=r"a tensor on hybrid:6 .* cannot be used while another rack is current.*"
                                           r"\(aten::native_dropout\)"):
        F.dropout(x, 0.5)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_activation_checkpointing_recomputes_the_forward_masks(reentrant):
    # torch.utils.checkpoint stashes a device's generator state for the recomputation only where the device module
    # says it is initialised (torch.hybrid._initialized); without it backward drew new masks and the gradients
    # were of another dropout than the forward's.
    def run(device):
        torch.manual_seed(0)
        linear = torch.nn.Linear(8, 8).to(device)
        torch.manual_seed(1)
        torch.hybrid.manual_seed_all(1)
        grads = []
        for _ in range(2):
            x = torch.ones(4, 8, device=device, requires_grad=reentrant)
            y = torch.utils.checkpoint.checkpoint(lambda t: F.dropout(linear(t), 0.25), x, use_reentrant=reentrant)
            y.sum().backward()
            grads.append(linear.weight.grad.cpu().clone())
            linear.weight.grad = None
        return grads

    for got, expected in zip(run(SLOT), run("cpu")):
        assert torch.equal(got, expected)
