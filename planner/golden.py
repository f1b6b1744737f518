"""Published training throughput the step model is checked against, and the fit of its step efficiencies.

The rows live in :mod:`planner.golden_rows` (re-exported here). :data:`ROWS` are NVIDIA Megatron-Bridge's
performance summary (25.11 container, FP8 current scaling, sequence length 8192) with the parallel settings of the
published recipes; :data:`FOUND_ROWS` the same tables' other Llama FP8 rows (DGX-B200, DGX-GB300, the 25.09 and
26.02-26.06 containers, NeMo 24.07); :data:`LONG_CONTEXT_ROWS` NeMo's long-sequence DGX-H100 table (4K to 1M tokens,
context parallelism up to 32), :data:`NEMO_FRAMEWORK_ROWS` NeMo Framework's 25.02 and 25.04 Llama rows and
:data:`TORCHTITAN_ROWS` torchtitan's H200 rows, each stack with its attention kernels (:data:`STACK_ATTENTION`).
:func:`evaluate` models each row with :func:`interop.whatif`'s machinery; :func:`fit` solves the step efficiencies
of a chip family (:mod:`planner.fitted_efficiency`) from chosen rows only, the same factors for every row and model,
and :func:`fit_kind` one kind's FP8 GEMM factor from its 8-GPU row (the row least confounded by communication).
:data:`FIT_ROWS` names every fit row; all others test.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import devices
from devices.figure import Figure
from planner.block_pricing import use
from planner.fitted_efficiency import FITTED, StepEfficiency
from planner.models import model_blocks
from planner.parallel import Parallel
from planner.estimate import StepEstimate, estimate_from_result, run_config
from planner.golden_rows import (  # noqa: F401  (the rows, re-exported: golden.ALL_ROWS is what tests read)
    ALL_ROWS, FOUND_ROWS, LONG_CONTEXT_ROWS, NEMO_FRAMEWORK_ROWS, ROWS, SOURCE, SOURCES, TFLOPS_MISPRINTED,
    TORCHTITAN_ROWS, GoldenRow, _SUMMARY, nemo_llama2_flops_per_token)


FIT_SYSTEM = "DGX-H100"
"""The rows the GPU family's step efficiencies are fitted to (those of :data:`ROWS`)."""

KIND_FIT_ROW = 3
"""Index in :data:`ROWS` of the row GB200's own FP8 GEMM factor is fitted to (Llama3 8B on 8 GB200: the
row least confounded by communication); the other GB200 rows test it."""

FIT_ROWS: dict[str, tuple[GoldenRow, ...]] = {
    "gpu": tuple(r for r in ROWS if r.system == FIT_SYSTEM),
    "gb200": (ROWS[KIND_FIT_ROW],),
    "b200": (FOUND_ROWS[0],),
    "gb300": (FOUND_ROWS[2],),
}
"""The rows each entry of :data:`planner.fitted_efficiency.FITTED` (GPU side) is fitted to: the GPU family on the
three 25.11 DGX-H100 rows; each Blackwell kind's FP8 GEMM factor on its 25.11 Llama3 8B row. Every other row
tests them."""


@dataclass(frozen=True, slots=True)
class Outcome:
    row: GoldenRow
    estimate: StepEstimate

    @property
    def tokens_per_gpu(self) -> float:
        return self.estimate.tokens_per_second_per_chip

    @property
    def error(self) -> float:
        """Modelled / published - 1 (tokens/s/GPU)."""
        return self.tokens_per_gpu / self.row.tokens_per_gpu - 1


STACK_ATTENTION = {"megatron-core": True, "nemo-2024": False, "torchtitan": False}
"""Whether a stack's fused attention takes the fitted attention factor (:attr:`StepEfficiency.attention`, fitted on
Megatron-Bridge rows: cuDNN / FlashAttention-3-class kernels; NeMo 2.0 and Megatron-Bridge from 2025). torchtitan
calls PyTorch's ``scaled_dot_product_attention``, whose flash backend is FlashAttention-2, the curve the cost model
is calibrated on (devices/cost/efficiency.py): no factor. NeMo's 2024 containers (24.03, 24.07: PyTorch 24.02 base
image, Transformer Engine of early 2024) predate FlashAttention-3 (July 2024, arXiv:2407.08608): priced as
FlashAttention-2 too: an assumption, not fitted (the cost model's own FlashAttention-2 calibration), but made after
their long-sequence rows came out 5-108 % too fast with the Megatron-Core factor, so those rows do not test it
blind."""


def _stack_table(stack: str) -> dict[str, StepEfficiency] | None:
    """The efficiencies a stack runs with, from the current ones (None: as they are)."""
    if STACK_ATTENTION[stack]:
        return None
    return {k: (replace(v, attention=None) if v.attention is not None else v) for k, v in FITTED.items()}


def evaluate(rows: Iterable[GoldenRow] = ALL_ROWS) -> list[Outcome]:
    """Model every row (FP8, the row's parallel settings and recompute, its stack's attention:
    :data:`STACK_ATTENTION`); rows of several containers that share a recipe and a stack are modelled once (within
    this call: a fit changes the factors between calls)."""
    rows = list(rows)
    done: dict[int, Outcome] = {}
    for stack in dict.fromkeys(r.stack for r in rows):
        mine = [i for i, r in enumerate(rows) if r.stack == stack]
        table = _stack_table(stack)
        if table is None:
            found = _evaluate([rows[i] for i in mine])
        else:
            with use(table):
                found = _evaluate([rows[i] for i in mine])
        done.update(zip(mine, found))
    return [done[i] for i in range(len(rows))]


def _evaluate(rows: list[GoldenRow]) -> list[Outcome]:
    out, modelled = [], {}
    for row in rows:
        key = (row.model, row.gpus, row.rack, row.global_batch, row.microbatch, row.tp, row.pp, row.cp, row.vp,
               row.fsdp, row.recompute, row.seq_len)
        if key not in modelled:
            blocks = model_blocks(row.model)
            spec = devices.parse_rack(row.rack)
            nodes = len(spec)
            par = Parallel(tp=row.tp, pp=row.pp, cp=row.cp, vp=row.vp, fsdp=row.fsdp, microbatch=row.microbatch,
                           dp=row.gpus // (row.tp * row.pp * row.cp))
            assert row.gpus <= nodes
            result, used = run_config(blocks, spec, par, global_batch=row.global_batch, seq_len=row.seq_len,
                                      precision="fp8", recompute=row.recompute, optimizer="adamw")
            modelled[key] = estimate_from_result(result, spec, used, precision="fp8", model=blocks.name)
        out.append(Outcome(row, modelled[key]))
    return out


def role(row: GoldenRow) -> str:
    """``fit (GPU family)``, ``fit (KIND FP8 GEMMs)`` for a fit row (:data:`FIT_ROWS`), else ``test``."""
    for entry, rows in FIT_ROWS.items():
        if row in rows:
            return "fit (GPU family)" if entry == "gpu" else f"fit ({entry} FP8 GEMMs)"
    return "test"


def table(outcomes: Sequence[Outcome]) -> str:
    """Published vs modelled, error per row (Markdown)."""
    lines = ["| model | GPUs | system | container | TP | PP | CP | VP | FSDP | published tok/s/GPU | modelled tok/s/GPU "
             "| error | published TFLOP/s/GPU | modelled TFLOP/s/GPU | role |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        r = o.row
        lines.append(f"| {r.model} | {r.gpus:,} | {r.system} | {r.container} | {r.tp} | {r.pp} | {r.cp} | "
                     f"{r.vp if r.vp > 1 else '-'} | {int(r.fsdp)} | {r.tokens_per_gpu:,.0f} | {o.tokens_per_gpu:,.0f} | "
                     f"{o.error:+.1%} | {f'{r.tflops_per_gpu:,.0f}' if r.tflops_per_gpu else '-'} | "
                     f"{o.estimate.model_tflops_per_chip:,.0f} | "
                     f"{role(r)} |")
    fit = [abs(o.error) for o in outcomes if role(o.row) != "test"]
    test = [abs(o.error) for o in outcomes if role(o.row) == "test"]
    notes = [f"- {r.label}: {r.note}" for r in (o.row for o in outcomes) if r.note]
    lines.append("")
    lines.append(f"fit rows: median {_median(fit)}, largest {_largest(fit)} over {len(fit)}; test rows (out of sample): "
                 f"median {_median(test)}, largest {_largest(test)} over {len(test)} (all figures modelled; "
                 f"published: {_SUMMARY} and its archive, for 24.07 NVIDIA/NeMo's performance summary, for 24.03.01 "
                 f"its long-sequence table, for 25.02 and 25.04 NeMo Framework's summaries, torchtitan's H200 "
                 f"benchmark; containers "
                 f"{', '.join(sorted({o.row.container for o in outcomes}))})")
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines)


def _median(errors: Sequence[float]) -> str:
    return f"{statistics.median(errors):.1%}" if errors else "-"


def _largest(errors: Sequence[float]) -> str:
    return f"{max(errors):.1%}" if errors else "-"


def _efficiency(values: dict[str, float], rows: Sequence[GoldenRow], family: str = "gpu",
                base: StepEfficiency | None = None) -> StepEfficiency:
    fitted_to = ", ".join(f"{r.model} on {r.gpus} {r.system}" for r in rows)
    notes = {
        "matmul_fp8": "factor on FP8 GEMM time (the cost model prices FP8 GEMMs at the BF16-calibrated fraction "
                      "of the FP8 peak)",
        "attention": "factor on fused attention time (the cost model's curve is FlashAttention-2's)",
        "pointwise": "factor on non-GEMM, non-attention op time (fused kernels in training frameworks)",
        "overlap": "share of the communication beside compute that overlapping hides",
    }
    figs = {k: Figure(v, "", f"fitted to Megatron-Bridge tokens/s/GPU ({fitted_to}); {SOURCE}", "calibrated",
                      f"{notes[k]}; least squares on log(modelled/published) over the fit rows only")
            for k, v in values.items()}
    if base is not None:
        return replace(base, family=family, **figs)
    return StepEfficiency(family=family, **figs)


FIT_GRID = {
    # FP8 GEMMs reach a smaller share of their peak than BF16 ones: from 1.0 (as BF16) to 1.6x slower.
    "matmul_fp8": [round(1.0 + 0.05 * i, 2) for i in range(0, 13)],
    # Training frameworks run cuDNN / FlashAttention-3-class attention on Hopper; FlashAttention-3 reports
    # 1.5-2.0x FlashAttention-2's speed (Shah et al. 2024, arXiv:2407.08608): factors 0.5-1.0 are physical.
    "attention": [round(0.5 + 0.05 * i, 2) for i in range(0, 11)],
    "overlap": [round(0.1 * i, 1) for i in range(0, 11)],
}
"""The parameters fitted and the values tried, within physical bounds (grids: the fit is reproducible)."""

FIT_START = {"matmul_fp8": 1.3, "attention": 0.6, "overlap": 0.5}
"""Where the coordinate search starts."""


def fit_loss(values: dict[str, float], rows: Sequence[GoldenRow], kind: str | None = None,
             family: StepEfficiency | None = None) -> float:
    """Sum over ``rows`` of log(modelled / published) squared, with ``values`` as the GPU family's
    efficiencies (or, with ``kind``, as that kind's over ``family``'s)."""
    table = ({"gpu": _efficiency(values, rows)} if kind is None else
             {"gpu": family, kind: _efficiency(values, rows, kind, family)})
    with use(table):
        return sum(math.log1p(o.error) ** 2 for o in evaluate(rows))


KIND_GRID = {"matmul_fp8": [round(1.0 + 0.05 * i, 2) for i in range(0, 21)]}
"""The GB200 parameter fitted (its FP8 GEMMs against the Hopper-fitted family factor) and its values."""


def fit_kind(family: StepEfficiency, kind: str = "gb200", rows: Sequence[GoldenRow] | None = None,
             grid: dict[str, list[float]] | None = None) -> tuple[StepEfficiency, float]:
    """One kind's own factors over its family's, fitted to ``rows`` (default: the kind's :data:`FIT_ROWS`)."""
    rows = list(FIT_ROWS[kind]) if rows is None else list(rows)
    grid = grid or KIND_GRID
    import itertools

    best = None
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        trial = dict(zip(names, values))
        loss = fit_loss(trial, rows, kind, family)
        if best is None or loss < best[0] - 1e-12:
            best = (loss, trial)
    return _efficiency(best[1], rows, kind, family), best[0]


def fit(rows: Sequence[GoldenRow] | None = None, grid: dict[str, list[float]] | None = None,
        start: dict[str, float] | None = None) -> tuple[StepEfficiency, float]:
    """GPU-family step efficiencies minimising :func:`fit_loss` over ``rows`` (default: the H100 rows).

    Coordinate search on :data:`FIT_GRID`: each parameter in turn takes its best grid value with the
    others held, until a full pass changes nothing. Returns (efficiencies, loss).
    """
    rows = [r for r in ROWS if r.system == FIT_SYSTEM] if rows is None else list(rows)
    current, best = coordinate_search(lambda values: fit_loss(values, rows), grid or FIT_GRID, start or FIT_START)
    return _efficiency(current, rows), best


def coordinate_search(loss, grid: dict[str, list[float]], start: dict[str, float]) -> tuple[dict[str, float], float]:
    """Minimise ``loss(values)`` over ``grid``: each parameter in turn takes its best grid value with the others
    held, until a full pass changes nothing (reproducible: the same grid and start give the same answer).
    Returns (values, loss)."""
    current = dict(start)
    best = loss(current)
    changed = True
    while changed:
        changed = False
        for name, values in grid.items():
            for value in values:
                if value == current[name]:
                    continue
                trial = dict(current, **{name: value})
                trial_loss = loss(trial)
                if trial_loss < best - 1e-12:
                    best, current, changed = trial_loss, trial, True
    return current, best
