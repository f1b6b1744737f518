"""Direct: ranks talk to each other without intermediaries.

* all_to_all (also uneven splits), all_gather, reduce_scatter: pairwise
  exchange, in round s rank i sends to i+s: (p-1) a + (p-1)/p n b (+ g).
* all_reduce: pairwise reduce_scatter then pairwise all_gather (one chunk per rank).
* broadcast, reduce, gather, scatter: one round, everyone to or from the root
  at once (the root's port is shared): a + (p-1) n b.
* send/recv: one message.  barrier: zero-byte messages to rank 0 and back.
"""

from __future__ import annotations

from collectives.algorithms.base import Algorithm, ceil_div
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, Transfer, make, split


class Direct(Algorithm):
    """Pairwise and one-round direct schedules (see the module docstring)."""

    name = "direct"
    ops = frozenset({"all_to_all", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "gather",
                     "scatter", "send_recv", "barrier"})
    latency_class = "ring"

    def _build(self, spec: CollectiveSpec) -> Schedule:
        p, c, root, op = spec.participants, spec.count, spec.root, spec.op
        rd = Rounds(keep_empty=op == "barrier")
        if op == "all_to_all":
            send_off = [[sum(spec.sends(i, k) for k in range(j)) for j in range(p)] for i in range(p)]
            recv_off = [[sum(spec.sends(k, j) for k in range(i)) for j in range(p)] for i in range(p)]
            for s in range(p):
                for i in range(p):
                    j = (i + s) % p
                    rd.send(s, i, j, "in", send_off[i][j], "out", recv_off[i][j], spec.sends(i, j))
        elif op == "all_gather":
            for s in range(p):
                for i in range(p):
                    rd.send(s, i, (i + s) % p, "in", 0, "out", i * c, c)
        elif op == "reduce_scatter":
            for s in range(1, p):
                for i in range(p):
                    j = (i + s) % p
                    rd.send(s - 1, i, j, "in", j * c, "out", 0, c, reduce=True,
                            acc_buf="in" if s == 1 else None, acc_off=j * c)
        elif op == "all_reduce":
            chunks = split(c, p)
            for s in range(1, p):
                for i in range(p):
                    j = (i + s) % p
                    off, n = chunks[j]
                    rd.send(s - 1, i, j, "in", off, "out", off, n, reduce=True,
                            acc_buf="in" if s == 1 else None, acc_off=off)
            for s in range(1, p):
                for i in range(p):
                    off, n = chunks[i]
                    rd.send(p - 2 + s, i, (i + s) % p, "out", off, "out", off, n)
        elif op == "broadcast":
            for i in range(p):
                rd.send(0, root, i, "in", 0, "out", 0, c)
        elif op == "reduce":
            first = True
            for i in range(p):
                if i != root:
                    rd.send(0, i, root, "in", 0, "out", 0, c, reduce=True, acc_buf="in" if first else None)
                    first = False
        elif op == "gather":
            for i in range(p):
                rd.send(0, i, root, "in", 0, "out", i * c, c)
        elif op == "scatter":
            for i in range(p):
                rd.send(0, root, i, "in", i * c, "out", 0, c)
        elif op == "send_recv":
            rd.send(0, 0, 1, "in", 0, "out", 0, c)
        else:  # barrier
            for i in range(1, p):
                rd.add(0, Transfer((i,), (0,), "in", 0, "out", 0, 0))
                rd.add(1, Transfer((0,), (i,), "in", 0, "out", 0, 0))
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab, p, c, w, op = levels.flat, spec.participants, spec.count, spec.itemsize, spec.op
        if op == "all_to_all":
            if spec.splits is None:
                return (p - 1) * ab.round(c * w)
            return sum(ab.round(max(spec.sends(i, (i + s) % p) for i in range(p)) * w) for s in range(1, p)
                       if any(spec.sends(i, (i + s) % p) for i in range(p)))
        if op == "all_gather":
            return (p - 1) * ab.round(c * w)
        if op == "reduce_scatter":
            return (p - 1) * ab.round(c * w, c * w)
        if op == "all_reduce":
            chunk = ceil_div(c, p) * w
            return (p - 1) * (ab.round(chunk, chunk) + ab.round(chunk))
        if op in ("broadcast", "gather", "scatter"):
            return ab.round((p - 1) * c * w)
        if op == "reduce":
            return ab.round((p - 1) * c * w, (p - 1) * c * w)
        if op == "send_recv":
            return ab.round(c * w)
        return 2 * ab.message()

    def transfers(self, spec: CollectiveSpec) -> int:
        p = spec.participants
        if spec.op in ("all_to_all", "all_gather", "reduce_scatter", "all_reduce"):
            return 2 * p * p
        return 2 * p


ALGORITHM = Direct()
