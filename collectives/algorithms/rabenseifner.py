"""Recursive halving and doubling (Rabenseifner), for any participant count.

With p' the largest power of two <= p and r = p - p', ranks 2i+1 (i < r)
first fold their data into rank 2i, the p' remaining ranks ("virtual ranks")
run the power-of-two algorithm, and the folded ranks get their result back at
the end (MPICH's scheme).  Virtual rank v owns a contiguous run of the output
blocks (two for v < r), so reduce_scatter and all_gather work on any p.

* reduce_scatter, recursive halving: lg p' exchanges of n/2, n/4, ...:
  lg p a + (p-1)/p n (b + g) when p is a power of two.
* all_gather, recursive doubling: lg p a + (p-1)/p n b.
* all_reduce (Rabenseifner): halving then doubling: 2 lg p a + 2 (p-1)/p n b + (p-1)/p n g.
* broadcast (van de Geijn): binomial scatter then all_gather: 2 lg p a + 2 (p-1)/p n b.
* barrier: dissemination, ceil(lg p) rounds of zero-byte messages.
"""

from __future__ import annotations

from collectives.algorithms.base import Algorithm
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, Transfer, make, split


def fold(p: int) -> tuple[int, int]:
    """(p', r): the power of two the algorithm runs on and how many ranks fold into a partner."""
    pp = 1 << (p.bit_length() - 1)
    return pp, p - pp


def real(v: int, r: int) -> int:
    """The rank playing virtual rank v."""
    return 2 * v if v < r else v + r


def _halving(rd: Rounds, start: int, pp: int, r: int, bounds, loc, work: str, rank=lambda x: x,
             last_out=None) -> int:
    """Recursive halving among virtual ranks on segments ``bounds``; returns the next round.

    ``loc[v]`` is where v's data is before the first exchange; ``last_out(v)``,
    if given, names the (buffer, offset, acc_offset) the last exchange writes for v.
    """
    stages = pp.bit_length() - 1
    for s in range(stages):
        d = pp >> (s + 1)
        for v in range(pp):
            w = v ^ d
            lo = (w // d) * d  # the half w keeps
            off, n = bounds[lo], bounds[lo + d] - bounds[lo]
            src_buf = loc[v] if s == 0 else work
            acc = loc[w] if s == 0 else work
            dst_buf, dst_off = work, off
            if s == stages - 1 and last_out is not None and last_out(w) is not None:
                dst_buf, dst_off = last_out(w)
            rd.send(start + s, rank(real(v, r)), rank(real(w, r)), src_buf, off, dst_buf, dst_off, n, reduce=True,
                    acc_buf=None if (acc == dst_buf and dst_off == off) else acc, acc_off=off)
    return start + stages


def _doubling(rd: Rounds, start: int, pp: int, r: int, bounds, buf: str, rank=lambda x: x) -> int:
    """Recursive doubling among virtual ranks on segments ``bounds``; returns the next round."""
    stages = pp.bit_length() - 1
    for s in range(stages):
        d = 1 << s
        for v in range(pp):
            lo = (v // d) * d
            off, n = bounds[lo], bounds[lo + d] - bounds[lo]
            rd.send(start + s, rank(real(v, r)), rank(real(v ^ d, r)), buf, off, buf, off, n)
    return start + stages


def _block_bounds(pp: int, r: int, unit: int) -> list[int]:
    # Virtual v owns blocks [real(v), real(v+1)): two for v < r.
    return [real(v, r) * unit for v in range(pp)] + [(pp + r) * unit]


def _window(d: int, r: int, q: int, rem: int) -> int:
    """Elements of the largest aligned window of d virtual ranks over per-rank segments of q (+1 for the first rem)."""
    ranks = d + min(d, r)
    return ranks * q + min(ranks, rem)


class Rabenseifner(Algorithm):
    """Recursive halving / doubling with folding (see the module docstring)."""

    name = "rabenseifner"
    ops = frozenset({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"})
    latency_class = "ring"

    def _build(self, spec: CollectiveSpec) -> Schedule:
        return getattr(self, f"_{spec.op}")(spec)

    def _all_reduce(self, spec: CollectiveSpec) -> Schedule:
        p, c = spec.participants, spec.count
        pp, r = fold(p)
        rd = Rounds()
        for i in range(r):
            rd.send(0, 2 * i + 1, 2 * i, "in", 0, "out", 0, c, reduce=True, acc_buf="in")
        t = 1 if r else 0
        bounds = [off for off, _ in split(c, pp)] + [c]
        loc = ["out" if v < r else "in" for v in range(pp)]
        t = _halving(rd, t, pp, r, bounds, loc, "out")
        t = _doubling(rd, t, pp, r, bounds, "out")
        for i in range(r):
            rd.send(t, 2 * i, 2 * i + 1, "out", 0, "out", 0, c)
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _reduce_scatter(self, spec: CollectiveSpec) -> Schedule:
        p, c = spec.participants, spec.count
        pp, r = fold(p)
        rd = Rounds()
        for i in range(r):
            rd.send(0, 2 * i + 1, 2 * i, "in", 0, "tmp", 0, c * p, reduce=True, acc_buf="in")
        t = 1 if r else 0
        loc = ["tmp" if v < r else "in" for v in range(pp)]
        # A virtual rank owning one block receives it straight into its output.
        t = _halving(rd, t, pp, r, _block_bounds(pp, r, c), loc, "tmp",
                     last_out=lambda w: None if w < r else ("out", 0))
        for i in range(r):
            rd.send(t, 2 * i, 2 * i, "tmp", 2 * i * c, "out", 0, c)
            rd.send(t, 2 * i, 2 * i + 1, "tmp", (2 * i + 1) * c, "out", 0, c)
        return make(spec, self.name, rd, {"tmp": [c * p] * p}, self.latency_class)

    def _all_gather(self, spec: CollectiveSpec) -> Schedule:
        p, c = spec.participants, spec.count
        pp, r = fold(p)
        rd = Rounds()
        for i in range(p):
            rd.send(0, i, i, "in", 0, "out", i * c, c)
        for i in range(r):
            rd.send(0, 2 * i + 1, 2 * i, "in", 0, "out", (2 * i + 1) * c, c)
        t = _doubling(rd, 1, pp, r, _block_bounds(pp, r, c), "out")
        for i in range(r):
            rd.send(t, 2 * i, 2 * i + 1, "out", 0, "out", 0, c * p)
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _broadcast(self, spec: CollectiveSpec) -> Schedule:
        p, c, root = spec.participants, spec.count, spec.root
        pp, r = fold(p)
        rank = lambda q: (q + root) % p  # noqa: E731 - relative rank -> rank
        segs = split(c, p)
        bounds = [off for off, _ in segs] + [c]
        rd = Rounds()
        rd.send(0, root, root, "in", 0, "out", 0, segs[0][1])
        stages = (p - 1).bit_length()
        for s in range(stages):  # binomial scatter: holder lo hands [lo+D, lo+2D) to lo+D
            dist = 1 << (stages - 1 - s)
            for lo in range(0, p, 2 * dist):
                if lo + dist < p:
                    hi = min(lo + 2 * dist, p)
                    rd.send(s, rank(lo), rank(lo + dist), "in" if lo == 0 else "out", bounds[lo + dist], "out",
                            bounds[lo + dist], bounds[hi] - bounds[lo + dist])
        t = stages
        for i in range(r):
            rd.send(t, rank(2 * i + 1), rank(2 * i), "out", bounds[2 * i + 1], "out", bounds[2 * i + 1],
                    segs[2 * i + 1][1])
        t = _doubling(rd, t + (1 if r else 0), pp, r, [bounds[real(v, r)] for v in range(pp)] + [c], "out", rank)
        for i in range(r):
            rd.send(t, rank(2 * i), rank(2 * i + 1), "out", 0, "out", 0, c)
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _barrier(self, spec: CollectiveSpec) -> Schedule:
        p = spec.participants
        rd = Rounds(keep_empty=True)
        for s in range((p - 1).bit_length()):
            for i in range(p):
                rd.add(s, Transfer((i,), ((i + (1 << s)) % p,), "in", 0, "out", 0, 0))
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab, p, c, w = levels.flat, spec.participants, spec.count, spec.itemsize
        pp, r = fold(p)
        stages = pp.bit_length() - 1
        halves = [pp >> (s + 1) for s in range(stages)]
        doubles = [1 << s for s in range(stages)]
        if spec.op == "barrier":
            return (p - 1).bit_length() * ab.message()
        if spec.op == "all_reduce":
            q, rem = divmod(c, pp)
            total = ab.round(c * w, c * w) if r else 0.0
            total += sum(ab.round((d * q + min(d, rem)) * w, (d * q + min(d, rem)) * w) for d in halves)
            total += sum(ab.round((d * q + min(d, rem)) * w) for d in doubles)
            return total + (ab.round(c * w) if r else 0.0)
        if spec.op == "reduce_scatter":
            total = ab.round(c * p * w, c * p * w) if r else 0.0
            total += sum(ab.round((d + min(d, r)) * c * w, (d + min(d, r)) * c * w) for d in halves)
            return total + (ab.round(c * w) if r else 0.0)
        if spec.op == "all_gather":
            total = ab.round(c * w) if r else 0.0
            total += sum(ab.round((d + min(d, r)) * c * w) for d in doubles)
            return total + (ab.round(c * p * w) if r else 0.0)
        # broadcast: binomial scatter, fold, doubling, unfold on segments of split(c, p)
        q, rem = divmod(c, p)
        stages_s = (p - 1).bit_length()
        total = 0.0
        for s in range(stages_s):
            dist = 1 << (stages_s - 1 - s)
            m = min(dist, p - dist)
            total += ab.round((m * q + max(0, min(dist + m, rem) - dist)) * w)
        if r:
            total += ab.round((q + (1 if 1 < rem else 0)) * w)
        total += sum(ab.round(_window(d, r, q, rem) * w) for d in doubles)
        return total + (ab.round(c * w) if r else 0.0)

    def transfers(self, spec: CollectiveSpec) -> int:
        p = spec.participants
        return 2 * p * max(1, (p - 1).bit_length()) + 3 * p


ALGORITHM = Rabenseifner()
