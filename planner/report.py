"""What-ifs as text: one estimate as labelled rows, several side by side (every figure labelled modelled)."""

from __future__ import annotations

from typing import Sequence

import devices


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:,.2f} {prefix}{unit}"
    return f"{x:,.2f} {unit}"


def configuration(parallel: dict) -> str:
    """``tp 8 x pp 16 (vp 2) x cp 1 x dp 8192, zero 1, mbs 1 x 4 microbatches, recompute none``."""
    p = parallel
    parts = [f"tp {p['tp']}", f"pp {p['pp']}" + (f" (vp {p['vp']})" if p.get("vp", 1) > 1 else ""), f"cp {p['cp']}"]
    if p.get("ep", 1) > 1:
        parts.append(f"ep {p['ep']}")
    dp = p["dp"]
    parts.append(f"dp {'/'.join(map(str, dp)) if isinstance(dp, (list, tuple)) else dp}")
    text = " x ".join(parts)
    text += ", fsdp" if p.get("fsdp") else f", zero {p.get('zero', 1)}"
    text += f", microbatch {p['microbatch']} x {p.get('microbatches', '?')}"
    rc = p.get("recompute")
    if rc:
        text += f", recompute {'/'.join(rc) if isinstance(rc, (list, tuple)) else rc}"
    if p.get("stages"):
        text += f"; stages {', '.join(p['stages'])}"
    if p.get("idle_chips"):
        text += f", {p['idle_chips']:,} chips idle"
    return text


def chips_label(estimate) -> str:
    """``9,216 trn3 (8,192 used)``, with ``(projected)`` after projected kinds."""
    used: dict[str, int] = {}
    for st in estimate.result.stages:
        used[st.kind] = used.get(st.kind, 0) + len(st.slots)
    counts = estimate.rack_counts or used
    parts = []
    for kind, n in counts.items():
        text = f"{n:,} {kind}" + (" (projected)" if devices.chip(kind).projected else "")
        if used.get(kind, 0) != n:
            text += f" ({used.get(kind, 0):,} used)"
        parts.append(text)
    return " + ".join(parts)


def _money_rows(est) -> list[tuple[str, str]]:
    """Energy and cost per token and per step, with the price basis and the figures' statuses, or why unset."""
    money = est.economics
    if money is None:  # an estimate built without the chips' economics
        return []
    energy = ("unset: " + money.power.reason if money.joules is None else
              f"{money.joules_per_token:,.3f} J per token, {_si(money.joules, 'J')} per step "
              f"(board power; {', '.join(money.power.statuses)})")
    cost = (f"unset on {money.basis}: {money.price.reason}" if money.usd is None else
            f"${money.usd_per_million_tokens:,.3f} per M tokens, ${money.usd:,.3f} per step "
            f"({money.basis}; {', '.join(money.price.statuses)})")
    return [("energy (modelled)", energy), ("cost (modelled)", cost)]


def kernels_label(kernels: str) -> str:
    """``eager: the ops the slot runs as written ...``: the kernel choice an estimate priced and what it means."""
    from planner.kernels import KERNELS

    return f"{kernels}: {KERNELS[kernels]}"


def step_efficiency_label(est) -> str:
    """How the step efficiencies of each kind used were obtained (fitted, or inherited from the family's fit)."""
    from planner.fitted_efficiency import step_efficiency

    if getattr(est, "kernels", "fused") != "fused":
        return f"none applied (kernels={est.kernels}: the per-op cost model alone)"
    kinds = dict.fromkeys(st.kind for st in est.result.stages)
    parts = []
    for kind in kinds:
        eff = step_efficiency(kind)
        parts.append(f"{kind}: " + ("none fitted (the per-op cost model alone)" if eff is None else eff.label(kind)))
    return "; ".join(parts)


def estimate_rows(est) -> list[tuple[str, str]]:
    """(label, value) rows of one estimate."""
    mem = est.memory_per_chip
    total = est.seconds or 1.0
    rows = [
        ("model", est.model),
        ("rack", f"{est.rack}: {chips_label(est)}" + ("  [PROJECTED chip figures]" if est.projected else "")),
        ("configuration", configuration(est.parallel)),
        ("kernels", kernels_label(est.kernels)),
        ("step time (modelled)", f"{est.seconds:,.3f} s"),
        ("tokens/s (modelled)", f"{est.tokens_per_second:,.0f}"),
        ("tokens/s per chip (modelled)", f"{est.tokens_per_second_per_chip:,.1f}"),
        ("model TFLOP/s per chip (modelled)", f"{est.model_tflops_per_chip:,.1f}"),
        ("MFU (modelled)", f"{est.mfu:.1%}"),
        ("memory per chip (modelled)",
         f"weights {_gb(mem.weights)}, gradients {_gb(mem.gradients)}, optimizer {_gb(mem.optimizer)}, "
         f"activations {_gb(mem.activations)}: {_gb(mem.total)} of {_gb(mem.capacity)}"),
        ("fits", "yes" if est.fits else "NO"),
        *_money_rows(est),
        ("step efficiencies", step_efficiency_label(est)),
    ]
    for key, value in est.breakdown.items():
        label = key.replace("_comm", " communication (exposed)") if key.endswith("_comm") else key
        if key.endswith("_comm") and value == 0.0:
            continue
        rows.append((f"  {label} (modelled)", f"{value:,.3f} s ({value / total:.1%})"))
    if not est.fits and est.advice:
        rows.append(("does not fit", est.advice))
    return rows


def compare_table(estimates: Sequence, width: int | None = None) -> str:
    """Several estimates side by side, one column per rack under its name, within ``width`` columns of text
    (default :data:`devices.text_table.MAX_WIDTH`): long cells wrap between words, and racks that do not fit side
    by side follow in another block (:func:`devices.text_table.table`). No cell is cut."""
    from devices.text_table import MAX_WIDTH, table

    columns = [dict(e.rows()) for e in estimates]
    labels: list[str] = []
    for e in estimates:
        for label, _ in e.rows():
            if label not in labels:
                labels.append(label)
    return table([""] + [e.rack for e in estimates], [[label] + [c.get(label, "") for c in columns] for label in labels],
                 align="l" * (len(estimates) + 1), rule=False, width=width or MAX_WIDTH)


__all__ = ["chips_label", "compare_table", "configuration", "estimate_rows", "kernels_label", "step_efficiency_label"]
