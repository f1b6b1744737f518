"""One modelled step as a picture: the pipeline schedule per stage, and where each stage's time went."""

from __future__ import annotations

import os

from devices.output_files import atomic_path

_PHASE = {0: ("forward", "#4C9BE8"), 1: ("backward", "#1F4E8C")}
_PARTS = (("compute", "#1F4E8C"), ("tp_comm", "#E8743B"), ("cp_comm", "#F2B134"), ("ep_comm", "#A05EB5"),
          ("dp_comm", "#D64550"), ("pp_comm", "#7F7F7F"), ("host_comm", "#8C564B"), ("bubble", "#D9D9D9"),
          ("optimizer", "#19A979"))
_MAX_BARS = 4000
"""Schedule actions drawn one by one per stage; beyond it, runs of adjacent actions merge into one bar."""


def plot_step(estimate, path: str | os.PathLike) -> str:
    """Draw ``estimate``'s step to ``path`` (PNG): schedule on top, time per stage below. Returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from planner.report import chips_label, configuration

    result = estimate.result  # its events replay the schedule the estimate was priced with
    stages = result.stages
    p = len(stages)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 2.2 + 0.45 * p + 2.6), height_ratios=[max(1, p), 3],
                                      constrained_layout=True)
    per_stage: dict[int, list[tuple[float, float, int]]] = {}
    for s, phase, c, i, start, end in result.events:
        per_stage.setdefault(s, []).append((start, end, phase))
    for s, bars in per_stage.items():
        bars.sort()
        if len(bars) > _MAX_BARS:  # merge touching actions of one phase: the shape of the schedule stays
            merged = [list(bars[0])]
            for start, end, phase in bars[1:]:
                if phase == merged[-1][2] and start - merged[-1][1] < 1e-9 * max(1.0, end):
                    merged[-1][1] = end
                else:
                    merged.append([start, end, phase])
            bars = [tuple(b) for b in merged]
        for phase in (0, 1):
            spans = [(a, b - a) for a, b, ph in bars if ph == phase]
            top.broken_barh(spans, (s - 0.4, 0.8), facecolors=_PHASE[phase][1],
                            edgecolor="white", linewidth=0.6 if len(bars) <= 400 else 0)
    top.set_yticks(range(p), [f"stage {s} ({st.kind}, tp {st.tp} x dp {st.dp})" for s, st in enumerate(stages)])
    top.invert_yaxis()
    top.set_xlabel("seconds into the step (modelled)")
    top.set_xlim(0, result.seconds)
    top.set_title(f"{estimate.model} on {estimate.rack} ({chips_label(estimate)}): one step, "
                  f"{result.seconds:,.3f} s modelled\n{configuration(estimate.parallel)}", fontsize=10)
    top.legend(handles=[Patch(color=c, label=f"{n} (modelled)") for n, c in _PHASE.values()],
               loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)

    left = [0.0] * p
    for name, color in _PARTS:
        values = []
        for st in stages:
            if name == "compute":
                values.append(st.compute)
            elif name == "bubble":
                values.append(max(0.0, st.idle))
            elif name == "optimizer":
                values.append(st.optimizer)
            else:
                values.append(st.exposed.get(name.removesuffix("_comm"), 0.0))
        if not any(values):
            continue
        bottom.barh(range(p), values, left=left, color=color, label=name.replace("_comm", " comm (exposed)"),
                    height=0.7)
        left = [a + b for a, b in zip(left, values)]
    bottom.set_yticks(range(p), [f"stage {s}" for s in range(p)])
    bottom.invert_yaxis()
    bottom.set_xlabel("seconds per step, by where the time goes (modelled)")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    if estimate.projected:
        fig.text(0.01, 0.005, "PROJECTED chip figures in use", color="#D64550", fontsize=9)
    path = os.fspath(path)
    with atomic_path(path, "path") as tmp:  # a whole picture or none
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


__all__ = ["plot_step"]
