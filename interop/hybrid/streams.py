"""Streams and events of the hybrid slots.

Work on an emulated slot executes in order on the host, so streams never
reorder computation; they order the modelled timeline. An event's time is the
modelled clock of its stream, and :meth:`Event.elapsed_time` returns modelled
milliseconds.
"""

from __future__ import annotations

import contextlib

import torch

from interop.hybrid._utils import DEVICE_TYPE, slot_index


class Stream(torch.Stream):
    """A stream on a hybrid slot (``torch.hybrid.Stream(device=2)``)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        index = slot_index(device)
        return super().__new__(cls, device=torch.device(DEVICE_TYPE, index), priority=priority, **kwargs)


class Event(torch.Event):
    """An event on a hybrid slot. On an emulated slot its time is the modelled
    clock of the stream it was recorded on, so ``elapsed_time`` returns modelled
    milliseconds; on a cuda-backed slot it is a real CUDA event (measured)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device=torch.device(DEVICE_TYPE), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def record(self, stream: torch.Stream | None = None) -> None:
        """Record on ``stream`` (default: the current slot's current stream)."""
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Make ``stream`` wait for this event (its modelled clock jumps to the event's time if later)."""
        super().wait(current_stream() if stream is None else stream)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event to ``end_event``: modelled on emulated slots, measured on real GPUs."""
        from interop import _C

        if self.event_id == 0 or end_event.event_id == 0:
            raise RuntimeError("both events must be recorded before elapsed_time can be computed")
        return _C._event_elapsed_ms(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        return f"torch.hybrid.Event(device={self.device}, event_id={self.event_id})"


def current_stream(device=None) -> torch.Stream:
    """The current stream of a slot (default stream unless changed)."""
    from interop import _C

    index = slot_index(device)
    return torch.Stream(stream_id=_C._current_stream_id(index), device_index=index, device_type=_device_type_id())


def default_stream(device=None) -> torch.Stream:
    """The default stream (id 0) of a slot."""
    index = slot_index(device)
    return torch.Stream(stream_id=0, device_index=index, device_type=_device_type_id())


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its slot."""
    from interop import _C

    if stream.device.type != DEVICE_TYPE:
        raise ValueError(f"expected a hybrid stream, got one on {stream.device}")
    _C._set_stream(stream.device.index, stream.stream_id)


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    """Context manager that makes ``s`` current on its slot (None: no change)."""
    if s is None:
        yield
        return
    previous = current_stream(s.device.index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(previous)


def _device_type_id() -> int:
    # torch.Stream's low-level constructor takes the DeviceType enum value;
    # PrivateUse1 is fixed in c10/core/DeviceType.h.
    return 20
