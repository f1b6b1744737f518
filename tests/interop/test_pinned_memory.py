"""Pinned host memory: pin_memory(), empty(pin_memory=True) and DataLoader(pin_memory=True) give pinned tensors,
and the modelled timeline tells an asynchronous DMA (non_blocking from pinned memory) from a synchronous copy."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import interop


def _copies():
    return [r for r in interop.timeline() if r.kind == "copy"]


def test_pinning_gives_pinned_tensors_and_counts_their_bytes():
    before = interop._C._pinned_stats()["live_bytes"]
    x = torch.arange(1000, dtype=torch.float32)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned() and torch.equal(p, x)
    assert p[10:].is_pinned()  # a view into pinned memory is pinned
    e = torch.empty(256, dtype=torch.uint8, pin_memory=True)
    assert e.is_pinned()
    assert interop._C._pinned_stats()["live_bytes"] - before == 4000 + 256
    del p, e
    assert interop._C._pinned_stats()["live_bytes"] == before


def test_dataloader_pins_batches():
    loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.arange(8)), batch_size=4, pin_memory=True)
    batches = list(loader)
    assert all(t.is_pinned() for batch in batches for t in batch)
    torch.testing.assert_close(torch.cat([b[1] for b in batches]), torch.arange(8))


def test_non_blocking_from_pinned_is_an_async_dma_and_pageable_is_synchronous(use_rack):
    use_rack("h100:1")
    n = 1 << 18
    host = torch.randn(n)
    pinned = host.pin_memory()
    side = torch.hybrid.Stream(0)
    interop.reset_timeline()
    with torch.hybrid.stream(side):
        a = pinned.to("hybrid:0", non_blocking=True)  # async DMA on the side stream
    y = torch.ones(64, 64, device="hybrid:0") @ torch.ones(64, 64, device="hybrid:0")  # default stream
    copies = _copies()
    assert [c.asynchronous for c in copies] == [True]
    op = next(r for r in interop.timeline() if r.op.startswith("aten::mm"))
    assert op.start_ps < copies[0].end_ps  # the matmul overlaps the DMA
    interop.reset_timeline()
    b = host.to("hybrid:0", non_blocking=True)  # pageable: synchronous, the host waits
    z = torch.ones(64, 64, device="hybrid:0") @ torch.ones(64, 64, device="hybrid:0")
    copies = _copies()
    assert [c.asynchronous for c in copies] == [False]
    op = next(r for r in interop.timeline() if r.op.startswith("aten::mm"))
    assert op.start_ps >= copies[0].end_ps
    torch.testing.assert_close(a.cpu(), host, rtol=0, atol=0)
    torch.testing.assert_close(b.cpu(), host, rtol=0, atol=0)
    interop.reset_timeline()
    back = torch.empty(n, pin_memory=True)
    back.copy_(a, non_blocking=True)  # device to pinned host: async too
    assert [c.asynchronous for c in _copies()] == [True]
    torch.hybrid.synchronize(0)
    torch.testing.assert_close(back, host, rtol=0, atol=0)
    del a, b, y, z
