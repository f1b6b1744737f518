"""Planning: a model as blocks, what each block costs per chip kind, and one step model for live and paper racks.

* :func:`whatif` -> :class:`StepEstimate`: a training step of a model (meta
  module, transformers config or preset) on a rack (preset, spec string or
  RackSpec) under a parallel configuration, or the fastest one found.
* :func:`step_model` -> :class:`StepResult`: the step model itself, for any
  stages: uneven block ranges on groups of slots of given kinds, TP/CP/EP per
  stage, DP replicas per stage, GPipe / 1F1B / interleaved schedules. The
  planner (``interop.plan``) predicts a live plan with it; :func:`whatif`
  lays a homogeneous configuration (:class:`Parallel`) with it.
* :func:`search` (the fastest fitting homogeneous configuration), :func:`kind_stages`
  (one stage per chip kind of a mixed rack), :func:`job_goodput` / :class:`FailureModel` (goodput).
* :class:`ModelBlocks`, :class:`BlockProfile`, :func:`trace_profile`: blocks
  and their meta-traced ops, parameters and activations; :func:`block_cost`:
  a block priced on a chip kind.

Everything here is shape-only: no tensor is allocated and no op runs, so none of
it needs the compiled extension (``interop._C``). torch and transformers are
imported only when a model is traced.
"""

from __future__ import annotations

from interop.planning.block_pricing import DTYPES, BlockCost, Execution, block_cost
from interop.planning.blocks import ModelBlocks
from interop.planning.fitted_efficiency import StepEfficiency, step_efficiency
from interop.planning.comm import CommPricer
from interop.planning.model_presets import model_blocks, model_presets
from interop.planning.goodput import FailureModel, Goodput, job_goodput
from interop.planning.parallel import ORDERS, Parallel, kind_stages, split_layers, uniform_stages
from interop.planning.profile import BlockProfile, Collective, SavedTensor, Shard, trace_profile
from interop.planning.schedule import SCHEDULES, Simulation, simulate
from interop.planning.stage import RECOMPUTE, SlotGrid, Stage
from interop.planning.step import (COMM_KINDS, OPTIMIZERS, Memory, StageResult, StepConfig, StepResult,
                                   step_model)
from interop.planning.search import SearchResult, search
from interop.planning.whatif import MemoryPerChip, StepEstimate, whatif

__all__ = [
    "COMM_KINDS", "DTYPES", "OPTIMIZERS", "ORDERS", "RECOMPUTE", "SCHEDULES",
    "BlockCost", "BlockProfile", "Collective", "CommPricer", "Execution", "FailureModel", "Goodput", "Memory",
    "MemoryPerChip", "ModelBlocks", "Parallel", "SavedTensor", "SearchResult", "Shard", "Simulation", "SlotGrid",
    "Stage", "StageResult", "StepConfig", "StepEfficiency", "StepEstimate", "StepResult",
    "block_cost", "job_goodput", "kind_stages", "model_blocks", "model_presets", "search", "simulate",
    "split_layers", "step_efficiency", "step_model", "trace_profile", "uniform_stages", "whatif",
]
