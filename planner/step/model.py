"""The step model's entry point: :func:`step_model` runs the parts of :mod:`planner.step` in order."""

from __future__ import annotations

from typing import Sequence

import devices
from planner.block_pricing import Execution
from planner.blocks import ModelBlocks
from planner.comm import CommPricer, pricer_for, scaled_pricer
from planner.fitted_efficiency import collective_factors
from planner.optimizers import GRAD_DTYPES
from planner.schedule import Simulation
from planner.stage import Stage
from planner.step.config import COMM_KINDS, StepConfig, validate
from planner.step.data_parallel import StageTail, data_parallel, optimizer_seconds, tied_reduction
from planner.step.memory import RecomputePlan, choose_recompute
from planner.step.pipeline import StageTimes, hops as pipeline_hops, play_schedule, stage_times
from planner.step.prepare import PreparedStage, prepare_stage
from planner.step.results import PipelineTiming, StageResult, StepResult


def step_model(blocks: ModelBlocks, stages: Sequence[Stage], rack, config: StepConfig, *,
               pricer: CommPricer | None = None) -> StepResult:
    """Model one training step of ``blocks`` cut into ``stages`` on ``rack`` (see :mod:`planner.step`).

    ``rack``: a :class:`devices.RackSpec`, preset name or spec string;
    ``pricer``: a :class:`CommPricer` for that rack to share between calls.
    """
    spec = devices.parse_rack(rack)
    pricer = pricer or pricer_for(spec)
    validate(blocks, stages, config)
    execution = Execution(precision=config.precision, calibrated=config.calibrated)
    if execution.calibrated:  # the stacks' collective libraries against the link model, where fitted
        pricer = scaled_pricer(pricer, spec, collective_factors({s.kind for s in stages}))
    grad_bytes = GRAD_DTYPES[config.grad_dtype]
    m = config.microbatches
    prepared = [prepare_stage(blocks, s, stage, config, execution, pricer) for s, stage in enumerate(stages)]
    plans = [choose_recompute(blocks, prep, len(stages), config, spec, grad_bytes) for prep in prepared]
    times = [stage_times(prep, plan) for prep, plan in zip(prepared, plans)]
    hops = pipeline_hops(prepared, pricer)
    timing = PipelineTiming(tuple(t.forward for t in times), tuple(t.backward for t in times), m, config.schedule,
                            hops)
    sim = play_schedule(timing.forward, timing.backward, m, config.schedule, hops, config.record)
    tails = [_tail(prep, plan, t, sim, pricer, config, grad_bytes) for prep, plan, t in zip(prepared, plans, times)]
    tied_reduction(blocks, stages, pricer, tails)
    return _result(prepared, plans, times, tails, timing, sim, config)


def _tail(prepared: PreparedStage, plan: RecomputePlan, times: StageTimes, sim: Simulation, pricer: CommPricer,
          config: StepConfig, grad_bytes: int) -> StageTail:
    """One stage after its pipeline: data-parallel reduction, parameter gathers, optimizer; its exposed
    communication over the step."""
    s, m = prepared.index, config.microbatches
    dp_tail, param_gather = data_parallel(prepared, sim.last_backward[s], sim.finish[s], pricer, config, grad_bytes)
    opt = optimizer_seconds(prepared, config)
    exposed = {k: 0.0 for k in COMM_KINDS}
    for ch, md in zip(prepared.chunks, plan.modes):
        for kind, sec in ch.comm_kind.items():
            exposed[kind] += sec * m
        if any(x == "full" for x in md):
            exposed["tp"] += m * sum(rc for rc, x in zip(ch.recompute_comm, md) if x == "full")
    exposed["dp"] += times.fsdp * m + max(0.0, dp_tail - sim.finish[s]) + param_gather
    return StageTail(end=max(sim.finish[s], dp_tail) + param_gather + opt, optimizer=opt, exposed=exposed,
                     compute=times.compute * m,
                     busy=sim.busy[s] + max(0.0, dp_tail - sim.finish[s]) + param_gather)


def _result(prepared: list[PreparedStage], plans: list[RecomputePlan], times: list[StageTimes],
            tails: list[StageTail], timing: PipelineTiming, sim: Simulation, config: StepConfig) -> StepResult:
    """The step: per-stage results, and the critical stage's time split into parts that add up to it."""
    p = len(prepared)
    step_end = max(t.end for t in tails)
    # The step is bounded by the busiest stage; the one that finishes last may be a lighter one waiting on it
    # (in 1F1B the first stage ends last), whose wait is not pipeline bubble.
    crit = max(range(p), key=lambda s: (tails[s].busy + tails[s].optimizer, tails[s].end))
    stage_results = tuple(_stage_result(prep, plan, t, tail, step_end)
                          for prep, plan, t, tail in zip(prepared, plans, times, tails))
    cr = tails[crit]
    exposed = dict(cr.exposed)
    waiting = max(0.0, step_end - cr.optimizer - cr.busy)
    exposed["pp"] = min(waiting, 2 * sum(timing.hops[:p - 1])) if p > 1 else 0.0
    # Whatever of the critical stage's time is neither compute nor its own exposed communication
    # (other than pp) is pipeline bubble; the parts add up to the step exactly.
    accounted = cr.compute + sum(exposed.values()) + cr.optimizer
    bubble = max(0.0, step_end - accounted)
    if accounted > step_end:  # rounding: trim the bubble-free remainder from dp
        exposed["dp"] = max(0.0, exposed["dp"] - (accounted - step_end))
    sources: dict[int, object] = {}
    for prep in prepared:
        for ch in prep.chunks:
            for c in ch.costs:
                for fig in c.sources:
                    sources[id(fig)] = fig
    return StepResult(
        seconds=step_end, compute=cr.compute, exposed=exposed, bubble=bubble, optimizer=cr.optimizer,
        critical_stage=crit, stages=stage_results, tokens=config.global_batch * config.seq_len,
        model_flops=_total_model_flops(prepared, config), chips=sum(len(prep.stage.slots) for prep in prepared),
        projected=any(sr.projected for sr in stage_results), sources=tuple(sources.values()), timing=timing,
        config=config, _events=sim.events if config.record else None)


def _stage_result(prepared: PreparedStage, plan: RecomputePlan, times: StageTimes, tail: StageTail,
                  step_end: float) -> StageResult:
    stage = prepared.stage
    return StageResult(
        index=prepared.index, kind=stage.kind, slots=stage.slots, tp=stage.tp, cp=stage.cp, dp=stage.dp,
        ep=stage.ep, microbatch=prepared.microbatch, chunks=stage.chunks, recompute=plan.mode,
        forward=times.forward, backward=times.backward, compute=tail.compute, exposed=tail.exposed,
        busy=tail.busy + tail.optimizer, idle=max(0.0, step_end - tail.busy - tail.optimizer),
        optimizer=tail.optimizer, memory=plan.memory, in_flight=plan.in_flight,
        projected=any(c.projected for ch in prepared.chunks for c in ch.costs))


def _total_model_flops(prepared: list[PreparedStage], config: StepConfig) -> float:
    """Model FLOPs of the whole step: every block once per sample (profiles are per microbatch)."""
    total = 0.0
    for prep in prepared:
        for ch in prep.chunks:
            for pr in ch.profiles:
                total += pr.model_flops / prep.microbatch * config.global_batch
    return total


__all__ = ["step_model"]
