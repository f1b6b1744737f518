"""Modelled time of the backend's collectives: priced on the rack with :func:`collectives.plan`
(algorithm chosen by lowest modelled time) and placed on this process's timeline.

Each process places the collective on its own timeline with every participant
slot listed, so each rank's trace shows the collective with its peers.  The
price depends only on the call's sizes and the group's slots, so it is cached
(a training loop repeats the same bucket sizes every step).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from collectives import device_hooks as _device
from collectives.planner import CollectiveEstimate, plan
from collectives.topology import Topology

_CACHE_SIZE = 512
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
        self._rack = None
        self._topology: Topology | None = None
        self._cache: OrderedDict = OrderedDict()

    def _topo(self, rack) -> Topology:
        if rack is not self._rack:
            # A new rack (interop.set_rack) invalidates every price.
            self._rack, self._topology = rack, Topology.from_rack(rack.spec)
            self._cache.clear()
        return self._topology

    def estimate(self, model: str, count: int, itemsize: int, *, root: int = 0, splits=None,
                 slots: tuple[int, ...] | None = None) -> CollectiveEstimate | None:
        """The modelled estimate of one call on the current rack (None without a rack)."""
        h = hooks_or_none()
        if h is None:
            return None
        rack = h.rack()
        if rack is None:
            return None
        slots = self.slots if slots is None else slots
        key = (model, count, itemsize, slots, root, splits)
        with _lock:
            topo = self._topo(rack)
            est = self._cache.get(key)
            if est is None:
                est = plan(topo, model, count, itemsize, list(slots), None, root=root, splits=splits,
                           build=False).estimate
                self._cache[key] = est
                if len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
        return est

    def place(self, model: str, count: int, itemsize: int, *, root: int = 0, splits=None,
              slots: tuple[int, ...] | None = None):
        """Price the call and put it on the timeline of every listed slot; returns the record (or None)."""
        slots = self.slots if slots is None else slots
        est = self.estimate(model, count, itemsize, root=root, splits=splits, slots=slots)
        if est is None:
            return None
        h = hooks_or_none()
        topo = self._topology
        domains = sorted({topo.domain_of(s)[1].name for s in slots})
        with _lock:
            return h.place(model, list(slots), est.seconds, est.nbytes, est.algorithm, est.sources,
                           f"collective {'+'.join(domains)}")
