"""Modelled time of the backend's collectives: priced on the rack with :func:`collectives.plan`
(algorithm chosen by lowest modelled time) and placed on this process's timeline.

Each process places the collective on its own timeline with every participant
slot listed, so each rank's trace shows the collective with its peers.  The
price depends only on the call's sizes and the group's slots: the rack's
topology and the plan come from the collective layer's caches
(``collectives.topology``, ``collectives.planner.cached_plan``), so a training
loop repeating the same buckets prices each once.
"""

from __future__ import annotations

import threading

from collectives import device_hooks as _device
from collectives.planner import CollectiveEstimate, cached_plan, topology

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
              slots: tuple[int, ...] | None = None):
        """Price the call and put it on the timeline of every listed slot; returns the record (or None)."""
        topo = self._topology()
        if topo is None:
            return None
        slots = self.slots if slots is None else tuple(slots)
        est = self._price(topo, model, count, itemsize, root, splits, slots)
        domains = sorted({topo.domain_name(s) for s in slots})
        with _lock:
            return hooks_or_none().place(model, list(slots), est.seconds, est.nbytes, est.algorithm, est.sources,
                                         f"collective {'+'.join(domains)}")

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
