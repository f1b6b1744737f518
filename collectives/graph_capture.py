"""A CUDA graph capture in progress: calls that run past the dispatcher are handed to it instead of running.

A GPU capturing a graph records kernels without running them; each replay runs them again on the memory the
capture saw. The rack's graphs (:mod:`interop.cuda_layer.graphs`, a layer above this one) record a block's ATen
ops with a dispatch mode, but two kinds of call never pass the dispatcher that mode watches: the collectives of
the hybrid group (a Python ``ProcessGroup`` torch calls directly) and a graph compiled by ``torch.compile`` on a
slot (Inductor's kernels). While a capture is under way it sets a recorder here, and those callers hand it
``(call, args, kwargs, outputs)``: the call to make at each replay and the outputs (allocated at capture) each
replay's results are written into. Every rank captures the same collectives in the same order, so the replays
meet as eager calls would. Imports nothing (no torch).
"""

from __future__ import annotations

from typing import Any, Callable

Recorder = Callable[[Callable[..., Any], tuple, dict, Any], None]

_recorder: Recorder | None = None


def set_recorder(recorder: Recorder | None) -> None:
    """Hand calls to ``recorder`` until it is set back to None (a capture's begin and end)."""
    global _recorder
    _recorder = recorder


def recorder() -> Recorder | None:
    """The capture's recorder, or None when no capture is under way."""
    return _recorder


def without_side_effects(tensors, run: Callable[[], Any]) -> Any:
    """``run()`` at capture, to allocate a call's outputs, with ``tensors`` (its inputs) restored afterwards: a GPU
    capture runs nothing, so a call that writes an input in place must not have written it once the capture ends
    (its values are the replays' to give)."""
    import contextlib

    import torch

    saved = [(t, t.clone()) for t in tensors if isinstance(t, torch.Tensor)]
    with contextlib.ExitStack() as versions:
        # Nothing happened to them, as far as autograd can tell: a version bump would make a selective activation
        # checkpoint that cached one of them refuse it ("Tensor cached during SAC has been mutated").
        for t, _ in saved:
            versions.enter_context(torch.autograd.grad_mode._unsafe_preserve_version_counter(t))
        try:
            return run()
        finally:
            with torch.no_grad():
                for t, before in saved:
                    t.copy_(before)
