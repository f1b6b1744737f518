"""A configuration priced: :class:`StepEstimate` (a step of a model on a rack under one parallel configuration,
every figure modelled) and :func:`run_config`, which lays the configuration's stages and runs the step model.

Shared by :func:`planner.whatif` (one configuration, or the one the search finds) and :func:`planner.search`
(every candidate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from devices.chip_set import DEFAULT_BASIS, ChipSet, Economics, check_basis
from planner.blocks import ModelBlocks
from planner.comm import CommPricer
from planner.optimizers import check_optimizer
from planner.parallel import Parallel, largest_divisor, uniform_stages
from planner.precision import PRECISIONS, check_precision
from planner.stage import check_recompute
from planner.step import StepConfig, StepResult, step_model


@dataclass(frozen=True, slots=True)
class MemoryPerChip:
    """Modelled bytes per chip on the most loaded stage (see :attr:`StepEstimate.fits`)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    total: int
    capacity: int
    """The chip's memory."""


@dataclass(frozen=True)
class StepEstimate:
    """A modelled training step (every figure is modelled; ``projected`` marks projected chips)."""

    seconds: float
    """Modelled seconds per step."""
    tokens_per_second: float
    tokens_per_second_per_chip: float
    """Per chip the configuration uses."""
    model_tflops_per_chip: float
    """Model FLOPs (3 x forward matmul and attention FLOPs, recompute not counted) per second per chip, / 1e12."""
    mfu: float
    """Model FLOPs over the chips' dense peak in the matmul precision (FP8 peak for ``precision="fp8"``)
    (:meth:`devices.ChipSet.mfu` of the chips used)."""
    memory_per_chip: MemoryPerChip
    fits: bool
    """True when every stage's modelled memory fits its chips."""
    joules_per_token: float | None
    """Board power of every chip used over the step, per token (None without power figures)."""
    usd_per_million_tokens: float | None
    """Chip-hours at catalogue prices on :attr:`price_basis` per million tokens (None when a chip has no price on
    it: :attr:`economics` says why)."""
    breakdown: dict[str, float]
    """compute, exposed communication per kind (tp_comm, cp_comm, ep_comm, dp_comm, pp_comm, host_comm), bubble and
    optimizer seconds of the critical stage; they add up to ``seconds``."""
    parallel: dict[str, Any]
    """The configuration used (dp, schedule, microbatches and recompute filled in)."""
    projected: bool
    """True when a projected chip figure (e.g. Trainium4) entered the estimate."""
    result: StepResult = field(repr=False, compare=False)
    """The full step-model result (per-stage busy/idle, memory; its events replay the schedule)."""
    model: str = ""
    """The model's name."""
    rack: str = ""
    """The rack's name."""
    rack_counts: dict[str, int] = field(default_factory=dict)
    """Chips of the rack per kind (the configuration may leave some idle)."""
    precision: str = "bfloat16"
    """The training precision (:data:`~planner.precision.PRECISIONS`)."""
    advice: str = ""
    """When the step does not fit: the memory it needs per chip and the largest fitting alternative."""
    price_basis: str = DEFAULT_BASIS
    """The price basis of :attr:`usd_per_step` and :attr:`usd_per_million_tokens` (:data:`devices.PRICE_BASES`)."""
    usd_per_step: float | None = None
    """Chip-hours of every chip used over the step at the basis' prices (None without a price for every kind)."""
    joules_per_step: float | None = None
    """Board power of every chip used over the step (None without a power figure for every kind)."""
    economics: Economics | None = None
    """The step's cost and energy with the figures summed and, where unset, why (:meth:`devices.ChipSet.economics`)."""
    kernels: str = "fused"
    """The kernels priced (:mod:`planner.kernels`): ``fused`` (a production stack) or ``eager`` (the ops as
    written, as a slot runs them)."""

    def goodput(self, failures=None):
        """Expected goodput under a failure model (see :mod:`planner.goodput`)."""
        from planner.goodput import FailureModel, goodput

        return goodput(self, failures or FailureModel())

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) lines as the CLI prints them, every figure labelled modelled."""
        from planner.report import estimate_rows

        return estimate_rows(self)

    def __str__(self) -> str:
        from devices.text_table import table

        return table(None, [list(row) for row in self.rows()], align="ll", rule=False)


def estimate_from_result(result: StepResult, spec, parallel: dict[str, Any], *, precision: str,
                         model: str, price_basis: str = DEFAULT_BASIS, kernels: str = "fused") -> StepEstimate:
    """A :class:`StepEstimate` from a step-model result on ``spec`` (cost on ``price_basis``)."""
    chips = result.chips
    tokens_s = result.tokens / result.seconds
    used = ChipSet.of((st.kind, len(st.slots)) for st in result.stages)
    money = used.economics(result.seconds, result.tokens, check_basis(price_basis))
    flops_s = result.model_flops / result.seconds
    worst = max(result.stages, key=lambda s: s.memory.total / max(1, s.memory.capacity))
    mem = worst.memory
    return StepEstimate(
        seconds=result.seconds, tokens_per_second=tokens_s, tokens_per_second_per_chip=tokens_s / chips,
        model_tflops_per_chip=flops_s / chips / 1e12,
        mfu=used.mfu(result.model_flops, result.seconds, PRECISIONS[precision].peak),
        memory_per_chip=MemoryPerChip(mem.weights, mem.gradients, mem.optimizer, mem.activations, mem.total,
                                      mem.capacity),
        fits=all(s.memory.fits for s in result.stages),
        joules_per_token=money.joules_per_token, usd_per_million_tokens=money.usd_per_million_tokens,
        breakdown=result.breakdown, parallel=parallel, projected=result.projected, result=result, model=model,
        rack=spec.name, rack_counts=spec.counts(), precision=precision, price_basis=price_basis,
        usd_per_step=money.usd, joules_per_step=money.joules, economics=money, kernels=kernels)


def reprice(est: StepEstimate, price_basis: str) -> StepEstimate:
    """``est`` with its cost on another price basis (the same step; the figures of :class:`devices.ChipSet`)."""
    if price_basis == est.price_basis:
        return est
    used = ChipSet.of((st.kind, len(st.slots)) for st in est.result.stages)
    money = used.economics(est.seconds, est.result.tokens, check_basis(price_basis))
    return replace(est, price_basis=price_basis, usd_per_step=money.usd, economics=money,
                   usd_per_million_tokens=money.usd_per_million_tokens)


def check_step(global_batch: int, seq_len: int, precision: str, recompute: str, optimizer: str) -> None:
    """ValueError naming the first of the what-if's step arguments that is not accepted."""
    for name, value in (("global_batch", global_batch), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    check_precision(precision)
    check_recompute(recompute)
    check_optimizer(optimizer)


def run_config(blocks: ModelBlocks, spec, par: Parallel, *, global_batch: int, seq_len: int, precision: str,
               recompute: str, optimizer: str, pricer: CommPricer | None = None,
               record: bool = False) -> tuple[StepResult, dict[str, Any]]:
    """The step model for one configuration: (result, the configuration as a dict).

    Without ``par.dp``, dp is the most replicas the chips left over allow that also split the global batch
    into whole microbatches (the remaining chips idle, reported as ``idle_chips``). On a rack mixing chip
    kinds, one stage per kind (:func:`~planner.parallel.kind_stages`)."""
    if len(spec.counts()) > 1:
        return _run_mixed(blocks, spec, par, global_batch=global_batch, seq_len=seq_len, precision=precision,
                          recompute=recompute, optimizer=optimizer, pricer=pricer, record=record)
    if par.dp is None:
        cell = par.tp * par.cp * par.pp
        most = len(spec) // cell
        if global_batch % par.microbatch:
            raise ValueError(f"global_batch: {global_batch} samples do not split into microbatches of "
                             f"{par.microbatch}")
        dp = largest_divisor(global_batch // par.microbatch, most)
        if dp:
            par = replace(par, dp=dp)
    stages, par, idle = uniform_stages(blocks, spec, par)
    per_step = par.microbatch * par.dp
    if global_batch % per_step:
        raise ValueError(f"global_batch: {global_batch} samples are not a multiple of microbatch x dp = "
                         f"{par.microbatch} x {par.dp} = {per_step}")
    microbatches = global_batch // per_step
    config = StepConfig(global_batch=global_batch, seq_len=seq_len, microbatches=microbatches,
                        schedule=par.schedule, precision=precision, recompute=recompute, optimizer=optimizer,
                        zero=par.zero_stage, record=record, **_recipe(blocks, precision))
    if seq_len % par.cp:
        raise ValueError(f"cp: context parallelism {par.cp} does not divide seq_len {seq_len}")
    result = step_model(blocks, stages, spec, config, pricer=pricer)
    used = par.as_dict()
    used.update(zero=par.zero_stage, schedule=par.schedule, microbatches=microbatches,
                recompute=sorted({s.recompute for s in result.stages}), idle_chips=idle)
    return result, used


def _run_mixed(blocks: ModelBlocks, spec, par: Parallel, *, global_batch: int, seq_len: int, precision: str,
               recompute: str, optimizer: str, pricer, record: bool) -> tuple[StepResult, dict[str, Any]]:
    from planner.parallel import kind_stages

    if par.pp != 1 or par.vp != 1 or par.dp is not None or par.ep != 1:
        raise ValueError("parallel: on a rack mixing chip kinds the what-if makes one pipeline stage per kind; "
                         "pp, vp, dp and ep are not accepted there (give tp, cp, fsdp, zero, microbatch)")
    stages = kind_stages(blocks, spec, par, seq_len=seq_len, precision=precision)
    dps = [s.dp for s in stages]
    microbatches = _mixed_microbatches(global_batch, dps, par.microbatch)
    if not microbatches:
        raise ValueError(f"global_batch: {global_batch} samples do not split evenly over the stages' data-parallel "
                         f"replicas {dps}")
    config = StepConfig(global_batch=global_batch, seq_len=seq_len, microbatches=microbatches, schedule="1f1b",
                        precision=precision, recompute=recompute, optimizer=optimizer, zero=par.zero_stage, record=record,
                        **_recipe(blocks, precision))
    result = step_model(blocks, stages, spec, config, pricer=pricer)
    used = par.as_dict()
    used.update(pp=len(stages), dp=dps, zero=par.zero_stage, schedule="1f1b", microbatches=microbatches,
                recompute=sorted({s.recompute for s in result.stages}),
                stages=[f"{s.kind}: blocks {s.chunks[0].start}-{s.chunks[0].stop - 1}" for s in stages],
                idle_chips=len(spec) - sum(len(s.slots) for s in stages))
    return result, used


def _recipe(blocks: ModelBlocks, precision: str) -> dict[str, Any]:
    """The step settings that follow from the precision and the blocks' kernels: float32 training keeps no master
    copy (the parameters are their own) and reduces float32 gradients; fused blocks are priced with the fitted
    step efficiencies, eager ones by the per-op cost model alone (:func:`planner.kernels.calibrated`)."""
    from planner.kernels import calibrated

    full = precision == "float32"
    return dict(calibrated=calibrated(blocks), master_weights=not full, grad_dtype="float32" if full else "bfloat16")


def _mixed_microbatches(global_batch: int, dps: list[int], microbatch: int) -> int:
    """The most microbatches ``m`` that split ``global_batch`` into whole microbatches of at least ``microbatch``
    samples on every stage (``m * dp`` dividing it for each stage's replicas ``dp``); 0 when none does. ``m``
    divides every ``global_batch / dp``, so it is a divisor of their gcd (no loop over the batch)."""
    if any(global_batch % d for d in dps):
        return 0
    common = 0
    for d in dps:
        common = math.gcd(common, global_batch // d)
    return largest_divisor(common, global_batch // (microbatch * max(dps)))


__all__ = ["MemoryPerChip", "StepEstimate", "check_step", "estimate_from_result", "reprice", "run_config"]
