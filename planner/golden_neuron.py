"""AWS's published Trainium1 training throughput, and the Trainium family's step efficiencies fitted to it.

:data:`ROWS` are rows of the decoder table of AWS's "Trn1/Trn1n Training Performance" page (Neuron SDK 2.21.0
and 2.24.0): NeuronX Distributed's Llama recipes on 16 or 32 trn1.32xlarge, BF16 autocast with an FP32
optimizer, ZeRO-1, sequence parallelism, selective activation checkpointing, microbatch 1, global batch 1,024.
Their degrees count NeuronCores; :class:`~planner.neuron_config.NeuronConfig` maps them onto chips. The
Trainium family's factors (:data:`planner.fitted_efficiency.TRAINIUM`) are fitted by :func:`fit` to the
Neuron 2.21.0 Llama 2 rows only (:data:`FIT_RELEASE`); the Neuron 2.24.0 rows, another release at twice the
sequence length with another vocabulary, and the same table's rows of releases 2.16.0-2.22.0
(:data:`FOUND_ROWS`) test them. The same factors serve every row.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import devices
from devices.fabrics import TRN1_INSTANCE_CHIPS
from devices.figure import Figure
from planner.block_pricing import use
from planner.estimate import StepEstimate, estimate_from_result, run_config
from planner.fitted_efficiency import FITTED, TRAINIUM, StepEfficiency
from planner.models import model_blocks
from planner.neuron_config import NeuronConfig

_PAGE = ("AWS Neuron documentation, 'Trn1/Trn1n Training Performance', table training_data_decoder.csv "
         "(aws-neuron/aws-neuron-sdk general/benchmarks/trn1/)")
SOURCES = {
    "2.24.0": f"{_PAGE} @90a7fe4ba2ba0cf16202efd1895ac6f8c401f8d9, Neuron SDK Release 2.24.0, June 23rd 2025",
    "2.22.0": f"{_PAGE} @4eba310f (2025-05-20), the Llama-3.1-70B row of Neuron SDK Release 2.22.0",
    "2.21.0": f"{_PAGE} @752349fd3de5aaa6eb69690955eeaa7d43fcd082, Neuron SDK Release 2.21.0, December 20th 2024",
    "2.18.0": f"{_PAGE} @8907253c (2024-04-11), Neuron SDK Release 2.18.0",
    "2.17.0": f"{_PAGE} @446ef6ca (2024-02-28), Neuron SDK Release 2.17.0",
    "2.16.0": f"{_PAGE} @1351ee12 (2024-01-17), Neuron SDK Release 2.16.0",
}
"""The published table of each release (the page's history in aws-neuron/aws-neuron-sdk)."""



@dataclass(frozen=True, slots=True)
class NeuronRow:
    """One published row: a NeuronX Distributed run on trn1.32xlarge instances (degrees in NeuronCores)."""

    release: str
    """The Neuron SDK release whose table the row is in (a key of :data:`SOURCES`)."""
    model: str
    """A model preset (:data:`planner.models.MODELS`)."""
    nodes: int
    """trn1.32xlarge instances (16 chips, 32 NeuronCores each)."""
    tp: int
    pp: int
    dp: int
    """Degrees in NeuronCores, as published (TP x PP x DP = 32 x nodes)."""
    seq_len: int
    seqs_per_second: float
    """Published sequences per second of the whole cluster."""
    global_batch: int = 1024
    kind: str = "trn1"
    recompute: str = "selective"
    """NeuronX Distributed's selective activation checkpointing: the non-GEMM work of every layer again."""
    note: str = ""

    @property
    def chips(self) -> int:
        return self.nodes * int(TRN1_INSTANCE_CHIPS.value)

    @property
    def tokens_per_chip(self) -> float:
        """Published tokens/s per chip (derived: sequences/s x sequence length / chips)."""
        return self.seqs_per_second * self.seq_len / self.chips

    @property
    def config(self) -> NeuronConfig:
        return NeuronConfig(kind=self.kind, tp=self.tp, pp=self.pp, dp=self.dp)

    @property
    def rack(self) -> str:
        """Our rack spec: ``trn1-cluster-16`` / ``trn1-cluster-32`` (AWS does not say trn1 or trn1n; trn1 is
        the instance its price file names)."""
        return f"trn1-cluster-{self.nodes}" if self.nodes in (16, 32) else f"trn1-instance*{self.nodes}"

    @property
    def label(self) -> str:
        return f"{self.model} {self.nodes} nodes (Neuron {self.release})"


ROWS: tuple[NeuronRow, ...] = (
    NeuronRow("2.24.0", "llama3.1-8b", 32, 32, 1, 32, 8192, 47.95, note="flash attention, KV heads replicated x4"),
    NeuronRow("2.24.0", "llama3.1-70b", 32, 32, 8, 4, 8192, 7.94, note="flash attention, KV heads replicated x4"),
    NeuronRow("2.21.0", "llama2-7b", 16, 8, 1, 64, 4096, 95.14),
    NeuronRow("2.21.0", "llama2-13b", 32, 8, 8, 16, 4096, 80.33),
    NeuronRow("2.21.0", "llama2-70b", 32, 32, 8, 4, 4096, 14.44, note="KV heads replicated x4"),
)
"""The rows of issue 18 (reference/trainium.md, section 3)."""

FOUND_ROWS: tuple[NeuronRow, ...] = (
    NeuronRow("2.22.0", "llama3.1-70b", 32, 32, 8, 4, 8192, 7.51, note="flash attention, KV heads replicated x4"),
    NeuronRow("2.21.0", "llama3.1-8b", 32, 32, 1, 32, 8192, 53.51, note="flash attention, KV heads replicated x4"),
    NeuronRow("2.21.0", "llama3.1-70b", 32, 32, 8, 4, 8192, 7.97, note="flash attention, KV heads replicated x4"),
    NeuronRow("2.18.0", "llama2-7b", 16, 8, 1, 64, 4096, 92.93),
    NeuronRow("2.18.0", "llama2-13b", 32, 8, 4, 32, 4096, 87.44),
    NeuronRow("2.18.0", "llama2-70b", 32, 32, 4, 8, 4096, 17.86, note="KV heads replicated x4"),
    NeuronRow("2.17.0", "llama2-7b", 16, 8, 1, 64, 4096, 94.7),
    NeuronRow("2.17.0", "llama2-13b", 32, 8, 4, 32, 4096, 81.8),
    NeuronRow("2.17.0", "llama2-70b", 32, 32, 4, 8, 4096, 15.6, note="KV heads replicated x4"),
    NeuronRow("2.16.0", "llama2-7b", 16, 8, 1, 64, 4096, 93.3),
    NeuronRow("2.16.0", "llama2-13b", 32, 8, 4, 32, 4096, 85.65),
    NeuronRow("2.16.0", "llama2-70b", 32, 32, 4, 8, 4096, 15.34, note="KV heads replicated x4"),
)
"""The same table's other releases (:data:`SOURCES`), BF16 autocast with an FP32 optimizer; all test rows. Left
out: 2.20.0's rows (their degrees multiply to twice the cores of the nodes given) and the 2.21.0 Llama-3.1-8B
figure of @4eba310f (41.99 seq/s where @752349fd gives 53.51 for the same release and recipe)."""

ALL_ROWS: tuple[NeuronRow, ...] = ROWS + FOUND_ROWS
"""Every published Trn1 row the step model is checked against."""

FIT_RELEASE = "2.21.0"
"""The release whose Llama 2 rows (:data:`ROWS`) the Trainium family's factors are fitted to; every other row
tests them."""


@dataclass(frozen=True, slots=True)
class Outcome:
    row: NeuronRow
    estimate: StepEstimate

    @property
    def tokens_per_chip(self) -> float:
        return self.estimate.tokens_per_second_per_chip

    @property
    def error(self) -> float:
        """Modelled / published - 1 (tokens/s per chip)."""
        return self.tokens_per_chip / self.row.tokens_per_chip - 1

    @property
    def role(self) -> str:
        return "fit" if self.row in fit_rows() else "test"


def evaluate(rows: Iterable[NeuronRow] = ALL_ROWS) -> list[Outcome]:
    """Model every row: its Neuron configuration on chips, BF16, ZeRO-1, AdamW, selective recompute. Rows of
    several releases that share a configuration are modelled once (within this call: a fit changes the factors
    between calls)."""
    out, modelled = [], {}
    for row in rows:
        key = (row.model, row.rack, row.config, row.seq_len, row.global_batch, row.recompute)
        if key not in modelled:
            blocks = model_blocks(row.model)
            spec = devices.parse_rack(row.rack)
            par = row.config.parallel()
            assert row.config.chips() == row.chips == len(spec), row.label
            result, used = run_config(blocks, spec, par, global_batch=row.global_batch, seq_len=row.seq_len,
                                      precision="bfloat16", recompute=row.recompute, optimizer="adamw")
            modelled[key] = estimate_from_result(result, spec, used, precision="bfloat16", model=blocks.name)
        out.append(Outcome(row, modelled[key]))
    return out


def fit_rows() -> list[NeuronRow]:
    """The rows the factors are fitted to: the given rows (:data:`ROWS`) of :data:`FIT_RELEASE`."""
    return [r for r in ROWS if r.release == FIT_RELEASE]


FIT_GRID = {
    # Trainium GEMMs against the cost model's assumed 70 % of peak: from as assumed to 1.5x slower.
    "matmul": [round(1.0 + 0.05 * i, 2) for i in range(0, 11)],
    # The stack's collectives against the link model: at most 2x faster (a ring on a torus sub-group driving two
    # links where collectives.estimate's algorithms for a sub-group use one) to 1.5x slower.
    "collectives": [round(0.5 + 0.1 * i, 1) for i in range(0, 11)],
    # Synchronisation per ring step: 0 (the links' hop latency alone) to 80 us.
    "collective_latency": [round(5e-6 * i, 6) for i in range(0, 17)],
}
"""The parameters fitted and the values tried (a grid within physical bounds: the fit is reproducible)."""

_NOTES = {
    "matmul": "factor on BF16 GEMM time (the cost model's Trainium GEMM efficiency is an assumption, 70 % of peak)",
    "collectives": "factor on the modelled time of every collective among Trainium chips (Neuron's collectives "
                   "against collectives.estimate on the torus and EFA)",
    "collective_latency": "seconds per ring step over the group's chips that Neuron's collectives add "
                          "(synchronisation between steps)",
}


def _figure(name: str, value: float, rows: Sequence[NeuronRow]) -> Figure:
    fitted_to = ", ".join(r.label for r in rows)
    releases = "; ".join(SOURCES[r] for r in dict.fromkeys(r.release for r in rows))
    return Figure(value, "s" if name == "collective_latency" else "",
                  f"fitted to AWS's Trn1 training throughput, tokens/s per chip ({fitted_to}); {releases}",
                  "calibrated", f"{_NOTES[name]}; least squares on log(modelled/published) over those rows only "
                                f"(planner.golden_neuron.fit); the table's other rows (releases 2.16.0-2.24.0) test it")


def efficiency(values: dict[str, float], rows: Sequence[NeuronRow]) -> StepEfficiency:
    """The Trainium family's :class:`StepEfficiency` with fitted ``values`` (each figure naming ``rows``) and the
    stored family's other figures (its overlap assumption)."""
    return replace(TRAINIUM, **{name: _figure(name, value, rows) for name, value in values.items()})


def fit_loss(values: dict[str, float], rows: Sequence[NeuronRow]) -> float:
    """Sum over ``rows`` of log(modelled / published)^2 with ``values`` as the Trainium family's factors."""
    with use(dict(FITTED, trainium=efficiency(values, rows))):
        return sum(math.log1p(o.error) ** 2 for o in evaluate(rows))


def fit(rows: Sequence[NeuronRow] | None = None,
        grid: dict[str, list[float]] | None = None) -> tuple[StepEfficiency, float]:
    """The Trainium family's factors minimising :func:`fit_loss` over ``rows`` (default: :func:`fit_rows`): every
    point of ``grid`` (default :data:`FIT_GRID`; the loss has several local minima, so not a coordinate search).
    Returns (efficiencies, loss); a few minutes on one core."""
    rows = fit_rows() if rows is None else list(rows)
    grid = grid or FIT_GRID
    names = list(grid)
    best = None
    for point in itertools.product(*(grid[n] for n in names)):
        values = dict(zip(names, point))
        loss = fit_loss(values, rows)
        if best is None or loss < best[0] - 1e-12:
            best = (loss, values)
    return efficiency(best[1], rows), best[0]


def _share(estimate: StepEstimate, *keys: str) -> float:
    return sum(v for k, v in estimate.breakdown.items() if k in keys) / estimate.seconds


def table(outcomes: Sequence[Outcome]) -> str:
    """Published vs modelled, error per row, role, and where the modelled step goes (Markdown)."""
    lines = ["| Neuron | model | nodes (chips) | TP / PP / DP (NeuronCores) | TP chips | seq | published tok/s/chip "
             "| modelled | error | role | compute | comm. | bubble |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        r, e = o.row, o.estimate
        comm = _share(e, *(k for k in e.breakdown if k.endswith("_comm")))
        lines.append(f"| {r.release} | {r.model} | {r.nodes} ({r.chips}) | {r.tp} / {r.pp} / {r.dp} | "
                     f"{r.config.tp_chips} | {r.seq_len:,} | {r.tokens_per_chip:,.1f} | {o.tokens_per_chip:,.1f} | "
                     f"{o.error:+.1%} | {o.role} | {_share(e, 'compute', 'optimizer'):.0%} | {comm:.0%} | "
                     f"{_share(e, 'bubble'):.0%} |")
    errors = [abs(o.error) for o in outcomes]
    tests = [abs(o.error) for o in outcomes if o.role == "test"]
    lines.append("")
    releases = ", ".join(sorted({o.row.release for o in outcomes}, key=lambda r: tuple(map(int, r.split(".")))))
    lines.append(f"median absolute error {statistics.median(errors):.1%}, largest {max(errors):.1%}; out of sample "
                 f"median {statistics.median(tests) if tests else 0.0:.1%}, largest {max(tests, default=0.0):.1%} over "
                 f"{len(tests)} rows (all figures modelled; published: {_PAGE}, releases {releases})")
    return "\n".join(lines)


__all__ = ["ALL_ROWS", "FIT_GRID", "FIT_RELEASE", "FOUND_ROWS", "ROWS", "SOURCES", "NeuronRow", "Outcome",
           "efficiency", "evaluate", "fit", "fit_loss", "fit_rows", "table"]
