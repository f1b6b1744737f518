"""Costing a list of recorded ops: totals, MFU and a per-op breakdown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from devices.cost.meta_trace import OpRecord
from devices.cost.model import Estimate, estimate
from devices.figure import Figure


@dataclass(frozen=True, slots=True)
class OpTotal:
    """All calls of one op (by name without overload) in a :class:`Summary`."""

    op: str
    count: int
    seconds: float
    flops: float
    bytes: float


@dataclass(frozen=True, slots=True)
class Summary:
    """Modelled cost of a sequence of ops run back to back on one chip kind."""

    kind: str
    """Chip kind."""
    seconds: float
    """Sum of the ops' modelled seconds (one stream, no overlap)."""
    flops: float
    """Sum of the ops' FLOPs."""
    bytes: float
    """Sum of the ops' HBM bytes."""
    mfu: float
    """flops / (seconds * peak): model FLOPs utilisation of the modelled run."""
    peak: Figure | None
    """The peak the MFU is relative to: the chip's rate for the dtype carrying the most FLOPs."""
    estimates: tuple[Estimate, ...]
    """One estimate per record, in order."""
    by_op: tuple[OpTotal, ...]
    """Totals per op name, most modelled time first."""
    estimated_by_default: int
    """How many records had no cost rule (bytes-only estimates)."""
    unknown_ops: tuple[str, ...]
    """The op names behind those default estimates."""
    projected: bool
    """True when any estimate used a projected chip figure."""

    def table(self, rows: int = 15) -> str:
        """A printable breakdown of the ops taking most modelled time."""
        lines = [f"{'op':<48} {'calls':>6} {'time':>10} {'share':>6} {'TFLOP/s':>8}"]
        for t in self.by_op[:rows]:
            share = t.seconds / self.seconds if self.seconds else 0.0
            rate = t.flops / t.seconds / 1e12 if t.seconds else 0.0
            lines.append(f"{t.op:<48} {t.count:>6} {t.seconds * 1e6:>8.1f}us {share:>6.1%} {rate:>8.1f}")
        lines.append(f"total {self.seconds * 1e3:.3f} ms (modelled), {self.flops / 1e12:.3f} TFLOP, "
                     f"MFU {self.mfu:.1%} on {self.kind}; {self.estimated_by_default} default estimates")
        return "\n".join(lines)


def estimate_ops(kind: str, records: Iterable[OpRecord]) -> Summary:
    """Cost every record on ``kind`` and sum them (ops on one stream, back to back)."""
    estimates = tuple(estimate(kind, r.op, r.shapes, r.dtype, out_shapes=r.out_shapes, args=r.args)
                      for r in records)
    totals: dict[str, list[float]] = {}
    flops_by_dtype: dict[str, float] = {}
    for e in estimates:
        name = e.op.split(".", 1)[0] if "::" in e.op else e.op
        t = totals.setdefault(name, [0, 0.0, 0.0, 0.0])
        t[0] += 1
        t[1] += e.seconds
        t[2] += e.flops
        t[3] += e.bytes
        flops_by_dtype[e.dtype] = flops_by_dtype.get(e.dtype, 0.0) + e.flops
    seconds = sum(e.seconds for e in estimates)
    flops = sum(e.flops for e in estimates)
    peak, mfu = None, 0.0
    if flops_by_dtype:
        from devices.chip import chip
        from devices.chip_set import ChipSet

        main = max(flops_by_dtype, key=flops_by_dtype.__getitem__)
        peak = chip(kind).peak_for(main)
        mfu = ChipSet.of({kind: 1}).mfu(flops, seconds, main)
    by_op = tuple(sorted((OpTotal(op, int(c), s, f, b) for op, (c, s, f, b) in totals.items()),
                         key=lambda t: -t.seconds))
    unknown = tuple(dict.fromkeys(e.op for e in estimates if e.estimated_by_default))
    return Summary(
        kind=estimates[0].kind if estimates else kind, seconds=seconds, flops=flops,
        bytes=sum(e.bytes for e in estimates),
        mfu=mfu, peak=peak,
        estimates=estimates, by_op=by_op, estimated_by_default=sum(e.estimated_by_default for e in estimates),
        unknown_ops=unknown, projected=any(e.projected for e in estimates))
