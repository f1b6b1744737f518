"""Runs of decode iterations where only the cache grows, taken without the event loop's round trip.

While no sequence of an instance finishes, joins or arrives, and no other instance's event comes first, each of
its iterations decodes the same batch over a cache grown by one token a sequence: :class:`DecodeRuns` (a part of
:class:`planner.serving.simulation.Simulation`) runs them in a loop of their own, each the iteration the event loop
would run, at the same time and the same price, bit for bit. A lone instance that nothing can interrupt prices its
run at once with its cost's ``decode_pricer`` (:meth:`planner.serving.iteration.FusedCost.decode_pricer`); any
other run goes an iteration at a time with the cost call the loop makes.
"""

from __future__ import annotations

import heapq


class DecodeRuns:
    """The decode runs of :class:`planner.serving.simulation.Simulation` (see the module doc)."""

    __slots__ = ()

    def _decode_run(self, inst, index: int, t: float, seconds: float, batch: int,
                    name: str) -> tuple[float, float]:
        """The decode iterations that follow the one started at ``t`` (lasting ``seconds``) while only the cache
        grows (see the module doc); returns the (start, seconds) of the last, whose end the event loop then
        takes."""
        if not inst.finish_heap:
            return t, seconds
        last = inst.finish_heap[0][0]  # the step whose iteration's end finishes a sequence
        first = inst.step
        if first >= last:
            return t, seconds
        r, heap, waiting, instances, inf = self.r, self._heap, self._waiting, self.instances, float("inf")
        # what may enter at a later start: a request arriving to an empty queue (colocated; a queued one is held
        # by the KV cache or the batch limit, as it was at this start), or a sequence whose KV cache arrives
        # (decode) where it fits
        if inst.role == "decode":
            head = inst.pending[0] if inst.pending else None
            blocked = head is None or len(inst.running) >= inst.max_batch or (
                inst.kv_used + inst.need(head[1]) > inst.capacity)
            enters = inf if blocked else head[0]
        else:
            queued = waiting or self._next >= self._issued
            enters = inf if queued else r.arrival[self._next]
        pricer = getattr(inst.costs, "decode_pricer", None)
        if pricer is not None and enters == inf and len(instances) == 1:
            t, seconds = self._priced_run(inst, t, seconds, batch, pricer(batch), last, name)
        else:
            t, seconds = self._stepped_run(inst, index, t, seconds, batch, last, enters, name)
        self._batch_sum += batch * (inst.step - first)
        self._batch_steps += inst.step - first
        return t, seconds

    def _priced_run(self, inst, t: float, seconds: float, batch: int, prices, last: int,
                    name: str) -> tuple[float, float]:
        """:meth:`_decode_run` of a lone instance that nothing can interrupt: every iteration up to step ``last``'s
        (the one that finishes a sequence), priced at once."""
        import numpy as np

        steps = np.arange(inst.step + 1, last + 1, dtype=np.int64)
        kvs = inst.acc + batch * steps  # decode_keys of each step
        local = None if inst.local is None else kvs - inst.local.cuts(inst.step + 1, last)
        record = self.record
        for next_seconds in prices(kvs, local):
            t += seconds
            seconds = next_seconds
            if record:
                self._event(inst.name, name, t, seconds)
        inst.step = last
        self._arrive_until(t)  # queued behind a held request
        return t, seconds

    def _stepped_run(self, inst, index: int, t: float, seconds: float, batch: int, last: int,
                     enters: float, name: str) -> tuple[float, float]:
        """:meth:`_decode_run` an iteration at a time, until step ``last``'s, a start at ``enters`` or later, or
        another instance's event before the next start; each priced by the call the event loop makes."""
        r, heap, instances, inf = self.r, self._heap, self.instances, float("inf")
        costs, decode, record = inst.costs, inst.role == "decode", self.record
        wake = heap[0][0] if heap else inf
        arriving = r.arrival[self._next] if self._next < self._issued else inf
        while inst.step < last:
            start = t + seconds
            if start >= enters:
                break
            if start >= wake:
                while heap and heap[0][0] <= start:
                    at, _, i = heap[0]
                    if i != index and at >= instances[i].free_at:
                        break  # another instance's event comes first
                    # a wake the loop would skip (this instance's at ``start`` it would take as this start)
                    heapq.heappop(heap)
                wake = heap[0][0] if heap else inf
                if start >= wake:
                    break
            if start >= arriving:  # queued behind a held request
                self._arrive_until(start)
                arriving = r.arrival[self._next] if self._next < self._issued else inf
            inst.step += 1
            t = start
            kv, local = inst.decode_keys(batch)
            if decode:
                seconds = 0.0 + costs.decode(batch, kv, self._padded(inst), **local)
            else:
                seconds = costs.mixed([], batch, kv, batch, **local)
            if record:
                self._event(inst.name, name, t, seconds)
        return t, seconds


__all__ = ["DecodeRuns"]
