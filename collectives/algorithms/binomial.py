"""Binomial trees: the latency-optimal rooted collectives, ceil(lg p) rounds for any p.

Ranks are relabelled relative to the root (q = rank - root mod p).

* broadcast: in round s every holder q < 2^s sends everything to q + 2^s: lg p (a + n b).
* reduce: the mirror image; q with lowest set bit 2^s sends its partial to q - 2^s: lg p (a + n (b + g)).
* gather: the same tree collecting blocks; round s moves up to 2^s blocks.
* scatter: the mirror of gather; the root hands out half of what it holds each round.
"""

from __future__ import annotations

from collectives.algorithms.base import Algorithm
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, make


def _runs(a: int, b: int, root: int, p: int) -> list[tuple[int, int]]:
    """Relative blocks [a, b) as (first relative block, length) runs contiguous in rank order."""
    out = []
    while a < b:
        start = (a + root) % p
        n = min(b - a, p - start)
        out.append((a, n))
        a += n
    return out


class Binomial(Algorithm):
    """Binomial-tree broadcast, reduce, gather, scatter (see the module docstring)."""

    name = "binomial"
    ops = frozenset({"broadcast", "reduce", "gather", "scatter"})
    latency_class = "tree"

    def _build(self, spec: CollectiveSpec) -> Schedule:
        return getattr(self, f"_{spec.op}")(spec)

    def _broadcast(self, spec: CollectiveSpec) -> Schedule:
        p, c, root = spec.participants, spec.count, spec.root
        rank = lambda q: (q + root) % p  # noqa: E731
        rd = Rounds()
        rd.send(0, root, root, "in", 0, "out", 0, c)
        for s in range((p - 1).bit_length()):
            for q in range(min(1 << s, p)):
                if q + (1 << s) < p:
                    rd.send(s, rank(q), rank(q + (1 << s)), "in" if q == 0 else "out", 0, "out", 0, c)
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _reduce(self, spec: CollectiveSpec) -> Schedule:
        p, c, root = spec.participants, spec.count, spec.root
        rank = lambda q: (q + root) % p  # noqa: E731
        rd = Rounds()
        got = [False] * p  # has relative rank q received a partial yet?
        for s in range((p - 1).bit_length()):
            for q in range(1 << s, p, 1 << (s + 1)):
                u = q - (1 << s)
                work = "out" if u == 0 else "tmp"
                rd.send(s, rank(q), rank(u), ("out" if q == 0 else "tmp") if got[q] else "in", 0, work, 0, c,
                        reduce=True, acc_buf=None if got[u] else "in")
                got[u] = True
        return make(spec, self.name, rd, {"tmp": [0 if i == root else c for i in range(p)]}, self.latency_class)

    def _gather(self, spec: CollectiveSpec) -> Schedule:
        p, c, root = spec.participants, spec.count, spec.root
        rank = lambda q: (q + root) % p  # noqa: E731
        rd = Rounds()
        rd.send(0, root, root, "in", 0, "out", root * c, c)
        for q in range(2, p, 2):  # nodes that forward more than their own block keep it in tmp (relative order)
            rd.send(0, rank(q), rank(q), "in", 0, "tmp", q * c, c)
        for s in range((p - 1).bit_length()):
            for q in range(1 << s, p, 1 << (s + 1)):
                u, hi = q - (1 << s), min(q + (1 << s), p)
                if s == 0:
                    src = [("in", 0, q, 1)]
                else:
                    src = [("tmp", a * c, a, n) for a, n in [(q, hi - q)]]
                for buf, off, a, n in src:
                    if u == 0:
                        for ra, rn in _runs(a, a + n, root, p):
                            rd.send(s, rank(q), root, buf, off + (ra - a) * c, "out", rank(ra) * c, rn * c)
                    else:
                        rd.send(s, rank(q), rank(u), buf, off, "tmp", a * c, n * c)
        tmp = [0 if i == root else c * p for i in range(p)]
        return make(spec, self.name, rd, {"tmp": tmp}, self.latency_class)

    def _scatter(self, spec: CollectiveSpec) -> Schedule:
        p, c, root = spec.participants, spec.count, spec.root
        rank = lambda q: (q + root) % p  # noqa: E731
        rd = Rounds()
        rd.send(0, root, root, "in", root * c, "out", 0, c)
        stages = (p - 1).bit_length()
        for s in range(stages):
            dist = 1 << (stages - 1 - s)
            for q in range(0, p, 2 * dist):
                v, hi = q + dist, min(q + 2 * dist, p)
                if v >= p:
                    continue
                # v's own block goes to its output, the blocks it will pass on to its tmp.
                for a, n, dst, dst_off in ((v, 1, "out", 0), (v + 1, hi - v - 1, "tmp", (v + 1) * c)):
                    if n <= 0:
                        continue
                    if q == 0:
                        for ra, rn in _runs(a, a + n, root, p):
                            rd.send(s, root, rank(v), "in", rank(ra) * c, dst, dst_off + (ra - a) * c, rn * c)
                    else:
                        rd.send(s, rank(q), rank(v), "tmp", a * c, dst, dst_off, n * c)
        tmp = [0 if i == root else c * p for i in range(p)]
        return make(spec, self.name, rd, {"tmp": tmp}, self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab, p, c, w = levels.flat, spec.participants, spec.count, spec.itemsize
        stages = (p - 1).bit_length()
        if spec.op == "broadcast":
            return stages * ab.round(c * w)
        if spec.op == "reduce":
            return stages * ab.round(c * w, c * w)
        if spec.op == "gather":
            return sum(ab.round(min(1 << s, p - (1 << s)) * c * w) for s in range(stages))
        return sum(ab.round(min(d, p - d) * c * w) for d in (1 << (stages - 1 - s) for s in range(stages)))

    def transfers(self, spec: CollectiveSpec) -> int:
        return 3 * spec.participants


ALGORITHM = Binomial()
