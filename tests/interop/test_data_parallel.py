"""nn.DataParallel on hybrid slots (interop/data_parallel.py): replicas on every slot, the batch scattered, the
outputs gathered and the gradients summed between them; the result equals one module on the CPU, and each
replica's work is on its own slot's timeline."""

from __future__ import annotations

import pytest
import torch

import interop
from interop import data_parallel


def _train(module, x, y, steps=2):
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(module(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_data_parallel_over_slots_equals_one_module_on_the_cpu(use_rack, fresh_timeline):
    use_rack("h100:3")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    reference = [p.detach().clone() for p in model.parameters()]
    x, y = torch.randn(9, 6), torch.randn(9, 3)
    cpu_losses = _train(model, x, y)
    trained = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p, r in zip(model.parameters(), reference):
            p.copy_(r)
    wrapped = torch.nn.DataParallel(model.to("hybrid:0"))
    assert wrapped.device_ids == [0, 1, 2] and wrapped.src_device_obj == torch.device("hybrid", 0)
    interop.reset_timeline()
    losses = _train(wrapped, x.to("hybrid:0"), y.to("hybrid:0"))
    assert losses == pytest.approx(cpu_losses, rel=1e-6)
    for p, t in zip(model.parameters(), trained):
        assert p.device == torch.device("hybrid", 0)
        torch.testing.assert_close(p.detach().cpu(), t, rtol=1e-6, atol=1e-7)
    ops = {r.slot for r in interop.timeline() if r.kind == "op" and "addmm" in r.op}
    assert ops == {0, 1, 2}  # each replica's layers ran on its own slot
    assert any(r.kind == "copy" and r.peer in (1, 2) for r in interop.timeline())  # scatter/broadcast between slots


def test_the_communication_functions_check_what_they_are_given(use_rack):
    use_rack("h100:2")
    t = torch.arange(6.0, device="hybrid:0")
    assert [c.device.index for c in data_parallel.scatter(t, [0, 1])] == [0, 1]
    total = data_parallel.reduce_add([t, t.to("hybrid:1")], destination=1)
    assert total.device == torch.device("hybrid", 1) and torch.equal(total.cpu(), 2 * t.cpu())
    assert data_parallel.gather([t, t.to("hybrid:1")], 0, destination=-1).device.type == "cpu"
    with pytest.raises(ValueError, match="reduce_add: input 1 has shape"):
        data_parallel.reduce_add([t, t[:3]])
    with pytest.raises(RuntimeError, match="exactly one of 'devices' and 'out'"):
        data_parallel.broadcast(t)
    copies = data_parallel.broadcast_coalesced([t], [0, 1])
    assert copies[0][0] is t and copies[1][0].device == torch.device("hybrid", 1)


def test_each_replica_draws_its_dropout_masks_from_its_own_slot(use_rack):
    # As CUDA's replicas draw from their device's generator: replica i's masks are those the CPU draws for chunk
    # i after torch.manual_seed of slot i's seed, however the replica threads interleave; the CPU's generator
    # does not move.
    use_rack("h100:3")
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 3),
                                torch.nn.Dropout1d(0.5))
    x = torch.randn(9, 6)
    seeds = (31, 32, 33)
    expected = []
    for seed, chunk in zip(seeds, x.chunk(3)):
        torch.manual_seed(seed)
        # A fresh copy, as scatter hands each replica: the CPU's matmul rounds differently on a view that
        # starts at an unaligned offset.
        expected.append(model(chunk.clone()))
    wrapped = torch.nn.DataParallel(model.to("hybrid:0"))
    cpu_state = torch.get_rng_state()
    for _ in range(2):  # the same seeds, the same masks
        for slot, seed in enumerate(seeds):
            torch.hybrid.default_generator(slot).manual_seed(seed)
        got = wrapped(x.to("hybrid:0"))
        assert torch.equal(got.detach().cpu(), torch.cat(expected).detach())
    assert torch.equal(torch.get_rng_state(), cpu_state)
