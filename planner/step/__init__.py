"""The step model: one training step of a model cut into pipeline stages on a rack, modelled.

One computation serves the planner's prediction for a live rack and the
what-if for a rack on paper (ARCHITECTURE.md, "interop.whatif" and "interop.plan"):

1. every block of every stage is profiled for the stage's shard
   (:class:`~planner.blocks.ModelBlocks`) and priced on the stage's chip
   kind (:func:`~planner.block_pricing.block_cost`);
2. the collectives a block issues (TP all-gathers and reduce-scatters, the CP
   ring, EP all-to-alls) are priced by ``collectives.estimate`` on the rack's
   topology over the stage's own groups, and the part that the block's GEMMs or
   attention cannot hide is added to its forward or backward;
3. FSDP (ZeRO-3) gathers each block's parameters before its forward and
   backward and reduce-scatters its gradients after, on a second stream with
   one block of prefetch; ZeRO-2 reduce-scatters gradients every microbatch;
4. the pipeline schedule (GPipe, 1F1B, interleaved 1F1B) is played with the
   point-to-point sends between stages (:mod:`planner.schedule`);
5. data-parallel gradient reduction starts as each block's last backward
   finishes and runs beside the remaining backward; ZeRO-1/2 parameter gathers
   overlap the next step's first forward; the optimizer step follows (torch's
   fused kernel over the stage's parameters, priced as one multi-tensor op);
6. memory per chip: weights, gradients, optimizer state (sharded by the ZeRO
   stage), activations of the microbatches in flight at the schedule's peak;
   ``recompute="auto"`` picks per stage the cheapest recompute that fits.

A parameter several blocks of a stage hold (an LM head tied to the token
embedding) is one tensor there: its weights, gradient, optimizer state,
reduction and update count once, and each holder's backward adds its part
into the one gradient as it makes it (the runner gives each later holder a
leaf of its own, :func:`interop.live.pipeline.untie_holders`), so nothing is
held between the holders' backwards.

Every figure is modelled. :func:`step_model` is the entry point. The parts, in the order it runs them:

* :mod:`planner.step.config`: :class:`StepConfig` and the checks of stages against it;
* :mod:`planner.step.prepare`: 1-3, a stage's blocks profiled, priced and their collectives attached;
* :mod:`planner.step.memory`: 6, memory per chip and the recompute that fits;
* :mod:`planner.step.pipeline`: 3-4, per-microbatch times and the schedule played;
* :mod:`planner.step.data_parallel`: 5, reduction, parameter gathers, optimizer;
* :mod:`planner.step.results`: what comes back (:class:`StepResult`).
"""

from __future__ import annotations

from planner.optimizers import GRAD_DTYPES, OPTIMIZERS
from planner.step.config import COMM_KINDS, StepConfig
from planner.step.model import step_model
from planner.step.pipeline import SIMULATE_LIMIT
from planner.step.results import EVENTS_LIMIT, Memory, PipelineTiming, StageResult, StepResult

__all__ = ["COMM_KINDS", "EVENTS_LIMIT", "GRAD_DTYPES", "OPTIMIZERS", "SIMULATE_LIMIT", "Memory", "PipelineTiming",
           "StageResult", "StepConfig", "StepResult", "step_model"]
