"""Torus all_reduce: rings along one dimension after another, on every link at once.

A single ring over a torus uses one of each chip's 2 x dims links.  Here the
data is cut into channels; channel (r, +/-) runs reduce_scatter along the
torus dimensions in rotated order r (dims r, r+1, ...), each a ring of
neighbours going the +/- way round, then all_gather back in reverse order.
In any phase the channels use distinct dimensions or directions, so every
directed link carries one channel: a 4x4 Trn2 torus moves four times what one
ring would.  Per channel, with d the dimension size (all equal) and n_c its share:

    sum over phases j of 2 (d - 1)(a + n_c / d^(j+1) b) + the reduce term

Dimensions of size 2 have one link per chip, so only the + direction is used.
``spec.torus`` gives the shape; rank i sits at row-major coordinate i.
"""

from __future__ import annotations

import math
from dataclasses import replace

from collectives.algorithms.base import Algorithm, ceil_div
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, make, split
from collectives.topology import Placement, Topology


def channels(shape: tuple[int, ...]) -> list[tuple[list[int], int]]:
    """(dimension order, direction) of every channel for a torus of ``shape``."""
    dims = [j for j, d in enumerate(shape) if d > 1]
    directions = (1, -1) if dims and min(shape[j] for j in dims) > 2 else (1,)
    return [(dims[r:] + dims[:r], sign) for r in range(len(dims)) for sign in directions] or [([], 1)]


class Torus(Algorithm):
    """Multi-channel dimension-wise rings on a torus (see the module docstring)."""

    name = "torus"
    ops = frozenset({"all_reduce"})
    latency_class = "ring"

    def unsupported(self, spec: CollectiveSpec, placement: Placement | None = None) -> str | None:
        reason = super().unsupported(spec, placement)
        if reason is None and spec.participants > 1:
            if placement is not None and placement.torus is None:
                reason = "torus needs the participants to be exactly one torus domain, in slot order"
            elif placement is None and spec.torus is None:
                reason = "torus needs spec.torus (the torus shape)"
        return reason

    def bind(self, spec: CollectiveSpec, topo: Topology, slots, placement: Placement, *, schedule: bool) -> CollectiveSpec:
        """The torus shape the participants form (``placement.torus``), for the schedule and the closed form alike."""
        return spec if placement.torus is None else replace(spec, torus=placement.torus)

    def _build(self, spec: CollectiveSpec) -> Schedule:
        shape = spec.torus
        strides = [math.prod(shape[j + 1:]) for j in range(len(shape))]
        chans = channels(shape)
        rd = Rounds()
        for (order, sign), (off, n) in zip(chans, split(spec.count, len(chans))):
            region = [(off, n)] * spec.participants
            stack = []
            t = 0
            first = True
            for q in order:  # reduce_scatter along dimension q
                d, stride = shape[q], strides[q]
                stack.append(region)
                new = list(region)
                for s in range(d - 1):
                    for x in range(spec.participants):
                        c = (x // stride) % d
                        pos = c if sign > 0 else (-c) % d
                        nxt = x + (((c + sign) % d) - c) * stride
                        ro, rn = region[x]
                        co, cn = split(rn, d)[(pos - s) % d]
                        rd.send(t + s, x, nxt, "in" if first and s == 0 else "out", ro + co, "out", ro + co, cn,
                                reduce=True, acc_buf="in" if first else None, acc_off=ro + co)
                for x in range(spec.participants):
                    c = (x // stride) % d
                    pos = c if sign > 0 else (-c) % d
                    ro, rn = region[x]
                    co, cn = split(rn, d)[(pos + 1) % d]
                    new[x] = (ro + co, cn)
                region, t, first = new, t + d - 1, False
            for q in reversed(order):  # all_gather back along dimension q
                d, stride = shape[q], strides[q]
                parent = stack.pop()
                for s in range(d - 1):
                    for x in range(spec.participants):
                        c = (x // stride) % d
                        pos = c if sign > 0 else (-c) % d
                        nxt = x + (((c + sign) % d) - c) * stride
                        ro, rn = parent[x]
                        co, cn = split(rn, d)[(pos + 1 - s) % d]
                        rd.send(t + s, x, nxt, "out", ro + co, "out", ro + co, cn)
                region, t = parent, t + d - 1
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab = levels.neighbour or levels.flat
        shape = spec.torus or (spec.participants,)
        chans = channels(shape)
        w = spec.itemsize
        # Channels run side by side on disjoint links, so a round lasts as long as its biggest
        # chunk; but a chip reduces what every channel delivers to it in that round.
        timeline: list[list[tuple[bool, int, tuple[int, int]]]] = []
        for order, sign in chans:
            data, steps = ceil_div(spec.count, len(chans)), []
            for q in order:
                data = ceil_div(data, shape[q])
                steps.append((q, data))
            rounds = [(True, x, (q, sign)) for q, x in steps for _ in range(shape[q] - 1)]
            rounds += [(False, x, (q, sign)) for q, x in reversed(steps) for _ in range(shape[q] - 1)]
            for r, item in enumerate(rounds):
                while len(timeline) <= r:
                    timeline.append([])
                timeline[r].append(item)
        total = 0.0
        for items in timeline:
            # On a torus that is not a cube the channels drift out of step and may meet on a link.
            load: dict[tuple[int, int], int] = {}
            for _, x, link in items:
                load[link] = load.get(link, 0) + x
            reduced = sum(x for red, x, _ in items if red) * w
            total += max(ab.round(load[link] * w, reduced if red else 0.0) for red, x, link in items)
        return total

    def transfers(self, spec: CollectiveSpec) -> int:
        shape = spec.torus or (spec.participants,)
        return 2 * spec.participants * sum(shape) * 2 * len(shape)


ALGORITHM = Torus()
