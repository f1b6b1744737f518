"""The keys decode tokens see in a local-attention layer (sliding window or chunk), kept by the simulation as the
running sequences grow (:class:`LocalKeys`)."""

from __future__ import annotations

import heapq


class LocalKeys:
    """The keys the running sequences' decode tokens see in a local-attention layer, summed, kept as they grow.

    A sequence whose next token has ``k`` keys in a full layer (its cache and itself) has ``k`` less its cut in a
    local one: a ``chunked`` layer's whole chunks behind the token (a fixed cut, growing by the span at each chunk
    boundary), a ``sliding`` layer's keys before its window (none, then growing with the sequence). Each cut
    changes at a step known when the sequence joins: a heap of those steps keeps the sum exact at O(log n) per
    change.
    """

    def __init__(self, kind: str, span: int) -> None:
        if kind not in ("sliding", "chunked") or span < 1:
            raise ValueError(f"local: expected ('sliding' or 'chunked', span >= 1), got ({kind!r}, {span!r})")
        self.kind, self.span = kind, span
        self._cut: dict[int, tuple[bool, int]] = {}  # request -> (growing, fixed cut or offset)
        self._fixed = 0
        self._growing = 0
        self._offsets = 0
        self._events: list[tuple[int, int]] = []  # (step, request)

    def _set(self, req: int, growing: bool, value: int) -> None:
        old = self._cut.get(req)
        if old is not None:
            self._drop(old)
        self._cut[req] = (growing, value)
        if growing:
            self._growing += 1
            self._offsets += value
        else:
            self._fixed += value

    def _drop(self, state: tuple[bool, int]) -> None:
        growing, value = state
        if growing:
            self._growing -= 1
            self._offsets -= value
        else:
            self._fixed -= value

    def join(self, req: int, keys: int, step: int) -> None:
        """Request ``req`` joins at ``step``; its next token sees ``keys`` keys in a full layer."""
        span, cached = self.span, keys - 1
        if self.kind == "chunked":
            behind = cached - cached % span
            self._set(req, False, behind)
            heapq.heappush(self._events, (step + behind + span - cached, req))
        elif keys > span:
            self._set(req, True, keys - step - span)
        else:
            self._set(req, False, 0)
            heapq.heappush(self._events, (step + span + 1 - keys, req))

    def leave(self, req: int) -> None:
        state = self._cut.pop(req, None)
        if state is not None:
            self._drop(state)

    def cut(self, step: int) -> int:
        """The keys the running sequences' tokens at ``step`` do not see in a local layer, summed."""
        events = self._events
        while events and events[0][0] <= step:
            at, req = heapq.heappop(events)
            state = self._cut.get(req)
            if state is None:
                continue  # finished
            if self.kind == "chunked":
                self._set(req, False, state[1] + self.span)
                heapq.heappush(events, (at + self.span, req))
            else:
                # its key count reached span + 1 at this step: the cut grows from 1 with it
                self._set(req, True, 1 - at)
        return self._fixed + self._offsets + self._growing * step

    def cuts(self, first: int, last: int):
        """:meth:`cut` of each step from ``first`` to ``last`` in turn, as a numpy array (the state advanced as those
        calls advance it): between two steps where a cut changes, the sum grows by the growing cuts' count a step."""
        import numpy as np

        out = np.empty(last - first + 1, dtype=np.int64)
        step = first
        while step <= last:
            self.cut(step)  # the changes due by this step
            end = min(self._events[0][0] - 1, last) if self._events else last
            out[step - first:end - first + 1] = self._fixed + self._offsets + self._growing * np.arange(step, end + 1)
            step = end + 1
        return out


__all__ = ["LocalKeys"]
