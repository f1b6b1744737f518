"""The per-run report: what each slot did on the modelled timeline.

Busy time, utilisation, achieved vs peak FLOP/s, peak memory (measured by the
slot allocator), bytes per link, energy (board power x busy time) and cost
(price per chip-hour on one basis x run time, only where the catalogue has a
price on it; :class:`devices.ChipSet` sums them and says why one is unset).
Every time is modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devices.chip_set import DEFAULT_BASIS, ChipSet, check_basis
from devices.units import format_bytes
from devices.text_table import table
from interop import session
from interop.timeline_totals import TimelineTotals
from interop.timelines import PS


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
    """price per hour on the report's basis x makespan; None where the kind has no price on it."""
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
    price_basis: str = DEFAULT_BASIS
    """The basis of every slot's :attr:`SlotReport.cost_usd` (:data:`devices.PRICE_BASES`)."""
    tokens: float | None = None
    """Tokens the run processed, when the caller said (gives the per-token figures)."""
    cost_unset: str = ""
    """Why :attr:`cost_usd` is None (the kinds without a price on the basis)."""
    energy_unset: str = ""
    """Why :attr:`energy_j` is None (the kinds without a power figure)."""

    def slot(self, index: int) -> SlotReport:
        return next(s for s in self.slots if s.slot == index)

    @property
    def cost_usd(self) -> float | None:
        """Every slot's price x makespan on :attr:`price_basis`; None when a kind has no price on it."""
        costs = [s.cost_usd for s in self.slots]
        return None if not costs or any(c is None for c in costs) else sum(costs)

    @property
    def energy_j(self) -> float | None:
        """Every slot's board power x busy time; None when a kind has no power figure."""
        energy = [s.energy_j for s in self.slots]
        return None if not energy or any(e is None for e in energy) else sum(energy)

    @property
    def usd_per_million_tokens(self) -> float | None:
        cost = self.cost_usd
        return None if cost is None or not self.tokens else cost / self.tokens * 1e6

    @property
    def joules_per_token(self) -> float | None:
        energy = self.energy_j
        return None if energy is None or not self.tokens else energy / self.tokens

    def totals(self) -> str:
        """The run's cost and energy (per M tokens and per token when the tokens were given), or why unset."""
        per = f" for {self.tokens:,.0f} tokens" if self.tokens else ""
        if self.cost_usd is None:
            cost = f"cost unset on {self.price_basis}: {self.cost_unset}"
        else:
            cost = f"cost ${self.cost_usd:.6g} ({self.price_basis}){per}"
            if self.tokens:
                cost += f", ${self.usd_per_million_tokens:.6g} per M tokens"
        if self.energy_j is None:
            energy = f"energy unset: {self.energy_unset}"
        else:
            energy = f"energy {self.energy_j:.6g} J (board power x busy time)"
            if self.tokens:
                energy += f", {self.joules_per_token:.6g} J/token"
        return f"{cost}; {energy} (modelled)"

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
                      f"cost USD ({self.price_basis})", "eager ops", "kernels", "kernel ms", "est. by default", "numerics"], rows,
                     align="llrrrrrrrrrrrl")]
        out.append(self.totals())
        if self.links:
            out.append(table(["link", "bytes", "busy ms"],
                             [[link.link, format_bytes(link.bytes), f"{link.busy_s * 1e3:.3f}"] for link in self.links],
                             align="lrr"))
        return "\n".join(out)


def build_report(records, rack, peak_memory: dict[int, int], totals: TimelineTotals | None = None, *,
                 price_basis: str = DEFAULT_BASIS, tokens: float | None = None) -> RunReport:
    """The report of ``records`` on ``rack`` (after ``totals``, the figures of records placed before them, when
    given); ``peak_memory``: each slot's allocator peak; ``price_basis``: the basis of every slot's cost;
    ``tokens``: the tokens processed (the per-token figures)."""
    from interop.numerics.slots.settings import slot_label

    check_basis(price_basis)
    t = (totals or TimelineTotals()).plus(records)
    slots = []
    makespan_s = t.makespan_ps / PS
    cost_unset, energy_unset = {}, {}
    for d in rack.devices:
        chip = d.spec
        by_dtype = t.flops_by_dtype.get(d.index)
        dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "bfloat16"
        try:
            peak = chip.peak_for(dtype).value
        except (ValueError, KeyError):
            peak = chip.peak_for("bfloat16").value
        busy_s = t.busy_ps.get(d.index, 0) / PS
        flops = t.flops.get(d.index, 0.0)
        one = ChipSet.of({d.kind: 1})
        power, price = one.power(), one.price(price_basis)
        energy = None if power.value is None else power.value * busy_s
        cost = None if price.value is None else price.value * makespan_s / 3600
        if power.value is None:
            energy_unset[d.kind] = power.reason
        if price.value is None:
            cost_unset[d.kind] = price.reason
        slots.append(SlotReport(
            d.index, d.kind, chip.projected, busy_s, busy_s / makespan_s if makespan_s else 0.0, flops,
            flops / busy_s if busy_s else 0.0, peak, dtype, peak_memory.get(d.index, 0), energy, cost,
            t.ops.get(d.index, 0), t.by_default.get(d.index, 0), slot_label(rack, d.index), t.kernels.get(d.index, 0),
            t.kernel_ps.get(d.index, 0) / PS))
    return RunReport(rack.name, makespan_s, slots, [LinkReport(k, v[0], v[1]) for k, v in sorted(t.links.items())],
                     price_basis, tokens, "; ".join(cost_unset.values()), "; ".join(energy_unset.values()))


def report(*, all_ranks: bool = False, price_basis: str = DEFAULT_BASIS,
           tokens: float | None = None) -> RunReport | None:
    """The modelled report of the current timeline (peak memory: the allocator's peaks): every record placed
    since it began, those folded out of its window included (:func:`interop.set_timeline_window`).

    ``price_basis``: the basis of every slot's cost (``on-demand``, ``capacity-block``, ``reserved-effective``);
    ``tokens``: the tokens the timeline processed, for the cost per million tokens and the joules per token.

    ``all_ranks=True`` (under torch.distributed, every rank calls it): the report of every rank's timeline
    merged on rank 0 (:mod:`interop.merged`; each slot's figures and peak from the rank that runs it); None on
    the other ranks."""
    t = session.current_timeline()
    if all_ranks:
        from interop.merged import gather

        gathered = gather()
        if gathered is None:
            return None
        _, peaks, totals = gathered
        return build_report((), t.rack, peaks, totals, price_basis=price_basis, tokens=tokens)
    peaks = {d.index: t.rack.max_memory_allocated(d.index) for d in t.rack.devices}
    return build_report(t.records, t.rack, peaks, t.folded, price_basis=price_basis, tokens=tokens)
