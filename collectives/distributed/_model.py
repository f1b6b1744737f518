"""Modelled time of the backend's collectives: priced on the rack with :func:`collectives.plan`
(algorithm chosen by lowest modelled time) and placed on this process's timeline.

Each process places the collective on its own timeline with every participant
slot listed, so each rank's trace shows the collective with its peers.  The
price depends only on the call's sizes and the group's slots: the rack's
topology and the plan come from the collective layer's caches
(``collectives.topology``, ``collectives.algorithm_choice.cached_plan``), so a training
loop repeating the same buckets prices each once.

One modelled clock across processes: every rank runs its own slot, so a
collective carries each participant's clock (its current stream's, when it
issues the call) with the call, and every rank places it at the latest of them:
it starts when its last participant is ready, at the same modelled instant on
every rank.  A point-to-point transfer starts when the sender's data is ready
and the link from it to the receiver is free (the sender's header carries that
start); it occupies neither end's compute stream, and the receiver's stream
waits for its arrival when the receive is waited on (as a CUDA stream waits on
an NCCL work).  The in-process runner's copies are placed by the same rule.
"""

from __future__ import annotations

import threading

from collectives import device_hooks as _device
from collectives.algorithm_choice import CollectiveEstimate, cached_plan, topology

_lock = threading.Lock()


def hooks_or_none():
    """The device layer's hooks, or None when ``interop`` was never imported (CPU tensors only)."""
    try:
        return _device.hooks()
    except RuntimeError:
        return None


class Modeller:
    """Prices and places the collectives of one process group (``slots``: group rank -> rack slot)."""

    def __init__(self, slots: tuple[int, ...]):
        self.slots = tuple(slots)

    def estimate(self, model: str, count: int, itemsize: int, *, root: int = 0, splits=None,
                 slots: tuple[int, ...] | None = None) -> CollectiveEstimate | None:
        """The modelled estimate of one call on the current rack (None without a rack)."""
        topo = self._topology()
        if topo is None:
            return None
        return self._price(topo, model, count, itemsize, root, splits, self.slots if slots is None else slots)

    def place(self, model: str, count: int, itemsize: int, *, root: int = 0, splits=None,
              slots: tuple[int, ...] | None = None, ready_ps: int = 0):
        """Price the call and put it on the timeline of every listed slot, starting no earlier than
        ``ready_ps`` (the latest participant's clock); returns the record (or None)."""
        topo = self._topology()
        if topo is None:
            return None
        slots = self.slots if slots is None else tuple(slots)
        est = self._price(topo, model, count, itemsize, root, splits, slots)
        with _lock:
            return hooks_or_none().place(model, list(slots), est.seconds, est.nbytes, est.algorithm, est.sources,
                                         self._link(topo, slots), ready_ps=max(0, int(ready_ps)))

    def place_transfer(self, count: int, itemsize: int, src: int, dst: int, start_ps: int, *,
                       wait: int | None = None):
        """Price a send_recv from slot ``src`` to ``dst`` and place it at ``start_ps`` or later (the link's
        previous transfer must have ended); ``wait``: the slot whose stream waits for the arrival. Returns the
        record (its ``start_ps`` is the start both ends use), or None without a rack."""
        topo = self._topology()
        if topo is None:
            return None
        slots = (src, dst)
        est = self._price(topo, "send_recv", count, itemsize, 0, None, slots)
        with _lock:
            return hooks_or_none().place_transfer("send_recv", src, dst, max(0, int(start_ps)), est.seconds,
                                                  est.nbytes, est.algorithm, est.sources, self._link(topo, slots),
                                                  wait=wait)

    @staticmethod
    def clock(slot: int) -> int:
        """This process's modelled clock of ``slot``'s current stream (picoseconds); -1 without a rack."""
        h = hooks_or_none()
        if h is None or h.rack() is None or h.clock is None:
            return -1
        return int(h.clock(slot))

    @staticmethod
    def _link(topo, slots) -> str:
        return f"collective {'+'.join(sorted({topo.domain_name(s) for s in slots}))}"

    @staticmethod
    def _topology():
        h = hooks_or_none()
        rack = h.rack() if h is not None else None
        # A new rack (interop.set_rack) has a new spec, hence a new topology and new plans.
        return None if rack is None else topology(rack.spec)

    @staticmethod
    def _price(topo, model, count, itemsize, root, splits, slots) -> CollectiveEstimate:
        return cached_plan(topo, model, count, itemsize, tuple(slots), root=root, splits=splits,
                           build=False).estimate
