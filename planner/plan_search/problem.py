"""One plan search's inputs and objective: :class:`Problem` (the blocks, the rack, the allowed slots, what the
step is and what it minimises), the slots of each kind, and the microbatch counts it tries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from devices.chip_set import DEFAULT_BASIS, ChipSet, check_basis
from planner.block_pricing import Execution, block_cost
from planner.comm import CommPricer
from planner.layout import Layout
from planner.parallel import divisors
from planner.profile import Shard
from planner.stage import SlotRuns, kind_slots
from planner.step import StepConfig, StepResult, step_model

OBJECTIVES = ("time", "cost", "energy")
"""What a plan minimises: modelled seconds per step, dollars per step, joules per step."""

MICROBATCH_COUNTS = 64
"""Most microbatch counts a search tries: every divisor of the global batch when it has no more, else the
counts that give the smallest microbatches (each distinct microbatch size is a trace of the blocks; a larger
one holds more activations and lengthens the pipeline's fill, and a batch of 10^9 rows has 100 divisors)."""


class DoesNotFit(ValueError):
    """No layout of the allowed slots holds the model in memory; the message names the smallest per-slot
    capacity that would be needed."""

    def __init__(self, message: str, need: int):
        super().__init__(message)
        self.need = need


def microbatch_counts(global_batch: int) -> tuple[int, ...]:
    """The microbatch counts a search tries for ``global_batch`` rows (see :data:`MICROBATCH_COUNTS`)."""
    counts = divisors(global_batch)
    return tuple(counts[-MICROBATCH_COUNTS:])


@dataclass(slots=True)
class Problem:
    """One search: the blocks, the rack and what the step is."""

    blocks: object
    spec: object
    slots: Sequence[int]
    """The slots the plan may use, in rack order (a ``range`` for a whole rack: nothing per slot is stored)."""
    global_batch: int
    seq_len: int
    objective: str = "time"
    price_basis: str = DEFAULT_BASIS
    """The price basis of the ``cost`` objective (:data:`devices.PRICE_BASES`)."""
    schedules: tuple[str, ...] = ("1f1b", "gpipe")
    microbatches: tuple[int, ...] = ()
    optimizer: str = "adamw"
    recompute: str = "none"
    calibrated: bool = False
    master_weights: bool = False
    state_bytes: int | None = None
    grad_dtype: str = "float32"
    max_seconds: float | None = None
    pricer: CommPricer | None = None
    kinds: dict = field(default_factory=dict)
    """Kind -> its allowed slots in rack order (filled in from ``slots``; a ``range`` or :class:`SlotRuns` for a
    whole rack)."""
    tp_options: tuple[int, ...] = ()
    """Tensor-parallel degrees searched (filled in: 1 and the blocks' ``tp_degrees()``)."""
    _costs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        check_basis(self.price_basis)
        if self.pricer is None:
            self.pricer = CommPricer(self.spec)
        self.kinds = kind_slots(self.spec, self.slots)
        if not self.tp_options:
            degrees = getattr(self.blocks, "tp_degrees", None)
            self.tp_options = (1,) + tuple(degrees() if degrees is not None else ())
        if not self.microbatches:
            self.microbatches = microbatch_counts(self.global_batch)

    # -- costs ------------------------------------------------------------------------

    def times(self, kind: str, rows: int, tp: int = 1) -> tuple[list[float], list[float]]:
        """Prefix sums of every block's forward and backward compute seconds on ``kind`` for ``rows`` rows cut
        over ``tp`` tensor-parallel slots."""
        key = (kind, rows, tp)
        hit = self._costs.get(key)
        if hit is None:
            execution = Execution(calibrated=self.calibrated)
            f, b = [0.0], [0.0]
            for i in range(len(self.blocks)):
                c = block_cost(self.blocks.profile(i, self._shard(rows, tp)), kind, execution)
                f.append(f[-1] + c.forward)
                b.append(b[-1] + c.backward)
            hit = self._costs[key] = (f, b)
        return hit

    def _shard(self, rows: int, tp: int = 1) -> Shard:
        return Shard(microbatch=rows, seq_len=self.seq_len, tp=tp, sequence_parallel=False)

    def config(self, microbatches: int, schedule: str, record: bool = False) -> StepConfig:
        # A live plan's tensor-parallel all_reduces run between the GEMMs, not overlapped with them.
        return StepConfig(global_batch=self.global_batch, seq_len=self.seq_len, microbatches=microbatches,
                          schedule=schedule, recompute=self.recompute, optimizer=self.optimizer, zero=0,
                          sequence_parallel=False, tp_comm_overlap=False, grad_dtype=self.grad_dtype,
                          calibrated=self.calibrated, master_weights=self.master_weights,
                          state_bytes=self.state_bytes, record=record)

    def evaluate(self, layout: Layout, record: bool = False) -> StepResult:
        """The step model on ``layout`` (its events recorded with ``record``)."""
        return step_model(self.blocks, layout.stages, self.spec,
                          self.config(layout.microbatches, layout.schedule, record), pricer=self.pricer)

    # -- objective ----------------------------------------------------------------------

    def rate(self, layout: Layout) -> float:
        """Objective units per modelled second of the layout (1 for time)."""
        if self.objective == "time":
            return 1.0
        chips = ChipSet.of((st.kind, len(st.slots)) for st in layout.stages)
        rate = chips.price(self.price_basis) if self.objective == "cost" else chips.power()
        if rate.value is None:
            raise ValueError(f"objective: {self.objective!r} needs {'a price' if self.objective == 'cost' else 'power'} "
                             f"for every kind: {rate.reason}")
        return rate.value / (3600.0 if self.objective == "cost" else 1.0)

    def score(self, layout: Layout, result: StepResult) -> float:
        """What the search minimises: modelled seconds, dollars or joules per step."""
        return result.seconds * self.rate(layout)


__all__ = ["DoesNotFit", "MICROBATCH_COUNTS", "OBJECTIVES", "Problem", "SlotRuns", "kind_slots", "microbatch_counts"]
