"""Gantt charts a person can read: the modelled timeline (:func:`timeline_gantt`, behind
``interop.gantt``) and a plan's pipeline (:func:`pipeline_gantt`, behind ``Plan.gantt``).

Timeline bars are coloured by what the slot was doing, by the cost model's op family
(``devices.estimate(...).category``): matrix work, attention, normalisation and
softmax, elementwise, memory (on-chip copies and dtype casts, gathers, index ops),
optimizer kernels; a kernel a compiled graph generated or a Triton launch is a
compiled kernel (an ATen kernel a compiled graph calls keeps its op's family);
transfers between slots or to the host and collectives are communication. A copy that stays on its slot (an autocast cast, a ``.contiguous()``)
is on-chip memory work, not a transfer.

Past a density (``DENSE_PX``: when a row's bars would average under that many pixels),
a row is drawn as time bins instead of bars: each bin is a stacked column of the
fraction of the bin each class kept the slot busy, so a 700-op step reads as its
phases (forward matmuls, backward, optimizer) instead of a barcode. The legend sits
outside the plot.
"""

from __future__ import annotations

import os
from collections import defaultdict

from devices.output_files import atomic_path

CLASSES = {
    # display class: (colour, cost-model categories)
    "matmul / conv": ("#1f77b4", ("matmul", "conv", "conv_backward", "attention_math")),
    "attention": ("#9467bd", ("attention", "attention_backward")),
    "norm / softmax": ("#17becf", ("norm", "norm_backward", "softmax", "softmax_backward", "loss")),
    "elementwise": ("#aec7e8", ("elementwise", "reduction", "creation", "pool", "pool_backward")),
    "memory (copy, cast, index)": ("#8c8c8c", ("copy", "embedding", "index", "unknown")),
    "optimizer": ("#bcbd22", ("multi_tensor",)),
    "compiled kernel": ("#e377c2", ()),
    "transfer": ("#ff7f0e", ()),
    "collective": ("#d62728", ()),
}
"""Display classes in legend order: colour and the cost model's op categories they gather."""

_BY_CATEGORY = {cat: name for name, (_, cats) in CLASSES.items() for cat in cats}

DENSE_PX = 3.0
"""Below this many pixels per bar on average, a row is drawn as stacked time bins."""

BIN_PX = 8
"""Width of one time bin, pixels."""

PLOT_PX = 1000
"""Width of the plotting area, pixels (the figure adds room for labels and the legend)."""


def record_class(record, kinds) -> str:
    """The display class of one timeline record (see :data:`CLASSES`)."""
    if record.kind == "collective":
        return "collective"
    if record.kind == "copy":
        on_chip = record.link is None or record.peer == record.slot
        return "memory (copy, cast, index)" if on_chip else "transfer"
    op = record.op
    if record.kind == "kernel":
        from interop.compile.records import INDUCTOR_PREFIX

        op = op.removeprefix(INDUCTOR_PREFIX)  # inductor:aten::mm.out: an ATen kernel a graph called
        if not op.startswith("aten::"):
            return "compiled kernel"  # a generated (fused) kernel or a Triton launch
    return _BY_CATEGORY.get(_category(kinds[record.slot], op, record.in_shapes, record.dtype), "elementwise")


_categories: dict[str, str] = {}


def _category(kind: str, op: str, shapes, dtype: str) -> str:
    # The family depends on the op's name only; the cost model is asked once per name.
    found = _categories.get(op)
    if found is None:
        import devices

        try:
            found = devices.estimate(kind, op, list(shapes), dtype or "float32").category
        except (ValueError, KeyError, TypeError):
            found = "unknown"
        _categories[op] = found
    return found


def timeline_rows(records, rack) -> dict[str, list[tuple[float, float, str]]]:
    """Row label -> (start ms, duration ms, class) of every record it shows; slots (per stream) first, links after."""
    kinds = [d.kind for d in rack.devices]
    rows: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for r in records:
        cls = record_class(r, kinds)
        start, dur = r.start_ps / 1e9, r.duration_ps / 1e9
        slots = r.participants or tuple(s for s in (r.slot, r.peer) if s is not None and s >= 0)
        for s in dict.fromkeys(slots):
            rows[f"hybrid:{s} {kinds[s]} s{r.stream if s == r.slot else 0}"].append((start, dur, cls))
        if r.link and cls in ("transfer", "collective"):
            rows[f"link {r.link}"].append((start, dur, cls))

    def order(name: str):
        if name.startswith("link"):
            return (1, 0, 0, name)
        slot, stream = name.split()[0].split(":")[1], name.split()[-1][1:]
        return (0, int(slot), int(stream), name)

    return {name: rows[name] for name in sorted(rows, key=order)}


def _binned(bars, t0: float, width: float, nbins: int) -> dict[str, list[float]]:
    """Per class, the fraction of each bin the row was busy with it."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0] * nbins)
    for start, dur, cls in bars:
        a, b = start - t0, start - t0 + dur
        first, last = int(a // width), min(nbins - 1, int(b // width))
        for k in range(max(0, first), last + 1):
            lo, hi = max(a, k * width), min(b, (k + 1) * width)
            if hi > lo:
                out[cls][k] += (hi - lo) / width
    return out


def timeline_gantt(records, rack, path: str | os.PathLike, *, title: str | None = None,
                   dense_px: float = DENSE_PX) -> str:
    """Draw the modelled timeline ``records`` of ``rack`` to a PNG (see the module doc); returns the path."""
    import matplotlib.pyplot as plt

    fig, _ = timeline_figure(records, rack, title=title, dense_px=dense_px)
    path = os.fspath(path)
    with atomic_path(path, "path") as tmp:  # a whole picture or none
        fig.savefig(tmp, dpi=fig.dpi)
    plt.close(fig)
    return path


def timeline_figure(records, rack, *, title: str | None = None, dense_px: float = DENSE_PX):
    """The figure of :func:`timeline_gantt` and, per row, ``"bars"`` or ``"bins"`` (how it was drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = timeline_rows(records, rack)
    names = list(rows)
    t0 = min((s for bars in rows.values() for s, _, _ in bars), default=0.0)
    t1 = max((s + d for bars in rows.values() for s, d, _ in bars), default=1e-6)
    span = max(t1 - t0, 1e-9)
    dpi = 100
    height = 1.4 + 0.6 * max(1, len(names))
    fig = plt.figure(figsize=(PLOT_PX / dpi + 4.6, height), dpi=dpi)
    ax = fig.add_axes((2.2 / (PLOT_PX / dpi + 4.6), 0.9 / height, (PLOT_PX / dpi) / (PLOT_PX / dpi + 4.6),
                       (height - 1.4) / height))
    ms_per_px = span / PLOT_PX
    drawn: dict[str, str] = {}
    used: set[str] = set()
    for y, name in enumerate(names):
        bars = rows[name]
        if span / max(len(bars), 1) / ms_per_px < dense_px:
            drawn[name] = "bins"
            nbins = max(1, PLOT_PX // BIN_PX)
            width = span / nbins
            fractions = _binned(bars, t0, width, nbins)
            bottom = [y + 0.4] * nbins
            for cls in CLASSES:
                frac = fractions.get(cls)
                if not frac:
                    continue
                used.add(cls)
                heights = [-0.8 * min(f, 1.0) for f in frac]
                ax.bar([t0 + (k + 0.5) * width for k in range(nbins)], heights, width=width, bottom=bottom,
                       color=CLASSES[cls][0], linewidth=0, align="center")
                bottom = [b + h for b, h in zip(bottom, heights)]
        else:
            drawn[name] = "bars"
            for cls in CLASSES:
                spans = [(s, max(d, ms_per_px * 0.5)) for s, d, c in bars if c == cls]
                if spans:
                    used.add(cls)
                    ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=CLASSES[cls][0], edgecolor="white",
                                   linewidth=0.3)
    ax.set_yticks(range(len(names)), labels=names, fontsize="small")
    ax.set_ylim(len(names) - 0.4, -0.6)
    ax.set_xlim(t0, t0 + span)
    ax.set_xlabel("modelled time (ms)")
    binned_rows = sum(1 for v in drawn.values() if v == "bins")
    note = f"; {binned_rows} dense row(s) drawn as {BIN_PX}-px bins (busy fraction per class)" if binned_rows else ""
    ax.set_title(title or f"modelled timeline, rack {rack.name}", fontsize="medium")
    fig.text(0.01, 0.01, f"every time is modelled by the cost model, not measured{note}", fontsize="x-small",
             color="#555555")
    handles = [Patch(color=CLASSES[c][0], label=c) for c in CLASSES if c in used]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return fig, drawn


PHASE_COLOURS = {"forward": "#1f77b4", "backward": "#2ca02c", "send": "#ff7f0e", "reduce": "#d62728",
                 "optimizer": "#bcbd22", "bubble": "#eeeeee"}


def pipeline_gantt(stages, events, path: str | os.PathLike, *, title: str, tails=(), total: float | None = None,
                   note: str = "") -> str:
    """Stages x microbatches on one page.

    ``stages``: row labels, one per pipeline stage; ``events``: (stage, phase, chunk, microbatch, start s,
    end s) with phase 0 forward, 1 backward; ``tails``: (stage, what, start s, end s) for the work after the
    pipeline (``reduce`` = data-parallel gradient reduction, ``optimizer``); idle time up to ``total`` is
    drawn as bubble.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    end = total if total is not None else max([e[5] for e in events] + [t[3] for t in tails] + [1e-9])
    scale, unit = (1e3, "ms") if end >= 1e-3 else (1e6, "us")
    n = len(stages)
    many = len(events) > 40 * max(n, 1)
    fig, ax = plt.subplots(figsize=(14, 1.4 + 0.6 * n), dpi=100)
    busy: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s, phase, chunk, mb, start, stop in events:
        colour = PHASE_COLOURS["forward" if phase == 0 else "backward"]
        ax.broken_barh([(start * scale, (stop - start) * scale)], (s - 0.38, 0.76), facecolors=colour,
                       edgecolor="white", linewidth=0.5, alpha=1.0 if chunk % 2 == 0 else 0.7)
        busy[s].append((start, stop))
        if not many:
            ax.text((start + stop) / 2 * scale, s, f"{'F' if phase == 0 else 'B'}{mb}", ha="center", va="center",
                    fontsize="x-small", color="white")
    for s, what, start, stop in tails:
        ax.broken_barh([(start * scale, (stop - start) * scale)], (s - 0.38, 0.76),
                       facecolors=PHASE_COLOURS[what], edgecolor="white", linewidth=0.5)
        busy[s].append((start, stop))
    for s in range(n):
        t = 0.0
        gaps = []
        for a, b in sorted(busy[s]):
            if a > t:
                gaps.append((t * scale, (a - t) * scale))
            t = max(t, b)
        if end > t:
            gaps.append((t * scale, (end - t) * scale))
        ax.broken_barh(gaps, (s - 0.38, 0.76), facecolors=PHASE_COLOURS["bubble"], edgecolor="#cccccc",
                       hatch="///", linewidth=0.3)
    ax.set_yticks(range(n), labels=stages, fontsize="small")
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, end * scale)
    ax.set_xlabel(f"modelled time ({unit})")
    ax.set_title(title, fontsize="medium")
    handles = [Patch(facecolor=PHASE_COLOURS[k], label=k, hatch="///" if k == "bubble" else None,
                     edgecolor="#cccccc") for k in PHASE_COLOURS if k != "send"]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize="small", frameon=False)
    if note:
        fig.text(0.01, 0.01, note, fontsize="x-small", color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.fspath(path)
    with atomic_path(path, "path") as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path
