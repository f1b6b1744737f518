"""Per-slot generators: same seed, same numbers as the CPU."""

from __future__ import annotations

import torch


def test_torch_manual_seed_reaches_every_slot():
    torch.manual_seed(123)
    cpu = torch.randn(100)
    torch.manual_seed(123)
    for slot in (0, 4, 7):
        torch.manual_seed(123)
        assert torch.equal(torch.randn(100, device=f"hybrid:{slot}").cpu(), cpu)


def test_slot_generators_are_independent():
    torch.hybrid.manual_seed_all(7)
    a = torch.rand(10, device="hybrid:1")
    b = torch.rand(10, device="hybrid:2")
    assert torch.equal(a.cpu(), b.cpu())  # same seed, separate streams
    c = torch.rand(10, device="hybrid:1")
    assert not torch.equal(a.cpu(), c.cpu())


def test_in_place_random_ops_and_dropout_follow_the_slot_generator():
    torch.manual_seed(5)
    ref = torch.empty(50).uniform_(-1, 1), torch.empty(50).normal_(), torch.empty(50).bernoulli_(0.3)
    torch.manual_seed(5)
    got = (torch.empty(50, device="hybrid:3").uniform_(-1, 1), torch.empty(50, device="hybrid:3").normal_(),
           torch.empty(50, device="hybrid:3").bernoulli_(0.3))
    for r, g in zip(ref, got):
        assert torch.equal(r, g.cpu())


def test_rng_state_round_trip():
    torch.hybrid.manual_seed(11)
    state = torch.hybrid.get_rng_state(0)
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.randn(8, device="hybrid:0")
    torch.hybrid.set_rng_state(state, 0)
    again = torch.randn(8, device="hybrid:0")
    assert torch.equal(first.cpu(), again.cpu())
    assert torch.hybrid.initial_seed() == 11


def test_explicit_generators():
    g = torch.Generator(device="hybrid:2").manual_seed(99)
    x = torch.randn(6, device="hybrid:2", generator=g)
    cpu = torch.randn(6, generator=torch.Generator().manual_seed(99))
    assert g.device == torch.device("hybrid:2")
    assert torch.equal(x.cpu(), cpu)
    # A CPU generator may drive an emulated slot's kernel too.
    y = torch.randn(6, device="hybrid:2", generator=torch.Generator().manual_seed(99))
    assert torch.equal(y.cpu(), cpu)
