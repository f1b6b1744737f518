"""Named ranges on the modelled timeline, torch.cuda.nvtx's API for the hybrid slots (``torch.hybrid.nvtx``).

A range is two timeline markers on the slot's current stream; its start and
end are the stream's modelled clock at push and pop, so a range spans exactly
the modelled time of the work issued inside it.  Ranges show in
:func:`interop.export_trace` as a track per slot and in :func:`ranges`.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from dataclasses import dataclass

from interop.hybrid._utils import slot_index


@dataclass(frozen=True, slots=True)
class NamedRange:
    """One closed range, in modelled time."""

    name: str
    slot: int
    stream: int
    depth: int
    """Nesting depth at push (0: outermost)."""
    start_ps: int
    end_ps: int

    @property
    def duration(self) -> float:
        """Modelled seconds."""
        return (self.end_ps - self.start_ps) / 1e12


@dataclass(slots=True)
class _Open:
    name: str
    slot: int
    stream: int
    marker: int
    rack: int
    """The generation of the rack whose timeline holds the markers."""


_lock = threading.Lock()
_closed: deque[tuple[str, int, int, int, int, int, int]] = deque()
"""name, slot, stream, depth, start marker, end marker, rack generation: the newest ranges, as many as a timeline
keeps records (:func:`interop.set_timeline_window`); an older one is forgotten with its markers."""
_stacks = threading.local()


def _stack() -> list[_Open]:
    stack = getattr(_stacks, "items", None)
    if stack is None:
        stack = _stacks.items = []
    return stack


def _marker(slot: int) -> tuple[int, int]:
    from interop import _C

    stream = _C._current_stream_id(slot)
    return stream, _C._record_marker(slot, stream)


def range_push(msg: str, device=None) -> int:
    """Open a range named ``msg`` on a slot (default: the current one); returns its depth (0 outermost)."""
    from interop import _C

    slot = slot_index(device)
    stream, marker = _marker(slot)
    stack = _stack()
    stack.append(_Open(str(msg), slot, stream, marker, _C._current_generation()))
    return len(stack) - 1


def range_pop() -> int:
    """Close the innermost open range of this thread; returns its depth, or -1 if none was open
    (torch.cuda.nvtx.range_pop's convention)."""
    stack = _stack()
    if not stack:
        return -1
    from interop import _C
    from interop.session import timeline_window

    top = stack.pop()
    _, end = _marker(top.slot)
    keep = timeline_window().records
    with _lock:
        _closed.append((top.name, top.slot, top.stream, len(stack), top.marker, end, top.rack))
        while keep is not None and len(_closed) > keep:
            *_, start, stop, rack = _closed.popleft()
            _C._release_marker(rack, start)
            _C._release_marker(rack, stop)
    return len(stack)


def mark(msg: str, device=None) -> None:
    """An instantaneous range (zero modelled duration) named ``msg``."""
    range_push(msg, device)
    range_pop()


@contextlib.contextmanager
def range(msg: str, *args, **kwargs):  # noqa: A001  (torch.cuda.nvtx.range's name)
    """Context manager: a range named ``msg.format(*args, **kwargs)`` around the block."""
    range_push(msg.format(*args, **kwargs) if args or kwargs else msg)
    try:
        yield
    finally:
        range_pop()


def ranges(timeline=None) -> list[NamedRange]:
    """Every closed range of a timeline (default: the current rack's), resolved to modelled times, in
    push order.

    A range's markers are placed on the timeline of the rack that was current when it was pushed and
    popped; ranges of other timelines (another rack's, or one discarded by ``interop.reset_timeline``)
    are left out.
    """
    from interop import session

    if timeline is None:
        timeline = session.current_timeline()
    else:
        timeline.ingest()
    with _lock:
        closed = list(_closed)
    out = []
    for name, slot, stream, depth, start, end, _ in closed:
        a, b = timeline.markers.get(start), timeline.markers.get(end)
        if a is None or b is None:
            continue
        out.append(NamedRange(name, slot, stream, depth, a[2], max(a[2], b[2])))
    return out


def clear() -> None:
    """Forget every closed range (open ones stay open)."""
    from interop import _C

    with _lock:
        for *_, start, stop, rack in _closed:
            _C._release_marker(rack, start)
            _C._release_marker(rack, stop)
        _closed.clear()


__all__ = ["NamedRange", "clear", "mark", "range", "range_pop", "range_push", "ranges"]
