"""Serving estimates as text, as a latency-throughput plot, as a Chrome trace (every figure labelled modelled)."""

from __future__ import annotations

import json
import os
from typing import Sequence

import devices


def _pool_text(entry: dict) -> str:
    cut = " x ".join(f"{k} {entry[k]}" for k in ("tp", "pp", "ep") if entry.get(k, 1) > 1) or "1 chip"
    projected = " (projected)" if devices.chip(entry["kind"]).projected else ""
    return (f"{entry['chips']:,} {entry['kind']}{projected} as {entry['instances']:,} x ({cut}), "
            f"{entry['precision']}, weights {entry['weights_gb']:,.1f} GB + KV cache {entry['kv_cache_gb']:,.1f} GB "
            f"per chip")


def configuration_rows(parallel: dict) -> list[tuple[str, str]]:
    rows = []
    for role in ("colocated", "prefill", "decode"):
        if role in parallel:
            rows.append((f"{'replicas' if role == 'colocated' else role + ' pool'}", _pool_text(parallel[role])))
    from planner.kernels import SERVING_ENGINES

    kernels = parallel["kernels"]
    text = (f"{kernels}: {SERVING_ENGINES[kernels]}, batch up to {parallel['max_batch']:,}, "
            f"{parallel['max_num_tokens']:,} tokens per iteration")
    if parallel.get("nxd_inference"):
        text += (f", NxD Inference's models on {'/'.join(parallel['nxd_inference'])} (its experts' dispatch, its "
                 f"fitted entry)")
    if parallel.get("static_decode"):
        text += (f", a static decode graph ({parallel['max_batch']:,} lines over {parallel['static_decode']:,} "
                 f"cached tokens each, every step)")
    if parallel.get("host_per_token"):
        text += (f", a frontend's {parallel['host_per_token'] * 1e6:,.0f} us of host time per streamed token "
                 f"(overlapped)")
    rows.append(("engine", text))
    return rows


def estimate_rows(est) -> list[tuple[str, str]]:
    """(label, value) rows of one :class:`ServingEstimate`."""
    rows = [("model", est.model),
            ("rack", est.rack + ("  [PROJECTED chip figures]" if est.projected else "")),
            ("workload", est.workload.describe() if est.workload is not None else "")]
    rows += configuration_rows(est.parallel)
    rows += [
        ("TTFT (modelled)", est.ttft.ms()),
        ("TPOT (modelled)", est.tpot.ms()),
        ("end to end (modelled)", est.e2e.ms()),
        ("output tokens/s (modelled)", f"{est.output_tokens_per_second:,.0f}"),
        ("output tokens/s per chip (modelled)", f"{est.output_tokens_per_second_per_chip:,.1f}"),
        ("requests/s (modelled)", f"{est.requests_per_second:,.2f}"),
        ("max concurrency, KV-limited (modelled)", f"{est.max_concurrency:,} sequences"),
        ("KV cache per token", f"{est.kv_bytes_per_token:,} B"),
        ("$ per million output tokens (modelled)",
         f"${est.cost_per_million_output_tokens:,.3f}" if est.cost_per_million_output_tokens is not None
         else f"n/a: {est.missing.get('cost_per_million_output_tokens', '')}"),
        ("J per output token (modelled)",
         f"{est.joules_per_output_token:,.3f} J (board power)" if est.joules_per_output_token is not None
         else f"n/a: {est.missing.get('joules_per_output_token', '')}"),
    ]
    if est.kv_transfer is not None:
        rows.append(("KV transfer per request (modelled)", est.kv_transfer.ms()))
    for phase, parts in est.breakdown.items():
        total = sum(parts.values()) or 1.0
        text = ", ".join(f"{k} {v * 1e3:,.2f} ms ({v / total:.0%})" for k, v in parts.items() if v > 0)
        rows.append((f"{phase} iteration (modelled)", f"{est.bound[phase]}-bound: {text}"))
    if est.goodput is not None:
        rows.append(("goodput within the SLO (modelled)",
                     f"{est.goodput:,.2f} requests/s ({est.slo_attainment:.1%} of requests)"))
    return rows


def compare_table(estimates: Sequence, labels: Sequence[str] | None = None, width: int | None = None) -> str:
    """Several estimates side by side (one column each, under ``labels`` or the racks' names); rows equal in every
    column are printed once above. Within ``width`` columns of text (default :data:`devices.text_table.MAX_WIDTH`):
    long cells wrap between words, columns that do not fit side by side follow in another block
    (:func:`devices.text_table.table`). No cell is cut."""
    from devices.text_table import MAX_WIDTH, table

    width = width or MAX_WIDTH
    cols = [dict(e.rows()) for e in estimates]
    keys: list[str] = []
    for e in estimates:
        for k, _ in e.rows():
            if k not in keys:
                keys.append(k)
    shared = [k for k in keys if len({c.get(k) for c in cols}) == 1]
    keys = [k for k in keys if k not in shared]
    head = list(labels) if labels else [e.rack for e in estimates]
    parts = []
    if shared:
        parts.append(table(None, [[k, cols[0][k]] for k in shared], align="ll", rule=False, width=width))
    if keys:
        parts.append(table([""] + head, [[k] + [c.get(k, "") for c in cols] for k in keys],
                           align="l" * (len(cols) + 1), rule=False, width=width))
    return "\n".join(parts)


def curve(est, concurrencies=None) -> list[tuple[int, object]]:
    """(concurrency, estimate) as concurrency grows up to the KV-limited maximum."""
    from planner.serving.workload import Workload

    wl = est.workload
    top = max(1, min(est.max_concurrency, est.parallel.get("max_batch", 2048)))
    if concurrencies is None:
        concurrencies, c = [], 1
        while c < top:
            concurrencies.append(c)
            c *= 2
        concurrencies.append(top)
    out = []
    for c in concurrencies:
        w = Workload(list(wl.lengths), requests=max(4 * c, 16), concurrency=c, seed=wl.seed,
                     max_output_tokens=wl.max_output_tokens)
        out.append((c, est.rerun(w)))
    return out


def plot_curve(est, path, concurrencies=None) -> str:
    """Draw TTFT and TPOT (p50) against output tokens/s per chip as concurrency grows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = curve(est, concurrencies)
    x = [e.output_tokens_per_second_per_chip for _, e in points]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, attr, title in ((a, "ttft", "TTFT p50 (ms)"), (b, "tpot", "TPOT p50 (ms)")):
        y = [getattr(e, attr).p50 * 1e3 for _, e in points]
        ax.plot(x, y, marker="o")
        for (c, _), xi, yi in zip(points, x, y):
            ax.annotate(str(c), (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel("output tokens/s per chip (modelled)")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{est.model} on {est.rack}: latency vs throughput as concurrency grows (labels), modelled"
                 + (" [PROJECTED]" if est.projected else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)


def write_trace(est, path) -> str:
    """The simulated iterations and KV transfers as Chrome trace events (one track per instance and link)."""
    tracks: dict[str, int] = {}
    events = []
    for e in est.events:
        tid = tracks.setdefault(e.track, len(tracks))
        events.append({"name": e.name, "ph": "X", "pid": 0, "tid": tid, "ts": e.start * 1e6,
                       "dur": e.duration * 1e6, "cat": "modelled"})
    meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
            for name, tid in tracks.items()]
    meta.append({"name": "process_name", "ph": "M", "pid": 0,
                 "args": {"name": f"{est.model} on {est.rack} (modelled serving)"}})
    with open(path, "w") as f:
        json.dump({"traceEvents": meta + events, "displayTimeUnit": "ms"}, f)
    return os.fspath(path)


__all__ = ["compare_table", "configuration_rows", "curve", "estimate_rows", "plot_curve", "write_trace"]
