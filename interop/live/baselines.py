"""What a plan is measured against (every figure modelled): every homogeneous sub-rack, the uniform split of
its stages, and an ideal homogeneous rack of equal peak FLOPs (the heterogeneity overhead, HexiScale's MFU gap).
"""

from __future__ import annotations

from dataclasses import dataclass

import devices
from devices.text_table import table
from devices.units import format_value
from planner.layout import Layout
from planner.plan_search import DoesNotFit, Problem, search
from planner.stage import Stage


@dataclass(frozen=True, slots=True)
class Baseline:
    """One modelled comparison point."""

    name: str
    seconds: float | None
    """Modelled step seconds; None when it does not fit."""
    slots: int
    note: str = ""


@dataclass(slots=True)
class Baselines:
    """The plan against the alternatives (all modelled)."""

    plan_seconds: float
    rows: list[Baseline]
    ideal_seconds: float | None
    """An ideal homogeneous rack of the rack's peak FLOPs at the best homogeneous sub-rack's utilisation."""
    ideal_note: str = ""

    @property
    def gap_to_ideal(self) -> float | None:
        """plan seconds / ideal seconds - 1 (the heterogeneity overhead; HexiScale's MFU gap)."""
        return None if not self.ideal_seconds else self.plan_seconds / self.ideal_seconds - 1.0

    def table(self) -> str:
        rows = [["this plan", "-", f"{self.plan_seconds * 1e3:.3f}", "1.00x", ""]]
        for b in self.rows:
            speed = f"{b.seconds / self.plan_seconds:.2f}x" if b.seconds else "-"
            rows.append([b.name, b.slots, "does not fit" if b.seconds is None else f"{b.seconds * 1e3:.3f}",
                         speed, b.note])
        if self.ideal_seconds:
            rows.append(["ideal homogeneous rack, equal peak FLOPs", "-", f"{self.ideal_seconds * 1e3:.3f}",
                         f"{self.ideal_seconds / self.plan_seconds:.2f}x", self.ideal_note])
        out = table(["alternative (modelled)", "slots", "ms/step", "its time / plan's", "note"], rows,
                    align="lrrrl")
        if self.gap_to_ideal is not None:
            out += (f"\ngap to the ideal homogeneous rack of equal peak FLOPs: {100 * self.gap_to_ideal:+.1f} % "
                    "(modelled)")
        return out


def baselines(plan) -> Baselines:
    """Modelled, for a :class:`~interop.live.plan.Plan`: every homogeneous sub-rack (the best plan on one kind's
    slots), the uniform split (the plan's stages with the blocks divided evenly), and an ideal homogeneous rack
    of equal peak FLOPs."""
    rows = []
    best_homog = None
    pb = plan.problem
    for kind, slots in pb.kinds.items():
        sub = Problem(pb.blocks, pb.spec, slots, pb.global_batch, pb.seq_len, objective=pb.objective,
                      price_basis=pb.price_basis, schedules=pb.schedules, microbatches=pb.microbatches,
                      optimizer=pb.optimizer,
                      recompute=pb.recompute, calibrated=pb.calibrated, master_weights=pb.master_weights,
                      pricer=pb.pricer)
        try:
            layout, result, _ = search(sub)
        except DoesNotFit as e:
            rows.append(Baseline(f"homogeneous: {kind} only", None, len(slots), str(e).split(";")[0]))
            continue
        note = f"{len(layout.stages)} stage(s), {layout.microbatches} mb"
        rows.append(Baseline(f"homogeneous: {kind} only", result.seconds, len(slots), note))
        peak = _peak(plan, kind) * len(slots)
        utilisation = result.model_flops / result.seconds / peak if result.seconds else 0.0
        if best_homog is None or utilisation > best_homog[0]:
            best_homog = (utilisation, kind, result)
    uniform = _uniform(plan)
    if uniform is not None:
        result = pb.evaluate(uniform)
        fits = all(s.memory.fits for s in result.stages)
        rows.append(Baseline("uniform split (this plan's stages, equal block counts)",
                             result.seconds if fits else None, len(uniform.slots)))
    ideal = None
    note = ""
    if best_homog is not None and best_homog[0] > 0:
        rack_peak = sum(_peak(plan, kind) * len(slots) for kind, slots in pb.kinds.items())
        ideal = plan.predicted.result.model_flops / (best_homog[0] * rack_peak)
        note = (f"{format_value(rack_peak, 'FLOP/s')} peak at {best_homog[1]}'s modelled utilisation "
                f"{100 * best_homog[0]:.2f} %")
    return Baselines(plan.predicted.seconds, rows, ideal, note)


def _peak(plan, kind: str) -> float:
    return devices.chip(kind).peak_for(plan.problem.grad_dtype).value


def _uniform(plan) -> Layout | None:
    n = len(plan.blocks)
    stages = plan.layout.stages
    virtual = len(stages) * plan.layout.chunks
    if virtual > n:
        return None
    base, extra = divmod(n, virtual)
    sizes = [base + (1 if k < extra else 0) for k in range(virtual)]
    starts = [sum(sizes[:k]) for k in range(virtual)]
    p = len(stages)
    new = []
    for s, st in enumerate(stages):
        chunks = tuple(range(starts[c * p + s], starts[c * p + s] + sizes[c * p + s]) for c in range(plan.layout.chunks))
        new.append(Stage(chunks=chunks, kind=st.kind, slots=st.slots, tp=st.tp))
    return Layout(tuple(new), plan.layout.schedule, plan.layout.microbatches, plan.layout.global_batch)


__all__ = ["Baseline", "Baselines", "baselines"]
