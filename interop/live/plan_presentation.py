"""How a plan is shown: the printed table, the JSON document and the one-page Gantt chart of its modelled
step (:meth:`Plan.table`, :meth:`Plan.to_json`, :meth:`Plan.gantt` of :class:`~interop.live.plan.Plan`).
Every time and byte in them is modelled; a projected chip is marked."""

from __future__ import annotations

import json
import os

import devices
from devices.text_table import paragraph, table
from devices.units import format_bytes


def _slot_list(slots) -> str:
    """A stage's slots for a table: every one, or the ends of a long run (a plan on millions of chips)."""
    if len(slots) > 16:
        return f"{slots[0]}..{slots[-1]} ({len(slots):,} slots)"
    return ",".join(map(str, slots))


def _block_span(plan, chunks) -> str:
    names = plan.blocks.names
    return " + ".join(f"{c.start}-{c.stop - 1} ({names[c.start]}..{names[c.stop - 1]})"
                      if len(c) > 1 else f"{c.start} ({names[c.start]})" for c in chunks)


def plan_table(plan) -> str:
    """A :class:`~interop.live.plan.Plan` as printed text within 120 columns: its stages' layout, then their
    modelled figures, then the step (every time and byte modelled; * = projected chip)."""
    p = plan.predicted
    layout, figures = [], []
    for st in plan.stages:
        kind = st.kind + ("*" if devices.chip(st.kind).projected else "")
        layout.append([st.index, kind, _slot_list(st.slots), st.tp, st.dp, st.microbatch,
                       _block_span(plan, st.chunks)])
        figures.append([st.index, kind, f"{st.forward[0] * 1e6:.1f}", f"{st.backward[0] * 1e6:.1f}",
                        f"{st.busy * 1e3:.3f}", f"{st.idle * 1e3:.3f}", format_bytes(st.memory.total),
                        f"{100 * st.memory.total / st.memory.capacity:.2f} %"])
    head = paragraph(f"plan for {plan.blocks.name} ({len(plan.blocks)} blocks) on rack {plan.rack.name}: "
                     f"{len(plan.stages)} stage(s), {plan.schedule}, {plan.microbatches} microbatch(es) of "
                     f"{plan.global_batch // plan.microbatches} rows, objective {plan.objective}", indent="  ")
    # Two tables rather than one of 13 columns: the block names alone would leave the figures no room in 120.
    body = (table(["stage", "kind", "slots", "tp", "dp", "rows/replica", "blocks"], layout, align="rllrrrl")
            + "\n\n" + table(["stage", "kind", "fwd us/mb", "bwd us/mb", "busy ms", "idle ms", "peak mem", "of HBM"],
                              figures, align="rlrrrrrr"))
    bd = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in p.breakdown.items() if v)
    money = plan.economics()
    foot = [f"predicted step (modelled): {p.seconds * 1e3:.3f} ms  [{bd} ms on the critical stage]",
            f"search: {plan.stats.candidates} layouts bounded, {plan.stats.evaluated} evaluated with the step "
            f"model, {'exact' if plan.stats.exact else 'bounded'}, {plan.stats.seconds:.2f} s (measured)",
            f"cost (modelled): {money.cost_text()}", f"energy (modelled): {money.energy_text()}"]
    if any(devices.chip(st.kind).projected for st in plan.stages):
        foot.append("* projected chip: its figures are projections, not published specifications")
    return "\n".join([head, body] + [paragraph(line, indent="  ") for line in foot])


def plan_json(plan) -> str:
    """The plan as JSON: stages, schedule, batch split, the modelled step and per-slot figures."""
    p = plan.predicted
    doc = {
        "model": plan.blocks.name, "blocks": list(plan.blocks.names), "rack": plan.rack.name,
        "objective": plan.objective, "optimizer": plan.optimizer, "schedule": plan.schedule,
        "microbatches": plan.microbatches, "global_batch": plan.global_batch,
        "stages": [{"index": st.index, "chunks": [[c.start, c.stop] for c in st.chunks], "kind": st.kind,
                    "slots": list(st.slots), "tp": st.tp, "dp": st.dp, "microbatch": st.microbatch,
                    "forward_s": list(st.forward), "backward_s": list(st.backward), "busy_s": st.busy,
                    "idle_s": st.idle, "memory": {"weights": st.memory.weights, "gradients": st.memory.gradients,
                                                  "optimizer": st.memory.optimizer,
                                                  "activations": st.memory.activations,
                                                  "capacity": st.memory.capacity},
                    "projected": st.projected} for st in plan.stages],
        "predicted": {"seconds": p.seconds, "breakdown": p.breakdown, "exposed": p.exposed,
                      "busy_s": {str(k): v for k, v in p.busy.items()},
                      "idle_s": {str(k): v for k, v in p.idle.items()},
                      "peak_bytes": {str(k): v for k, v in p.peak_bytes.items()}, "modelled": True},
        "search": {"candidates": plan.stats.candidates, "evaluated": plan.stats.evaluated,
                   "exact": plan.stats.exact, "seconds_measured": plan.stats.seconds},
    }
    return json.dumps(doc, indent=2)

def plan_gantt(plan, path: str | os.PathLike) -> str:
    """A one-page PNG of the modelled step: stages x microbatches (forward, backward), the data-parallel
    reduction and optimizer after them, idle time as bubble."""
    from interop.charts import pipeline_gantt

    result = plan.predicted.result  # its events replay the schedule it was priced with
    labels = [f"stage {st.index}: {st.kind} x{len(st.slots)} [{_slot_list(st.slots)}] "
              f"blocks {', '.join(f'{c.start}-{c.stop - 1}' for c in st.chunks)}" for st in result.stages]
    finish = {}
    for s, _, _, _, _, end in result.events:
        finish[s] = max(finish.get(s, 0.0), end)
    tails = []
    for st in result.stages:
        t = finish.get(st.index, 0.0)
        dp_tail = st.exposed.get("dp", 0.0)
        if dp_tail > 0:
            tails.append((st.index, "reduce", t, t + dp_tail))
            t += dp_tail
        tails.append((st.index, "optimizer", t, t + st.optimizer))
    title = (f"plan for {plan.blocks.name} on {plan.rack.name}: {plan.schedule}, {plan.microbatches} "
             f"microbatches, step {result.seconds * 1e3:.3f} ms (modelled)")
    return pipeline_gantt(labels, result.events, path, title=title, tails=tails, total=result.seconds,
                          note="every time is modelled by the step model (per-op cost model, collectives "
                               "on the rack topology); hatched: idle (pipeline bubble)")


__all__ = ["plan_gantt", "plan_json", "plan_table"]
