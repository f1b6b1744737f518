"""Binary trees, pipelined: NCCL's double binary tree all_reduce, and tree broadcast / reduce.

Trees are heap-ordered (node x has children 2x+1, 2x+2), so depth and fan-in
are known in closed form for any p.  The data is cut into ``pipeline`` chunks
that stream level by level: a node at depth d forwards chunk j in round
``j + H - d`` going up (H: the deepest level) and ``j + d`` going down.

* all_reduce (double binary tree): tree A over ranks 0..p-1 reduces then
  broadcasts the first half of the buffer, tree B (A mirrored: rank p-1-x) the
  second half.  A rank interior in one tree is a leaf in the other, so both
  trees use every link and the pair moves about 2 n b in total:
  ``~ 2 (k + H - 1)(a + n/k b)``, NCCL's "2 lg p a + 2 n b" as k grows.
* broadcast / reduce: one tree, relabelled so the root is the tree's root.
"""

from __future__ import annotations

from collectives.algorithms.base import Algorithm, ceil_div
from collectives.cost import AlphaBeta, Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, make, split


def depth(x: int) -> int:
    """Depth of heap node x (the root is 0)."""
    return (x + 1).bit_length() - 1


def level(d: int, p: int) -> range:
    """Heap nodes at depth d of a p-node tree."""
    return range((1 << d) - 1, min((1 << (d + 1)) - 1, p))


def children(x: int, p: int) -> list[int]:
    """Heap children of x."""
    return [c for c in (2 * x + 1, 2 * x + 2) if c < p]


class Tree(Algorithm):
    """Pipelined binary trees (see the module docstring)."""

    name = "tree"
    ops = frozenset({"all_reduce", "broadcast", "reduce"})
    pipelined = ops
    latency_class = "tree"

    def _build(self, spec: CollectiveSpec) -> Schedule:
        p, k = spec.participants, spec.pipeline
        r = Rounds()
        if spec.op == "all_reduce":
            (off0, n0), (off1, n1) = split(spec.count, 2)
            trees = [(lambda x: x, off0, n0), (lambda x: p - 1 - x, off1, n1)]
            up = self._up(r, 0, p, k, trees, "out")
            self._down(r, up, p, k, trees)
            return make(spec, self.name, r, latency_class=self.latency_class)
        tree = [(lambda x: (x + spec.root) % p, 0, spec.count)]
        if spec.op == "broadcast":
            r.send(0, spec.root, spec.root, "in", 0, "out", 0, spec.count)
            self._down(r, 0, p, k, tree, first="in")
            return make(spec, self.name, r, latency_class=self.latency_class)
        self._up(r, 0, p, k, tree, "tmp")
        tmp = [0 if i == spec.root else spec.count for i in range(p)]
        return make(spec, self.name, r, {"tmp": tmp}, self.latency_class)

    @staticmethod
    def _up(r: Rounds, start: int, p: int, k: int, trees, work: str) -> int:
        """Reduce every tree's chunks to its root; interior nodes accumulate in ``work`` (the root in ``out``)."""
        h = depth(p - 1)
        for t in range(k + h - 1):
            for d in range(h, 0, -1):
                j = t - (h - d)
                if not 0 <= j < k:
                    continue
                for rank, off, n in trees:
                    coff, cn = split(n, k)[j]
                    for x in level(d, p):
                        parent = (x - 1) // 2
                        src_buf = "in" if not children(x, p) else ("out" if work == "out" else "tmp")
                        dst_buf = "out" if parent == 0 or work == "out" else "tmp"
                        first = x % 2 == 1  # the first child combines with the parent's own input
                        r.send(start + t, rank(x), rank(parent), src_buf, off + coff, dst_buf, off + coff, cn,
                               reduce=True, acc_buf="in" if first else None, acc_off=off + coff)
        return start + k + h - 1

    @staticmethod
    def _down(r: Rounds, start: int, p: int, k: int, trees, first: str = "out") -> None:
        """Broadcast every tree's chunks from its root (which reads ``first``) down to the leaves."""
        h = depth(p - 1)
        for t in range(k + h - 1):
            for d in range(h):
                j = t - d
                if not 0 <= j < k:
                    continue
                for rank, off, n in trees:
                    coff, cn = split(n, k)[j]
                    for x in level(d, p):
                        for c in children(x, p):
                            r.send(start + t, rank(x), rank(c), first if x == 0 else "out", off + coff, "out",
                                   off + coff, cn)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab, p, w = levels.flat, spec.participants, spec.itemsize
        h = depth(p - 1)
        single_last = p - (1 << h) + 1 == 1  # one node on the deepest level: its parent has one child
        data = ceil_div(spec.count, 2) if spec.op == "all_reduce" else spec.count
        k = min(spec.pipeline, data)
        chunk = ceil_div(data, k) * w
        rounds = k + h - 1
        total = 0.0
        # Narrow rounds: with a single node on the deepest level, the first round of the reduction
        # and the last of the broadcast (every round when the tree has one level).
        narrow = 0 if not single_last else rounds if h == 1 else min(1, rounds)
        if spec.op in ("all_reduce", "reduce"):
            total += _phase(ab, rounds, chunk, reduce=True, narrow=narrow)
        if spec.op in ("all_reduce", "broadcast"):
            total += _phase(ab, rounds, chunk, reduce=False, narrow=narrow)
        return total

    def transfers(self, spec: CollectiveSpec) -> int:
        p, k = spec.participants, spec.pipeline
        return (4 if spec.op == "all_reduce" else 1) * (p - 1) * k + 1


def _phase(ab: AlphaBeta, rounds: int, chunk: int, reduce: bool, narrow: int) -> float:
    # A round moves one chunk per edge; a parent with two busy children (or a
    # sender with two) carries two chunks, except in the ``narrow`` rounds where
    # only the single-node deepest level is active.
    wide = rounds - narrow
    total = 0.0
    if narrow:
        total += narrow * ab.round(chunk, chunk if reduce else 0.0)
    if wide:
        total += wide * ab.round(2 * chunk, 2 * chunk if reduce else 0.0)
    return total


ALGORITHM = Tree()
