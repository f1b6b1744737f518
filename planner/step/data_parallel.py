"""The data-parallel tail of a step: gradient reduction beside the last backward, parameters several stages
hold (summed over every holder), ZeRO-1/2 parameter gathers, and the optimizer step (torch's fused kernel,
:data:`~planner.optimizers.OPTIMIZERS`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import devices
from planner.blocks import ModelBlocks
from planner.comm import CommPricer
from planner.optimizers import OPTIMIZERS
from planner.profile import BlockProfile
from planner.stage import Stage
from planner.step.config import StepConfig
from planner.step.pipeline import two_streams
from planner.step.prepare import PreparedStage


@dataclass(slots=True)
class StageTail:
    """A stage's step after its pipeline: the reduction, the gathers and the optimizer (modelled seconds)."""

    end: float
    """When the stage's step ends (its optimizer done)."""
    optimizer: float
    exposed: dict[str, float]
    """Exposed communication over the step, by kind (:data:`~planner.step.COMM_KINDS`)."""
    compute: float
    busy: float
    """Seconds computing or waiting on the stage's own collectives."""


def data_parallel(prepared: PreparedStage, last_backward, finish: float, pricer: CommPricer, config: StepConfig,
                  grad_bytes: int) -> tuple[float, float]:
    """(when the gradient reduction ends, exposed seconds of the ZeRO parameter gather) of one stage whose
    pipeline finished at ``finish``, each chunk's last backward running over ``last_backward``."""
    stage, chunks, share, ties = prepared.stage, prepared.chunks, prepared.share, prepared.ties
    if stage.dp == 1 or config.zero == 3:
        return finish, 0.0
    dp_group, edp_group = stage.group("dp"), stage.group("edp")
    reduce = "all_reduce" if config.zero == 0 else "reduce_scatter"
    buckets = []
    for c_index, (ch, (start, end)) in enumerate(zip(chunks, last_backward)):
        total_b = sum(c.backward for c in ch.costs) or 1.0
        # A parameter several blocks share is in the bucket of the first (its gradient is final there); each
        # holder adds its part into that gradient in its own backward (interop.live.pipeline.untie_holders).
        shared = [0] * len(ch.profiles)
        for tie in (ties[c_index] if ties else ()):
            for k in tie.holders[1:]:
                shared[k] += tie.elements
        t = start
        for pr, c, dup in zip(reversed(ch.profiles), reversed(ch.costs), reversed(shared)):
            t += (end - start) * c.backward / total_b
            if config.zero == 2:
                continue  # reduce-scattered every microbatch (in the backward times)
            seconds = pricer.seconds(reduce, (pr.params - pr.expert_params - dup) * grad_bytes, dp_group)
            if pr.expert_params:
                seconds += pricer.seconds(reduce, pr.expert_params * grad_bytes, edp_group)
            buckets.append((t if config.overlap_grad_reduce else finish, seconds))
    comm = finish if not buckets else 0.0
    for ready, seconds in sorted(buckets):
        comm = max(comm, ready) + seconds
    tail = max(finish, comm)
    hidden = max(0.0, sum(sec for _, sec in buckets) - (tail - finish))
    tail += (1.0 - share) * hidden
    gather = 0.0
    if config.zero in (1, 2):
        per_block = [pricer.seconds("all_gather", pr.param_bytes, dp_group) for ch in chunks for pr in ch.profiles]
        if config.overlap_param_gather:
            f_blocks = [c.forward for ch in chunks for c in ch.costs]
            gather = two_streams(f_blocks, per_block, [0.0] * len(per_block), share) - sum(f_blocks)
        else:
            gather = sum(per_block)
    return tail, gather


def tied_reduction(blocks: ModelBlocks, stages: Sequence[Stage], pricer: CommPricer, tails: list[StageTail]) -> None:
    """Parameters several stages hold (an embedding tied to the LM head, ``blocks.tied_parameters()``: name ->
    (bytes, holding blocks)): their gradients are summed over every holder's slots after the holders' last
    backward and data-parallel reduction, before their optimizers."""
    tied = getattr(blocks, "tied_parameters", None)
    if tied is None:
        return
    for nbytes, holders in tied().values():
        ids = [s for s, st in enumerate(stages) if any(b in st.blocks for b in holders)]
        if len(ids) < 2:
            continue
        group = tuple(slot for s in ids for slot in stages[s].slots)
        seconds = pricer.seconds("all_reduce", nbytes, group)
        start = max(tails[s].end - tails[s].optimizer for s in ids)
        for s in ids:
            waited = start + seconds - (tails[s].end - tails[s].optimizer)
            tails[s].end += waited
            tails[s].exposed["dp"] += waited
            tails[s].busy += seconds


def optimizer_seconds(prepared: PreparedStage, config: StepConfig) -> float:
    """The optimizer step as torch's fused optimizers run it, over the stage's parameters (a shared one once)
    taken as one tensor per list: Adam(W) first increments its step counters (one ``_foreach_add_``), then
    one fused kernel walks parameters, gradients and state; SGD's walks parameters, gradients and momentum.
    In float32 over master weights, else in the parameters' dtype (torch keeps the state in it)."""
    stage, ties = prepared.stage, prepared.ties
    optimizer = OPTIMIZERS[config.optimizer]
    profiles = prepared.profiles
    n = sum(pr.params for pr in profiles) - sum(t.elements * (len(t.holders) - 1) for ct in ties for t in ct)
    if config.zero >= 1:
        n = math.ceil(n / stage.dp)
    dtype = "float32" if config.master_weights else _param_dtype(profiles)
    lists = [(n,)] * (2 + optimizer.state_tensors)  # params, grads, then the state (exp_avgs...; momentum buffers)
    counters = None
    if optimizer.step_counters:
        lists.append(())  # the step counters
        counters = devices.estimate(stage.kind, "aten::_foreach_add_.Scalar", [()], "float32", list_length=1)
    e = devices.estimate(stage.kind, f"aten::{optimizer.kernel}", lists, dtype, list_length=1)
    return e.seconds + (counters.seconds if counters is not None else 0.0)


def _param_dtype(profiles: Sequence[BlockProfile]) -> str:
    """The parameters' dtype as their bytes per element tell it (float32, else a 16-bit format)."""
    per_param = sum(pr.param_bytes for pr in profiles) / max(1, sum(pr.params for pr in profiles))
    return "float32" if per_param >= 4 else "bfloat16"


__all__ = ["StageTail", "data_parallel", "optimizer_seconds", "tied_reduction"]
