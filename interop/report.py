"""The per-run report: what each slot did on the modelled timeline.

Busy time, utilisation, achieved vs peak FLOP/s, peak memory (measured by the
slot allocator), bytes per link, energy (power x busy time) and cost (price x
run time, only where the catalogue has a price). Every time is modelled.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from devices.units import format_bytes
from devices.text_table import table
from interop import session
from interop.timelines import PS, TimelineRecord


@dataclass(frozen=True, slots=True)
class SlotReport:
    slot: int
    kind: str
    projected: bool
    busy_s: float
    """Sum of the modelled durations of the records the slot took part in."""
    utilisation: float
    """busy_s / the run's makespan."""
    flops: float
    achieved_flops: float
    """flops / busy_s (FLOP/s while busy)."""
    peak_flops: float
    """The chip's dense peak for the dtype that carried most of the FLOPs."""
    peak_dtype: str
    peak_memory: int
    """Peak bytes held (measured by the slot allocator since its last reset)."""
    energy_j: float | None
    """power x busy time; None where the catalogue has no power figure."""
    cost_usd: float | None
    """price per hour x makespan; None where no price is set."""
    ops: int
    """Eager ATen ops run on the slot."""
    estimated_by_default: int
    """Ops the cost model did not know (bytes-only estimate)."""
    numerics: str = "exact"
    """The slot's numerics mode: ``exact`` (the CPU's results) or what ``device`` mode rounds (interop.numerics)."""
    kernels: int = 0
    """Kernels launched by compiled graphs and Triton (``inductor:...``, ``triton:...`` records)."""
    kernel_s: float = 0.0
    """Modelled time of those kernels (part of busy_s)."""


@dataclass(frozen=True, slots=True)
class LinkReport:
    link: str
    bytes: float
    busy_s: float


@dataclass
class RunReport:
    """The modelled summary of everything on the current timeline."""

    rack: str
    makespan_s: float
    slots: list[SlotReport]
    links: list[LinkReport] = field(default_factory=list)

    def slot(self, index: int) -> SlotReport:
        return next(s for s in self.slots if s.slot == index)

    def table(self) -> str:
        rows = []
        for s in self.slots:
            rows.append([
                f"hybrid:{s.slot}", s.kind + (" (projected)" if s.projected else ""), f"{s.busy_s * 1e3:.3f}",
                f"{100 * s.utilisation:.1f} %", f"{s.achieved_flops / 1e12:.1f}", f"{s.peak_flops / 1e12:.0f} {s.peak_dtype}",
                format_bytes(s.peak_memory), "-" if s.energy_j is None else f"{s.energy_j:.3f}",
                "unset" if s.cost_usd is None else f"{s.cost_usd:.6f}", s.ops, s.kernels,
                f"{s.kernel_s * 1e3:.3f}", s.estimated_by_default, s.numerics,
            ])
        out = [f"modelled run on {self.rack}: makespan {self.makespan_s * 1e3:.3f} ms",
               table(["slot", "kind", "busy ms", "util", "TFLOP/s", "peak TFLOP/s", "peak mem", "energy J",
                      "cost USD", "eager ops", "kernels", "kernel ms", "est. by default", "numerics"], rows,
                     align="llrrrrrrrrrrrl")]
        if self.links:
            out.append(table(["link", "bytes", "busy ms"],
                             [[link.link, format_bytes(link.bytes), f"{link.busy_s * 1e3:.3f}"] for link in self.links],
                             align="lrr"))
        return "\n".join(out)


def build_report(records: list[TimelineRecord], rack, peak_memory: dict[int, int]) -> RunReport:
    from interop.numerics.slots.settings import slot_label

    makespan_ps = max((r.end_ps for r in records), default=0)
    busy: dict[int, int] = defaultdict(int)
    flops: dict[int, float] = defaultdict(float)
    flops_by_dtype: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ops: dict[int, int] = defaultdict(int)
    kernels: dict[int, int] = defaultdict(int)
    kernel_ps: dict[int, int] = defaultdict(int)
    by_default: dict[int, int] = defaultdict(int)
    links: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        involved = set(r.participants) if r.participants else {s for s in (r.slot, r.peer) if s is not None and s >= 0}
        for s in involved:
            busy[s] += r.duration_ps
        if r.kind in ("op", "kernel"):
            flops[r.slot] += r.flops
            flops_by_dtype[r.slot][r.dtype] += r.flops
            by_default[r.slot] += int(r.estimated_by_default)
            if r.kind == "op":
                ops[r.slot] += 1
            else:
                kernels[r.slot] += 1
                kernel_ps[r.slot] += r.duration_ps
        if r.link:
            links[r.link][0] += r.bytes
            links[r.link][1] += r.duration
    slots = []
    makespan_s = makespan_ps / PS
    for d in rack.devices:
        chip = d.spec
        by_dtype = flops_by_dtype.get(d.index)
        dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "bfloat16"
        try:
            peak = chip.peak_for(dtype).value
        except (ValueError, KeyError):
            peak = chip.peak_for("bfloat16").value
        busy_s = busy[d.index] / PS
        energy = None if chip.power is None else chip.power.value * busy_s
        cost = None if chip.price_per_hour is None else chip.price_per_hour.value * makespan_s / 3600
        slots.append(SlotReport(
            d.index, d.kind, chip.projected, busy_s, busy_s / makespan_s if makespan_s else 0.0, flops[d.index],
            flops[d.index] / busy_s if busy_s else 0.0, peak, dtype, peak_memory.get(d.index, 0), energy, cost,
            ops[d.index], by_default[d.index], slot_label(rack, d.index), kernels[d.index], kernel_ps[d.index] / PS))
    return RunReport(rack.name, makespan_s, slots, [LinkReport(k, v[0], v[1]) for k, v in sorted(links.items())])


def report(*, all_ranks: bool = False) -> RunReport | None:
    """The modelled report of the current timeline (peak memory: the allocator's peaks).

    ``all_ranks=True`` (under torch.distributed, every rank calls it): the report of every rank's timeline
    merged on rank 0 (:mod:`interop.merged`; each slot's peak from the rank that runs it); None on the other
    ranks."""
    t = session.current_timeline()
    if all_ranks:
        from interop.merged import gather

        gathered = gather()
        if gathered is None:
            return None
        records, peaks = gathered
        return build_report(records, t.rack, peaks)
    peaks = {d.index: t.rack.max_memory_allocated(d.index) for d in t.rack.devices}
    return build_report(t.records, t.rack, peaks)
