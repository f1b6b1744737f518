"""A CUDA graph capture in progress defers the hybrid group's collectives to the graph's replays.

A GPU capturing a graph records NCCL's kernels without running them; each replay runs them again on the
memory the capture saw. The rack's graphs (:mod:`interop.cuda_layer.graphs`, a layer above this one) record a
block's ATen ops the same way, but the hybrid group is a Python ``ProcessGroup`` whose collectives torch calls
directly, past the dispatcher a capture watches. So the capture registers a recorder here: while one is set,
each collective issued in this process is handed to it as a call to make at replay, and returns a completed
work at once (nothing is exchanged, moved or placed during the capture, as nothing runs on a capturing
stream). Every rank captures the same sequence of collectives, so the replays meet as eager calls would.
"""

from __future__ import annotations

from typing import Callable

Recorder = Callable[[Callable[[], None]], None]

_recorder: Recorder | None = None


def set_recorder(recorder: Recorder | None) -> None:
    """Defer collectives to ``recorder`` (called with the replay's call) until it is set back to None."""
    global _recorder
    _recorder = recorder


def recorder() -> Recorder | None:
    """The capture's recorder, or None when no capture is under way."""
    return _recorder
