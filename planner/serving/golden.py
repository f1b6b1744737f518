"""Published serving results against the serving model, and the fit of its serving efficiencies.

:func:`evaluate` models every row of :mod:`planner.serving.golden_rows` (a published configuration as its source
states it, and the figures it reports) with :func:`planner.serving.serving_whatif`'s machinery; :func:`fit` solves
the serving efficiencies of one entry of :mod:`planner.serving.fitted` (a chip family, or a generation with rows of
its own) on its fit rows (:data:`FIT_ROWS`), the same factors for every row it serves. Every other row tests them
(:func:`role`); :func:`table` prints published against modelled, with each row's note.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from devices.figure import Figure
from planner.serving import fitted
from planner.serving.fitted import ServingEfficiency
from planner.serving.config import configure, spec_of
from planner.serving.run import evaluate as evaluate_config
from planner.serving.model_shape import model_shape
from planner.serving.golden_rows import (ALL_ROWS, CONTRADICTED, FOUND_ROWS, MODELS, ROWS, STATIC,  # noqa: F401
                                          GoldenRow, is_moe)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One row modelled: published and modelled value per metric."""

    row: GoldenRow
    modelled: dict
    limits_met: dict

    def errors(self) -> dict:
        """Metric -> modelled / published - 1."""
        return {k: self.modelled[k] / v - 1 for k, v in self.row.published.items()}


def _metrics(est) -> dict:
    return {"tokens_per_s": est.output_tokens_per_second, "tokens_per_s_per_chip": est.output_tokens_per_second_per_chip,
            "ttft_p50": est.ttft.p50, "tpot_p50": est.tpot.p50, "ttft_p99": est.ttft.p99, "tpot_p99": est.tpot.p99}


def evaluate_row(row: GoldenRow, *, calibrated: bool = True) -> Outcome:
    """Model one row with its stated configuration."""
    shape = model_shape(MODELS[row.model])
    spec = spec_of(row.rack)
    workload = row.modelled_workload()
    config = configure(shape, spec, parallel=row.parallel, precision=row.precision, prefill=None, decode=None,
                       engine=row.engine, workload=workload)
    est = evaluate_config(shape, spec, config, workload, record=False, calibrated=calibrated)
    m = _metrics(est)
    return Outcome(row, {k: m[k] for k in row.published},
                   {k: (m[k], bound, m[k] <= bound) for k, bound in (row.limits or {}).items()})


def evaluate(rows: Iterable[GoldenRow] = ALL_ROWS, *, calibrated: bool = True) -> list[Outcome]:
    """Model every row."""
    return [evaluate_row(r, calibrated=calibrated) for r in rows]


def role(row: GoldenRow) -> str:
    """``fit (ENTRY)`` for a row an entry of :mod:`planner.serving.fitted` was fitted to, else ``test``."""
    entries = [entry for entry, rows in FIT_ROWS.items() if row in rows]
    return f"fit ({', '.join(entries)})" if entries else "test"


def _summary(errors: Sequence[float], what: str) -> str:
    if not errors:
        return f"no {what} figures"
    return (f"{what}: median {statistics.median(errors):.1%}, largest {max(errors):.1%} over {len(errors)} "
            f"figures")


def table(outcomes: Sequence[Outcome]) -> str:
    """Published vs modelled per metric with each row's role (Markdown), and the median and largest error of the
    fit and of the test figures."""
    names = {"tokens_per_s": "output tok/s", "tokens_per_s_per_chip": "output tok/s/chip", "ttft_p50": "TTFT p50",
             "tpot_p50": "TPOT p50"}
    lines = ["| row | model | rack | parallel | precision | metric | published | modelled | error | role |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {"fit": [], "test": [], "moe fit": [], "moe test": []}
    for o in outcomes:
        r = o.row
        par = " x ".join(f"{k} {v}" for k, v in r.parallel.items())
        kind = role(r)
        for k, pub in r.published.items():
            mod = o.modelled[k]
            err = mod / pub - 1
            errors[("moe " if is_moe(r) else "") + ("test" if kind == "test" else "fit")].append(abs(err))
            fmt = (lambda x: f"{x * 1e3:,.2f} ms") if k.startswith(("ttft", "tpot")) else (lambda x: f"{x:,.0f}")
            lines.append(f"| {r.label} | {r.model} | {r.rack} | {par} | {r.precision} | {names[k]} | {fmt(pub)} | "
                         f"{fmt(mod)} | {err:+.1%} | {kind} |")
        for k, (value, bound, ok) in o.limits_met.items():
            lines.append(f"| {r.label} | {r.model} | {r.rack} | {par} | {r.precision} | {k} <= {bound:g} s | "
                         f"(limit) | {value * 1e3:,.1f} ms | {'met' if ok else 'NOT met'} | {kind} |")
    lines.append("")
    lines.append(f"dense models: {_summary(errors['fit'], 'fit')}; {_summary(errors['test'], 'test (out of sample)')}; "
                 f"mixtures of experts: {_summary(errors['moe fit'], 'fit')}; "
                 f"{_summary(errors['moe test'], 'test (out of sample)')}")
    notes = [f"- {o.row.label}: {o.row.note}" for o in outcomes if o.row.note]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines)


def fit_loss(efficiency: ServingEfficiency, rows: Sequence[GoldenRow]) -> float:
    """Sum over the rows' metrics of log(modelled / published) squared, with ``efficiency`` as its entry."""
    saved = dict(fitted.FITTED)
    fitted.FITTED[efficiency.family] = efficiency
    fitted.serving_efficiency.cache_clear()
    try:
        return sum(math.log1p(e) ** 2 for o in evaluate(rows) for e in o.errors().values())
    finally:
        fitted.FITTED.clear()
        fitted.FITTED.update(saved)
        fitted.serving_efficiency.cache_clear()


_NOTES = {"gemm": "factor on GEMMs' compute time", "gemm_fp4": "factor on FP4 GEMMs' compute time",
          "memory": "factor on kernels' memory time (attention's aside)", "attention": "factor on attention time",
          "iteration": "seconds per engine iteration outside the kernels",
          "expert_decode": "share of an expert's weights streamed again per decode token routed to it"}


def _efficiency(family: str, values: dict, rows: Sequence[GoldenRow]) -> ServingEfficiency:
    """The stored entry ``family`` with ``values`` as fitted figures naming ``rows`` (its other figures kept)."""
    fitted_to = "; ".join(r.label for r in rows)
    figs = {k: Figure(v, "s" if k == "iteration" else "", f"fitted to published serving rows ({fitted_to})",
                      "calibrated", f"{_NOTES[k]}; grid search, least squares on log(modelled/published) over those "
                                    f"rows only (planner.serving.golden.fit)")
            for k, v in values.items()}
    return replace(fitted.FITTED[family], **figs)


FIT_GRID = {
    "gpu": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(21)],
            "memory": [round(1.0 + 0.05 * i, 2) for i in range(21)],
            "attention": [round(0.5 + 0.1 * i, 1) for i in range(26)],
            "iteration": [round(0.00025 * i, 5) for i in range(21)]},
    "blackwell": {"gemm_fp4": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                  "attention": [round(0.5 + 0.05 * i, 2) for i in range(41)],
                  "expert_decode": [round(0.0025 * i, 4) for i in range(41)]},
    "trainium": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                 "memory": [round(1.0 + 0.05 * i, 2) for i in range(41)],
                 "attention": [round(1.0 + 0.5 * i, 1) for i in range(39)],
                 "iteration": [round(0.0005 * i, 4) for i in range(21)]},
    "trn2": {"gemm": [round(1.0 + 0.05 * i, 2) for i in range(41)],
             "iteration": [round(0.0005 * i, 4) for i in range(41)]},
}
"""The values each entry's fitted factors may take (grids keep the fit reproducible); an entry's other factors are
not fitted (Blackwell keeps the GPU family's; Trn2 its stated attention and Trainium1's memory factor)."""

FIT_START = {"gpu": {"gemm": 1.25, "memory": 1.0, "attention": 1.2, "iteration": 0.0},
             "blackwell": {"gemm_fp4": 1.35, "attention": 1.0, "expert_decode": 0.0},
             "trainium": {"gemm": 1.9, "memory": 1.0, "attention": 10.0, "iteration": 0.008},
             "trn2": {"gemm": 2.0, "iteration": 0.007}}
"""Where each entry's descent starts (the factors of the previous fit, or those the entry would inherit;
Trainium's time per iteration near the constant gap between its published and its kernels' TPOT)."""


def _labelled(*labels: str) -> tuple[GoldenRow, ...]:
    by_label = {r.label: r for r in ALL_ROWS}
    return tuple(by_label[label] for label in labels)


FIT_ROWS = {"gpu": tuple(r for r in ROWS if r.rack.startswith(("h100", "h200"))),
            "blackwell": _labelled("TRT-LLM B200 TP1 1000/1000", "TRT-LLM B200 TP1 1024/8192",
                                   "TRT-LLM B200 TP1 8192/1024", "TRT-LLM qwen3-30b-a3b B200 TP1 1000/1000"),
            "trainium": tuple(r for r in ROWS if r.rack.startswith("trn")),
            "trn2": _labelled("NxDI trn2 TP64 b1 10000/1500", "NxDI trn2 TP64 b1 405B 10000/1785"),
            "nim": _labelled(fitted.NIM_FIT_ROW)}
"""The rows each entry is fitted to: the GPU family and Trainium1 on all of the given rows of their chips;
Blackwell on three B200 NVFP4 Llama rows and the Qwen3 30B A3B B200 1000/1000 row (the one MoE fit row: its
decode-heavy iterations fix the experts' decode weight passes; its other B200 rows, every GB200 row and every Qwen3
235B row test it); Trn2 on both published Trn2 rows (no Trn2 row is left to test it: the Trn1 rows test none of it
either); NIM's frontend time per streamed token (:data:`planner.serving.fitted.NIM_HOST_PER_TOKEN`, an engine
figure, not an entry) on one NIM Llama 3.1 8B row's output tokens/s (:func:`fit_host_per_token`)."""


HOST_PER_TOKEN_GRID = tuple(round(1e-6 * us, 9) for us in range(0, 151))
"""The values :func:`fit_host_per_token` may give: whole microseconds, 0 to 150."""


def fit_host_per_token(row: GoldenRow | None = None, grid: Sequence[float] = HOST_PER_TOKEN_GRID) -> float:
    """The host time per streamed token (:attr:`planner.serving.engine.Engine.host_per_token`) on ``grid`` that
    brings ``row``'s modelled output tokens/s nearest its published figure (log error; default: the one row of
    ``FIT_ROWS["nim"]``), the row's other metrics left to test it."""
    row = FIT_ROWS["nim"][0] if row is None else row
    if "tokens_per_s" not in row.published:
        raise ValueError(f"row: {row.label!r} publishes no output tokens/s to fit the host time on")

    def loss(value: float) -> float:
        trial = replace(row, engine=replace(row.engine, host_per_token=value))
        return math.log1p(evaluate_row(trial).errors()["tokens_per_s"]) ** 2
    return min(grid, key=loss)


def fit(family: str, rows: Sequence[GoldenRow] | None = None, grid: dict | None = None,
        start: dict | None = None, progress=None) -> tuple[ServingEfficiency, float]:
    """The family's serving efficiencies minimising :func:`fit_loss` over ``rows`` (default
    :data:`FIT_ROWS`): coordinate descent on :data:`FIT_GRID` from ``start`` (default :data:`FIT_START`), each
    factor in turn stepping to a neighbouring grid value while that lowers the loss, until no factor's
    neighbour does (a coordinate-wise optimum on the grid; each evaluation models every row, so the descent
    asks for neighbours only)."""
    rows = FIT_ROWS[family] if rows is None else tuple(rows)
    grid = grid or FIT_GRID[family]
    start = start or FIT_START[family]
    current = {k: min(grid[k], key=lambda v: abs(v - start[k])) for k in grid}
    best = fit_loss(_efficiency(family, current, rows), rows)
    changed = True
    while changed:
        changed = False
        for name, values in grid.items():
            for step in (1, -1):
                while True:
                    j = values.index(current[name]) + step
                    if not 0 <= j < len(values):
                        break
                    trial = dict(current, **{name: values[j]})
                    loss = fit_loss(_efficiency(family, trial, rows), rows)
                    if progress is not None:
                        progress(trial, loss)
                    if loss >= best - 1e-12:
                        break
                    best, current, changed = loss, trial, True
    return _efficiency(family, current, rows), best


__all__ = ["ALL_ROWS", "CONTRADICTED", "FIT_GRID", "FIT_ROWS", "FIT_START", "HOST_PER_TOKEN_GRID", "FOUND_ROWS",
           "MODELS", "ROWS", "GoldenRow", "Outcome", "evaluate", "evaluate_row", "fit",
           "fit_host_per_token", "fit_loss", "is_moe", "role", "table"]

