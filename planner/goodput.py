"""Goodput: how much of a training run's time makes progress once chips fail (modelled).

A job of N chips is interrupted at rate ``N * chip_failure_rate`` (unexpected,
each chip independent) plus ``planned_rate`` (maintenance, per job). It saves
a checkpoint every ``interval`` seconds of training, each costing
``checkpoint_cost`` seconds of stalled training; an interruption loses on
average half an interval of work and ``restart`` seconds to detect, reschedule
and reload. Young and Daly's first-order model:

    goodput = interval / (interval + checkpoint_cost) * (1 - rate * (restart + (interval + checkpoint_cost) / 2))

with the interval, unless given, at Young's optimum ``sqrt(2 * checkpoint_cost / rate)``.

The default chip failure rate is Meta's: 419 unexpected interruptions in a
54-day snapshot of Llama 3 405B pre-training on 16,384 H100s ("The Llama 3
Herd of Models", 2024, section 3.3.4; 47 planned ones besides). Restart and
checkpoint costs are assumptions (the paper gives none), labelled as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from devices.figure import Figure

_LLAMA3 = ("Llama Team, 'The Llama 3 Herd of Models' (2024), arXiv:2407.21783, section 3.3.4: 466 job "
           "interruptions in a 54-day snapshot of pre-training on 16,384 H100s, 47 planned and 419 unexpected; "
           "effective training time above 90%")
LLAMA3_CHIPS = 16384
LLAMA3_DAYS = 54
LLAMA3_UNEXPECTED = 419
LLAMA3_PLANNED = 47
LLAMA3_EFFECTIVE = 0.90
"""The published lower bound on effective training time."""

CHIP_FAILURE_RATE = Figure(
    LLAMA3_UNEXPECTED / (LLAMA3_DAYS * 86400 * LLAMA3_CHIPS), "", _LLAMA3, "secondary",
    "unexpected interruptions per chip-second: 419 / (54 days x 86,400 s x 16,384 chips) = 5.48e-9 "
    "(one per 5.8 chip-years); every cause (GPU, HBM, network, host) charged to the chips")
PLANNED_RATE = Figure(LLAMA3_PLANNED / (LLAMA3_DAYS * 86400), "", _LLAMA3, "secondary",
                      "planned interruptions per job-second: 47 / 54 days")
RESTART = Figure(300.0, "s", "assumption (hybrid-interop goodput model)", "projected",
                 "detect the failure, reschedule on spares and reload the checkpoint: 5 minutes; the paper gives "
                 "no figure")
CHECKPOINT_COST = Figure(10.0, "s", "assumption (hybrid-interop goodput model)", "projected",
                         "training stalls 10 s per checkpoint (an asynchronous checkpoint blocks only for the "
                         "copy out of HBM); the paper gives no figure")


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureModel:
    """What interrupts a job and what an interruption costs (defaults: see the module doc)."""

    chip_failure_rate: float = CHIP_FAILURE_RATE.value
    """Unexpected interruptions per chip-second."""
    planned_rate: float = PLANNED_RATE.value
    """Planned interruptions per job-second."""
    restart: float = RESTART.value
    """Seconds from an interruption to training again (detection, rescheduling, reload)."""
    checkpoint_cost: float = CHECKPOINT_COST.value
    """Seconds training stalls per checkpoint."""
    checkpoint_interval: float | None = None
    """Seconds of training between checkpoints (None: Young's optimum for the job's failure rate)."""

    def __post_init__(self) -> None:
        for name in ("chip_failure_rate", "planned_rate", "restart", "checkpoint_cost"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise ValueError(f"{name}: expected a non-negative number, got {value!r}")
        if self.checkpoint_interval is not None and not self.checkpoint_interval > 0:
            raise ValueError(f"checkpoint_interval: expected a positive number of seconds or None, "
                             f"got {self.checkpoint_interval!r}")


@dataclass(frozen=True, slots=True)
class Goodput:
    """Expected goodput of a job (modelled)."""

    chips: int
    fraction: float
    """Share of wall time that makes progress."""
    interruptions_per_day: float
    mtbi: float
    """Mean seconds between interruptions of the job."""
    checkpoint_interval: float
    """Seconds of training between checkpoints used."""
    lost_to_checkpoints: float
    """Share of wall time stalled writing checkpoints."""
    lost_to_failures: float
    """Share of wall time lost to interruptions (repeated work and restarts)."""
    tokens_per_second: float | None = None
    """The step's modelled tokens/s times the goodput fraction (None without an estimate)."""

    def describe(self) -> str:
        text = (f"goodput (modelled) on {self.chips:,} chips: {self.fraction:.1%} of wall time trains "
                f"({self.interruptions_per_day:,.1f} interruptions/day, one every {self.mtbi / 60:,.1f} min; "
                f"checkpoint every {self.checkpoint_interval / 60:,.1f} min; lost: checkpoints "
                f"{self.lost_to_checkpoints:.1%}, failures {self.lost_to_failures:.1%})")
        if self.tokens_per_second is not None:
            text += f"; expected {self.tokens_per_second:,.0f} tokens/s"
        return text


def job_goodput(chips: int, failures: FailureModel = FailureModel()) -> Goodput:
    """Goodput of a job of ``chips`` chips under ``failures`` (see the module doc)."""
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise ValueError(f"chips: expected a positive integer, got {chips!r}")
    rate = chips * failures.chip_failure_rate + failures.planned_rate
    delta = failures.checkpoint_cost
    if failures.checkpoint_interval is not None:
        interval = failures.checkpoint_interval
    elif rate > 0 and delta > 0:
        interval = math.sqrt(2 * delta / rate)
    else:
        interval = math.inf
    if math.isinf(interval):
        ckpt = 0.0
        fail = 0.0 if rate == 0 else 1.0
    else:
        ckpt = delta / (interval + delta)
        fail = rate * (failures.restart + (interval + delta) / 2)
    fraction = max(0.0, (1 - ckpt) * (1 - fail))
    return Goodput(chips=chips, fraction=fraction, interruptions_per_day=rate * 86400,
                   mtbi=1 / rate if rate else math.inf, checkpoint_interval=interval, lost_to_checkpoints=ckpt,
                   lost_to_failures=min(1.0, (1 - ckpt) * fail))


def goodput(estimate, failures: FailureModel = FailureModel()) -> Goodput:
    """Goodput of a what-if's job: its chips and its modelled tokens/s."""
    g = job_goodput(estimate.result.chips, failures)
    return Goodput(g.chips, g.fraction, g.interruptions_per_day, g.mtbi, g.checkpoint_interval,
                   g.lost_to_checkpoints, g.lost_to_failures, estimate.tokens_per_second * g.fraction)


SCALES = (16384, 65536, 262144, 1048576)
"""Job sizes of the scaling table."""

SCENARIOS = {
    "Llama 3 practice (restart 5 min, checkpoint stall 10 s)": FailureModel(),
    "in-memory recovery (restart 30 s, checkpoint stall 1 s)": FailureModel(restart=30.0, checkpoint_cost=1.0),
}
"""Failure models of the scaling table (both assumptions; the chip failure rate is Meta's)."""


def scaling_table(estimate=None, scales=SCALES, scenarios=None, *, markdown: bool = False) -> str:
    """Goodput from 16K to 1M chips under each scenario (modelled), with its source: for a terminal, within 120
    columns (:func:`devices.text_table.table`), or as Markdown for a renderer (``markdown``)."""
    from devices.text_table import markdown as markdown_table
    from devices.text_table import paragraph, table

    scenarios = scenarios or SCENARIOS
    headers = ["chips", "interruptions/day", "mean time between", *scenarios]
    rows = []
    for n in scales:
        first = job_goodput(n, next(iter(scenarios.values())))
        rows.append([f"{n:,}", f"{first.interruptions_per_day:,.0f}", f"{first.mtbi / 60:,.1f} min"]
                    + [f"{job_goodput(n, f).fraction:.1%}" for f in scenarios.values()])
    note = "goodput = share of wall time that trains (modelled); chip failure rate from " + _LLAMA3
    if markdown:
        return markdown_table(headers, rows) + "\n\n" + note
    return table(headers, rows, align="r" * len(headers)) + "\n\n" + paragraph(note)


__all__ = ["CHECKPOINT_COST", "CHIP_FAILURE_RATE", "PLANNED_RATE", "RESTART", "SCALES", "SCENARIOS",
           "FailureModel", "Goodput", "goodput", "job_goodput", "scaling_table"]
