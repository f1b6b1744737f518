"""The paper planner: a model as blocks, what each block costs per chip kind, one step model for live and paper racks.

Layered ``interop -> planner -> collectives -> devices``: ``import planner`` imports
neither torch nor :mod:`interop`, so a what-if on a million chips needs no build
and loads no device.

* :func:`whatif` -> :class:`StepEstimate`: a training step of a model (meta
  module, transformers config or preset) on a rack (preset, spec string or
  RackSpec) under a parallel configuration, or the fastest one found.
* :func:`step_model` -> :class:`StepResult`: the step model itself, for any
  stages: uneven block ranges on groups of slots of given kinds, TP/CP/EP per
  stage, DP replicas per stage, GPipe / 1F1B / interleaved schedules. The
  live planner (``interop.plan``, :mod:`interop.live`) predicts a plan with it;
  :func:`whatif` lays a homogeneous configuration (:class:`Parallel`) with it.
* :func:`search` (the fastest fitting homogeneous configuration), :func:`kind_stages`
  (one stage per chip kind of a mixed rack), :func:`job_goodput` / :class:`FailureModel` (goodput);
  both searches (this one and the live plan's, :mod:`planner.plan_search`) run one loop,
  :func:`branch_and_bound`, and report :class:`SearchStats`.
* One table per vocabulary: :data:`PRECISIONS` (``precision="fp8"``), :data:`OPTIMIZERS`;
  one progress protocol (:mod:`planner.progress`).
* :class:`NeuronConfig` / :func:`neuron_parallel`: a Neuron configuration (degrees in NeuronCores) on
  chips; :mod:`planner.golden_neuron` and :mod:`planner.golden`: the step model against published
  Trainium and GPU throughput; :mod:`planner.claims`: AWS's Trn3 claims checked.
* :class:`ModelBlocks`, :class:`BlockProfile`, :func:`trace_profile`: blocks
  and their meta-traced ops, parameters and activations; :func:`block_cost`:
  a block priced on a chip kind.

Everything here is shape-only: no tensor is allocated and no op runs. torch (and
transformers) is imported only inside the meta-device trace of a block, which
runs only when the block's profile is not in the profile cache
(:mod:`planner.profile_cache`).
"""

from __future__ import annotations

from planner.block_pricing import BlockCost, Execution, block_cost
from planner.bound_search import SearchStats, branch_and_bound
from planner.blocks import ModelBlocks
from planner.fitted_efficiency import StepEfficiency, step_efficiency
from planner.comm import CommPricer
from planner.models import model_blocks, model_presets
from planner.goodput import FailureModel, Goodput, job_goodput
from planner.parallel import ORDERS, Parallel, kind_stages, split_layers, uniform_stages
from planner.neuron_config import NeuronConfig, neuron_parallel
from planner.profile import BlockProfile, Collective, SavedTensor, Shard, trace_profile
from planner.schedule import SCHEDULES, Simulation, simulate
from planner.stage import RECOMPUTE, SlotGrid, Stage
from planner.optimizers import OPTIMIZERS, Optimizer
from planner.precision import PRECISIONS, Precision
from planner.progress import Progress
from planner.step import COMM_KINDS, Memory, StageResult, StepConfig, StepResult, step_model
from planner.search import search
from planner.estimate import MemoryPerChip, StepEstimate
from planner.whatif import whatif

__all__ = [
    "COMM_KINDS", "OPTIMIZERS", "ORDERS", "PRECISIONS", "RECOMPUTE", "SCHEDULES",
    "BlockCost", "BlockProfile", "Collective", "CommPricer", "Execution", "FailureModel", "Goodput", "Memory",
    "MemoryPerChip", "ModelBlocks", "NeuronConfig", "Optimizer", "Parallel", "Precision", "Progress", "SavedTensor",
    "SearchStats", "Shard", "Simulation", "SlotGrid", "Stage", "StageResult", "StepConfig", "StepEfficiency",
    "StepEstimate", "StepResult", "block_cost", "branch_and_bound", "job_goodput", "kind_stages", "model_blocks",
    "model_presets", "neuron_parallel", "search", "simulate", "split_layers", "step_efficiency", "step_model",
    "trace_profile", "uniform_stages", "whatif",
]
