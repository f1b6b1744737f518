"""What one executed step of a plan did: :class:`StepRecord`, the same measure for both runners.

The in-process runner (:mod:`interop.live.runner`) and the export across processes
(:mod:`interop.live.distributed`) each start a step with their slots at one modelled instant and
end it at the latest clock after the optimizer; :func:`step_record` reads the timeline's running busy counters
(busy time per slot) and the slots' allocator peaks into one record.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field


@dataclass(slots=True)
class StepRecord:
    """What one executed step did (times modelled, memory measured by the slots' allocators)."""

    modelled_seconds: float
    """Span of the step on the modelled timeline: every slot starts together, the step ends when the last
    slot finishes its optimizer step."""
    start_s: float
    end_s: float
    loss: float
    microbatches: int
    peak_bytes: dict[int, int] = field(default_factory=dict)
    """Per slot, the allocator's peak during the step (parameters, gradients, optimizer state, activations)."""
    busy_s: dict[int, float] = field(default_factory=dict)
    """Per slot, modelled time spent on ops, copies and collectives during the step."""


def busy_marks(timeline, slots) -> dict[int, int]:
    """Each slot's modelled busy picoseconds so far (every record placed, however old): taken when a step
    begins, then handed to :func:`step_record`."""
    timeline.ingest()
    return {s: timeline.busy_by_slot.get(s, 0) for s in slots}


def step_record(timeline, slots, t0_ps: int, t1_ps: int, microbatches: int, *,
                busy_before: dict[int, int]) -> StepRecord:
    """The record of a step from ``t0_ps`` to ``t1_ps`` on ``timeline`` for ``slots``: each slot's busy time
    (every op, copy and collective that involves it placed since ``busy_before`` was taken by
    :func:`busy_marks`, read from the timeline's running counters, so a step longer than the timeline's window
    of full records counts every one) and its allocator's peak since the step began. Its ``loss`` is NaN until
    the runner sets it: the loss is read after the step's end (a training loop reads it while the next step
    runs), so its copy to the host is no part of the step."""
    import torch

    from interop.timelines import PS

    busy = {s: v - busy_before[s] for s, v in busy_marks(timeline, slots).items()}
    peaks = {s: torch.hybrid.max_memory_allocated(s) for s in slots}
    return StepRecord((t1_ps - t0_ps) / PS, t0_ps / PS, t1_ps / PS, math.nan, microbatches, peaks,
                      {s: v / PS for s, v in busy.items()})


__all__ = ["StepRecord", "busy_marks", "step_record"]
