"""Real-GPU backing: GPU-kind slots on real CUDA devices. Needs a GPU."""

from __future__ import annotations

import pytest
import torch

import interop

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device on this machine (torch.cuda.is_available() is False): real-GPU backing is checked "
    "only where a GPU exists",
)


@needs_cuda
@pytest.mark.cuda
def test_cuda_backed_slot_runs_cuda_kernels_on_the_same_memory(use_rack):
    use_rack("trn3:1+h100:1", backing="auto")
    rack = interop.current_rack()
    assert rack.devices[1].backing.startswith("cuda:")
    a = torch.randn(64, 64)
    h = a.to("hybrid:1")
    alias = interop._C._execution_alias(h)
    assert alias.is_cuda and alias.data_ptr() == h.data_ptr()
    y = (h @ h).relu()
    torch.testing.assert_close(y.cpu(), (a.cuda() @ a.cuda()).relu().cpu())
    assert torch.hybrid.memory_allocated(1) >= 2 * 64 * 64 * 4
    back = h.to("hybrid:0")  # GPU -> emulated Trainium slot
    assert torch.equal(back.cpu(), a)
    interop.reset_timeline()
    (h @ h).sum()
    ops = [r for r in interop.timeline() if r.kind == "op" and r.slot == 1]
    assert ops and all(r.measured_s is not None and r.measured_s > 0 for r in ops)  # CUDA-event times
    with torch.hybrid.device(1):
        e0, e1 = torch.hybrid.Event(enable_timing=True), torch.hybrid.Event(enable_timing=True)
        e0.record()
        h @ h
        e1.record()
        e1.synchronize()
    assert e0.elapsed_time(e1) > 0  # measured on the real device
    del h, y, back, alias
