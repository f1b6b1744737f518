"""In-switch reduction and multicast (NVLS / NVLink SHARP), where the switch supports it.

Every participant must sit in one switch domain whose switch reduces in the
network.  A rank sends its data into the switch once and gets the reduced
result back once, instead of p-1 ring steps; the switch's efficiency
(NCCL's 0.85 Hopper / 0.74 Blackwell) prices its bytes.

* all_reduce: the buffer is cut into p shards (one per rank) and each shard
  into k slices.  In round t every rank pulls slice t of its shard reduced over
  all ranks (``ld_reduce``) and multicasts slice t-1 of its finished shard
  (``st.multimem``), so the two halves overlap: each port carries n (1 + 1/p)
  bytes per direction over k + 1 rounds, about 2 a + n b / efficiency.
* reduce_scatter: rank i pulls block i reduced; all_gather: rank i multicasts
  its block; broadcast: the root multicasts; reduce: the root pulls the sum.
"""

from __future__ import annotations

from collectives.algorithms.base import Algorithm, ceil_div
from collectives.cost import Levels
from collectives.schedule import CollectiveSpec, Rounds, Schedule, Transfer, make, split
from collectives.topology import Placement


class InSwitch(Algorithm):
    """NVLS-style schedules (see the module docstring)."""

    name = "in_switch"
    ops = frozenset({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"})
    pipelined = ops
    latency_class = "nvls"

    def unsupported(self, spec: CollectiveSpec, placement: Placement | None = None) -> str | None:
        reason = super().unsupported(spec, placement)
        if reason is None and placement is not None and placement.switch is None and spec.participants > 1:
            reason = "in_switch needs every participant in one switch domain with in-switch reduction"
        return reason

    def _build(self, spec: CollectiveSpec) -> Schedule:
        p, c, k, op = spec.participants, spec.count, spec.pipeline, spec.op
        everyone = tuple(range(p))
        rd = Rounds()

        def pull(t, i, src_off, dst_off, n, dst_buf="out"):
            rd.add(t, Transfer(everyone, (i,), "in", src_off, dst_buf, dst_off, n, reduce=True, via_switch=True))

        def push(t, i, buf, off, dst_off, n, dsts):
            rd.add(t, Transfer((i,), tuple(dsts), buf, off, "out", dst_off, n, via_switch=True))

        if op == "all_reduce":
            shards = split(c, p)
            for i, (off, n) in enumerate(shards):
                slices = split(n, k)
                for t in range(k + 1):
                    if t < k:
                        pull(t, i, off + slices[t][0], off + slices[t][0], slices[t][1])
                    if t >= 1:
                        so, sn = slices[t - 1]
                        push(t, i, "out", off + so, off + so, sn, [j for j in everyone if j != i])
        elif op == "reduce_scatter":
            for t, (so, sn) in enumerate(split(c, k)):
                for i in everyone:
                    pull(t, i, i * c + so, so, sn)
        elif op == "all_gather":
            for i in everyone:
                rd.send(0, i, i, "in", 0, "out", i * c, c)
            for t, (so, sn) in enumerate(split(c, k)):
                for i in everyone:
                    push(t, i, "in", so, i * c + so, sn, [j for j in everyone if j != i])
        elif op == "broadcast":
            rd.send(0, spec.root, spec.root, "in", 0, "out", 0, c)
            for t, (so, sn) in enumerate(split(c, k)):
                push(t, spec.root, "in", so, so, sn, [j for j in everyone if j != spec.root])
        else:  # reduce
            for t, (so, sn) in enumerate(split(c, k)):
                pull(t, spec.root, so, so, sn)
        return make(spec, self.name, rd, latency_class=self.latency_class)

    def _closed(self, spec: CollectiveSpec, levels: Levels) -> float:
        ab, p, c, w, op = levels.switch, spec.participants, spec.count, spec.itemsize, spec.op
        if ab is None:
            raise ValueError("in_switch: the levels have no in-switch level")
        if op == "all_reduce":
            shard = ceil_div(c, p)
            k = min(spec.pipeline, shard)
            s = ceil_div(shard, k) * w
            return ab.round(p * s) + (k - 1) * ab.round((p + 1) * s) + ab.round((p - 1) * s)
        k = min(spec.pipeline, c)
        s = ceil_div(c, k) * w
        fan = {"reduce_scatter": p, "all_gather": p - 1, "broadcast": 1, "reduce": 1}[op]
        return k * ab.round(fan * s)

    def transfers(self, spec: CollectiveSpec) -> int:
        # counted in link ends: every pull touches all p ports
        return 2 * spec.participants * spec.participants * (spec.pipeline + 1)


ALGORITHM = InSwitch()
