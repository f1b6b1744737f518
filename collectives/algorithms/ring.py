"""Ring: every rank sends to the next, p-1 steps per phase (NCCL's ring).

* reduce_scatter: the data in p chunks circulates p-1 steps, each rank adding
  its share, so rank i ends with block i reduced: (p-1) a + (p-1)/p n (b + g).
* all_gather: each rank's block travels p-1 steps: (p-1) a + (p-1)/p n b.
* all_reduce: reduce_scatter then all_gather on p chunks of the buffer:
  2 (p-1) a + 2 (p-1)/p n b + (p-1)/p n g.
* broadcast / reduce: a chain from (to) the root, pipelined in k chunks:
  (k + p - 2)(a + n/k b [+ n/k g]).

Rank i's successor is i+1 mod p; participants are ordered by the caller.
"""

from __future__ import annotations

from collectives.algorithms.base import Algorithm, ceil_div, pipeline_profile
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, make, split


class Ring(Algorithm):
    """The ring algorithm (see the module docstring)."""

    name = "ring"
    ops = frozenset({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"})
    pipelined = frozenset({"broadcast", "reduce"})
    latency_class = "ring"

    def _build(self, spec: CollectiveSpec) -> Schedule:
        return getattr(self, f"_{spec.op}")(spec)

    def _all_reduce(self, spec: CollectiveSpec) -> Schedule:
        p = spec.participants
        chunks = split(spec.count, p)
        r = Rounds()
        # Reduce-scatter: at step s rank i passes chunk i-s on; rank j ends with chunk j+1 complete.
        for s in range(p - 1):
            for i in range(p):
                off, n = chunks[(i - s) % p]
                r.send(s, i, (i + 1) % p, "in" if s == 0 else "out", off, "out", off, n,
                       reduce=True, acc_buf="in", acc_off=off)
        # All-gather: rank i starts by passing on the chunk it completed.
        for s in range(p - 1):
            for i in range(p):
                off, n = chunks[(i + 1 - s) % p]
                r.send(p - 1 + s, i, (i + 1) % p, "out", off, "out", off, n)
        return make(spec, self.name, r, latency_class=self.latency_class)

    def _reduce_scatter(self, spec: CollectiveSpec) -> Schedule:
        p, c = spec.participants, spec.count
        r = Rounds()
        for s in range(p - 1):
            last = s == p - 2
            for i in range(p):
                b = (i - s - 1) % p  # the block rank i forwards; rank j receives block j at the last step
                r.send(s, i, (i + 1) % p, "in" if s == 0 else "tmp", b * c,
                       "out" if last else "tmp", 0 if last else b * c, c, reduce=True, acc_buf="in", acc_off=b * c)
        return make(spec, self.name, r, {"tmp": [c * p] * p}, self.latency_class)

    def _all_gather(self, spec: CollectiveSpec) -> Schedule:
        p, c = spec.participants, spec.count
        r = Rounds()
        for i in range(p):
            r.send(0, i, i, "in", 0, "out", i * c, c)
        for s in range(p - 1):
            for i in range(p):
                b = (i - s) % p
                r.send(s, i, (i + 1) % p, "in" if s == 0 else "out", 0 if s == 0 else b * c, "out", b * c, c)
        return make(spec, self.name, r, latency_class=self.latency_class)

    def _broadcast(self, spec: CollectiveSpec) -> Schedule:
        p, root = spec.participants, spec.root
        chain = [(root + j) % p for j in range(p)]
        chunks = split(spec.count, spec.pipeline)
        r = Rounds()
        r.send(0, root, root, "in", 0, "out", 0, spec.count)
        for t in range(spec.pipeline + p - 2):
            for j in range(p - 1):
                x = t - j
                if 0 <= x < spec.pipeline:
                    off, n = chunks[x]
                    r.send(t, chain[j], chain[j + 1], "in" if j == 0 else "out", off, "out", off, n)
        return make(spec, self.name, r, latency_class=self.latency_class)

    def _reduce(self, spec: CollectiveSpec) -> Schedule:
        p, root, k = spec.participants, spec.root, spec.pipeline
        chain = [(root + j) % p for j in range(p)]
        chunks = split(spec.count, k)
        r = Rounds()
        # Link j carries chain[j+1] -> chain[j]; the tail's link starts first.
        for t in range(k + p - 2):
            for j in range(p - 1):
                x = t - (p - 2 - j)
                if 0 <= x < k:
                    off, n = chunks[x]
                    src_buf = "in" if j + 1 == p - 1 else "tmp"
                    r.send(t, chain[j + 1], chain[j], src_buf, off, "out" if j == 0 else "tmp", off, n,
                           reduce=True, acc_buf="in", acc_off=off)
        tmp = [0 if i == root else spec.count for i in range(p)]
        return make(spec, self.name, r, {"tmp": tmp}, self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab, p, c, w, k = levels.flat, spec.participants, spec.count, spec.itemsize, spec.pipeline
        if spec.op == "all_reduce":
            chunk = ceil_div(c, p) * w
            return (p - 1) * (ab.round(chunk, chunk) + ab.round(chunk))
        if spec.op == "reduce_scatter":
            return (p - 1) * ab.round(c * w, c * w)
        if spec.op == "all_gather":
            return (p - 1) * ab.round(c * w)
        red = spec.op == "reduce"
        return sum(n * ab.round(x * w, x * w if red else 0.0) for n, x in pipeline_profile(c, k, p - 1))

    def transfers(self, spec: CollectiveSpec) -> int:
        p = spec.participants
        if spec.op in self.pipelined:
            return (p - 1) * spec.pipeline + 1
        return 2 * p * (p - 1) + p


ALGORITHM = Ring()
