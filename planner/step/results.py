"""What the step model returns: per stage (:class:`StageResult`, :class:`Memory`) and per step (:class:`StepResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from planner.schedule import simulate
from planner.step.config import StepConfig

EVENTS_LIMIT = 2_000_000
"""Most schedule actions :meth:`PipelineTiming.events` plays one by one (a record each)."""


@dataclass(frozen=True, slots=True)
class Memory:
    """Modelled bytes per chip of one stage."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    """Activations of the microbatches in flight at the schedule's peak, plus the transient
    buffers (a recomputed layer, FSDP's gathered parameters)."""
    capacity: int
    """The slot's memory."""

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


@dataclass(frozen=True, slots=True)
class StageResult:
    """One stage's part of the step (seconds per step unless said otherwise; all modelled)."""

    index: int
    kind: str
    slots: Sequence[int]
    tp: int
    cp: int
    dp: int
    ep: int
    microbatch: int
    """Samples per microbatch on one replica."""
    chunks: tuple[range, ...]
    recompute: str
    """The recompute applied: ``none``, ``selective``, ``full`` or ``full:K`` (K layers per chunk)."""
    forward: tuple[float, ...]
    """Per chunk: seconds of one microbatch's forward, exposed TP/CP/EP/FSDP communication included."""
    backward: tuple[float, ...]
    compute: float
    """Seconds computing (forward, backward, recompute) over the step."""
    exposed: dict[str, float]
    """Seconds of communication the compute did not hide, by kind (tp, cp, ep, dp, pp)."""
    busy: float
    """Seconds the stage's chips were computing or waiting on their own collectives."""
    idle: float
    """Seconds of the step the stage's chips waited on other stages (pipeline bubble)."""
    optimizer: float
    """Seconds of the optimizer step."""
    memory: Memory
    in_flight: tuple[int, ...]
    """Per chunk: most microbatches whose activations were held at once."""
    projected: bool


@dataclass(frozen=True, slots=True)
class PipelineTiming:
    """The inputs the pipeline schedule was played with: enough to replay it action by action."""

    forward: tuple[tuple[float, ...], ...]
    """Per stage, per chunk: seconds of one microbatch's forward (exposed communication included)."""
    backward: tuple[tuple[float, ...], ...]
    microbatches: int
    schedule: str
    hops: tuple[float, ...]
    """Seconds to hand a microbatch from virtual stage k to k + 1."""

    @property
    def actions(self) -> int:
        """Schedule actions in the step (a forward and a backward per stage, chunk and microbatch)."""
        return 2 * len(self.forward) * len(self.forward[0]) * self.microbatches

    def events(self) -> tuple[tuple[int, int, int, int, float, float], ...]:
        """Every action's (stage, phase, chunk, microbatch, start, end), played by :func:`planner.simulate`."""
        if self.actions > EVENTS_LIMIT:
            raise ValueError(f"events: the step has {self.actions:,} schedule actions, more than the "
                             f"{EVENTS_LIMIT:,} played one by one; its times are modelled in closed form")
        return simulate(self.forward, self.backward, self.microbatches, self.schedule, p2p=self.hops,
                        record=True).events


@dataclass(frozen=True, slots=True)
class StepResult:
    """A modelled training step (see the module doc)."""

    seconds: float
    """Modelled seconds of one step."""
    compute: float
    """Of which the critical stage computes."""
    exposed: dict[str, float]
    """Of which exposed communication on the critical stage, by kind (tp, cp, ep, dp, pp, host)."""
    bubble: float
    """Of which the critical stage waits on the pipeline."""
    optimizer: float
    """Of which the optimizer step."""
    critical_stage: int
    """The busiest stage (compute, exposed communication, optimizer): the one that bounds the step, on which
    compute, exposed, bubble and optimizer split it."""
    stages: tuple[StageResult, ...]
    tokens: int
    """Tokens per step."""
    model_flops: float
    """Model FLOPs per step (3 x forward matmul and attention FLOPs; recompute not counted)."""
    chips: int
    """Chips the stages use."""
    projected: bool
    """True when a projected chip figure was used."""
    sources: tuple = ()
    """Catalogue and efficiency figures used."""
    timing: PipelineTiming | None = None
    """What the pipeline schedule was played with (per-chunk times, hops): :attr:`events` replays it."""
    config: StepConfig | None = None
    modelled: bool = True
    _events: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def events(self) -> tuple[tuple[int, int, int, int, float, float], ...]:
        """(stage, phase, chunk, microbatch, start, end) of every schedule action: recorded when the config
        asked for it, else played again from :attr:`timing` on first use (the step model is not re-run)."""
        if self._events is None:
            object.__setattr__(self, "_events", self.timing.events() if self.timing is not None else ())
        return self._events

    @property
    def breakdown(self) -> dict[str, float]:
        """compute, exposed communication per kind, bubble and optimizer: they add up to :attr:`seconds`."""
        out = {"compute": self.compute}
        out.update({f"{k}_comm": v for k, v in self.exposed.items()})
        out["bubble"] = self.bubble
        out["optimizer"] = self.optimizer
        return out

    def stage_of_slot(self, slot: int) -> StageResult:
        """The stage holding ``slot`` (ValueError when none does)."""
        for s in self.stages:
            if slot in s.slots:
                return s
        raise ValueError(f"slot: no stage holds slot {slot}")


__all__ = ["EVENTS_LIMIT", "Memory", "PipelineTiming", "StageResult", "StepResult"]
