"""``interop.plan``: partition one model across a heterogeneous rack, and the :class:`Plan` it returns.

The model is cut into blocks from its own structure (:mod:`~interop.live.cut`),
the plan search (:mod:`~planner.plan_search`) places the blocks on the rack's
slots, and the step model (:func:`~planner.step_model`) predicts the step.
:meth:`Plan.apply` runs the plan in this process (:mod:`~interop.live.runner`);
:meth:`Plan.baselines` compares it with every homogeneous sub-rack, the uniform split
and an ideal homogeneous rack of equal peak FLOPs (:mod:`~interop.live.baselines`);
:meth:`Plan.table`, :meth:`Plan.to_json` and :meth:`Plan.gantt` show it
(:mod:`~interop.live.plan_presentation`). Every time is modelled. This module holds
the entry point, its validation and the :class:`Plan` itself.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import devices
from devices.chip_set import DEFAULT_BASIS, ChipSet, Economics
from interop.live.baselines import Baselines, baselines
from interop.live.plan_presentation import plan_gantt, plan_json, plan_table
from planner.layout import Layout
from planner.plan_search import OBJECTIVES, Problem, SearchStats, search
from planner.optimizers import OPTIMIZERS
from planner.step import StepResult

SCHEDULE_CHOICES = ("auto", "gpipe", "1f1b", "interleaved")
RECOMPUTE_CHOICES = ("auto", "none")
"""A live plan runs blocks whole (no activation recompute): ``auto`` means none."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """The modelled step of a plan (a view of the step model's :class:`~planner.StepResult`)."""

    seconds: float
    """Modelled seconds of one training step."""
    busy: dict[int, float]
    """Per slot: modelled seconds computing or in its own communication."""
    idle: dict[int, float]
    """Per slot: modelled seconds waiting on other stages (pipeline bubble)."""
    exposed: dict[str, float]
    """Exposed communication on the critical stage, by kind (tp, cp, ep, dp, pp, host), modelled seconds."""
    peak_bytes: dict[int, int]
    """Per slot: modelled peak memory (weights, gradients, optimizer state, activations in flight)."""
    breakdown: dict[str, float]
    """compute, exposed communication, bubble and optimizer of the critical stage; they add up to seconds."""
    result: StepResult
    modelled: bool = True

    @classmethod
    def of(cls, result: StepResult) -> Prediction:
        busy, idle, peak = {}, {}, {}
        for st in result.stages:
            for s in st.slots:
                busy[s] = st.busy
                idle[s] = st.idle
                peak[s] = st.memory.total
        return cls(result.seconds, busy, idle, dict(result.exposed), peak, result.breakdown, result)


@dataclass(slots=True)
class Plan:
    """A placement of a model's blocks on a rack's slots, with its modelled step.

    ``stages``: the step model's per-stage results (block ranges per chunk, kind, slots, tp/dp degree,
    per-replica microbatch, modelled times and memory); ``predicted``: the modelled step.
    """

    blocks: Any
    layout: Layout
    predicted: Prediction
    rack: Any
    """The :class:`devices.RackSpec` planned on."""
    objective: str
    optimizer: str
    problem: Problem
    stats: SearchStats
    live: bool
    """True when the rack can be installed in this process (the plan can :meth:`apply`)."""
    rack_object: Any = None
    _baselines: Baselines | None = field(default=None, repr=False)

    @property
    def stages(self):
        return self.predicted.result.stages

    @property
    def schedule(self) -> str:
        return self.layout.schedule

    @property
    def microbatches(self) -> int:
        return self.layout.microbatches

    @property
    def global_batch(self) -> int:
        return self.layout.global_batch

    # -- reports ----------------------------------------------------------------------------

    def table(self) -> str:
        """The plan as a printed table (every time and byte modelled; * = projected chip)."""
        return plan_table(self)

    def economics(self) -> Economics:
        """Cost (on the problem's price basis) and energy of the predicted step over every slot it uses."""
        chips = ChipSet.of((st.kind, len(st.slots)) for st in self.stages)
        tokens = self.global_batch * self.problem.seq_len
        return chips.economics(self.predicted.seconds, tokens, self.problem.price_basis)

    def to_json(self) -> str:
        """The plan as JSON: stages, schedule, batch split, the modelled step and per-slot figures."""
        return plan_json(self)

    def gantt(self, path: str | os.PathLike) -> str:
        """A one-page PNG of the modelled step: stages x microbatches (forward, backward), the data-parallel
        reduction and optimizer after them, idle time as bubble."""
        return plan_gantt(self, path)

    # -- alternatives -------------------------------------------------------------------------

    def baselines(self) -> Baselines:
        """Modelled: every homogeneous sub-rack (the best plan on one kind's slots), the uniform split (this
        plan's stages with the blocks divided evenly), and an ideal homogeneous rack of equal peak FLOPs
        (:mod:`interop.live.baselines`; computed once)."""
        if self._baselines is None:
            self._baselines = baselines(self)
        return self._baselines

    def with_layout(self, layout: Layout) -> Plan:
        """The same model, rack and step with another layout (stages, schedule, microbatches) instead of the
        searched one: its prediction, table, baselines, :meth:`apply` and :meth:`distribute` (no search)."""
        if not isinstance(layout, Layout):
            raise TypeError(f"layout: expected an planner.layout.Layout, got {type(layout).__name__}")
        if layout.global_batch != self.global_batch:
            raise ValueError(f"layout: a global batch of {layout.global_batch} rows; this plan's step takes "
                             f"{self.global_batch}")
        layout.validate(len(self.blocks), len(self.rack))
        for i, stage in enumerate(layout.stages):  # a stage is priced as its kind: it must be its slots' kind
            kinds = sorted({self.rack.slot(s).kind for s in stage.slots})
            if kinds != [stage.kind]:
                raise ValueError(f"layout: stage {i} is a {stage.kind!r} stage on slots {list(stage.slots)}, which "
                                 f"are {', '.join(kinds)}; a stage's kind must be the kind of its slots")
        result = self.problem.evaluate(layout)
        return Plan(self.blocks, layout, Prediction.of(result), self.rack, self.objective, self.optimizer,
                    self.problem, SearchStats(candidates=1, evaluated=1, exact=False), self.live, self.rack_object)

    def whatif_config(self) -> dict[str, Any]:
        """This plan's step as :func:`interop.whatif` keyword arguments: ``whatif(config, **plan.whatif_config())``
        prices the same step (rack, layout, batch, precision, optimizer) with ``kernels="eager"``, the ops the slots
        run, as :attr:`predicted` does: ``parallel`` (tp, pp, dp, rows per microbatch, ZeRO 0: the plan's replicas
        all-reduce their gradients), ``global_batch``, ``seq_len``, ``precision`` (the parameters' dtype),
        ``optimizer``, ``recompute="none"``, ``price_basis``. ``rack`` is the planned rack, or ``"<kind>:<n>"`` for
        the slots used when the plan uses part of it. ValueError naming what the what-if cannot express: stages
        of several kinds or of differing degrees, an uneven split of the layers, a GPipe schedule over stages."""
        from planner.parallel import split_layers

        stages = self.layout.stages
        first = stages[0]
        kinds = sorted({st.kind for st in stages})
        if len(kinds) > 1:
            raise ValueError(f"plan: stages on {', '.join(kinds)}; a what-if's configuration is one kind's (run "
                             f"interop.whatif on the rack for per-kind stages of its own)")
        differ = [name for name in ("tp", "cp", "ep", "dp") if len({getattr(st, name) for st in stages}) > 1]
        if differ:
            raise ValueError(f"plan: stages differ in {', '.join(differ)}; a what-if's configuration gives every "
                             f"stage the same degrees")
        pp, vp = len(stages), len(first.chunks)
        if pp > 1:
            even = split_layers(self.blocks, pp * vp)
            planned = [st.chunks[c] for c in range(vp) for st in stages]
            if planned != even:
                raise ValueError(f"plan: blocks split {[(r.start, r.stop) for r in planned]}; a what-if splits them "
                                 f"evenly, {[(r.start, r.stop) for r in even]}")
            if self.schedule != ("interleaved" if vp > 1 else "1f1b"):
                raise ValueError(f"plan: schedule {self.schedule!r}; a what-if runs 1f1b (interleaved with vp > 1)")
        used = sum(len(st.slots) for st in stages)
        rack = self.rack if used == len(self.rack) else f"{first.kind}:{used}"
        rows = self.layout.microbatch_rows
        if rows % first.dp:
            raise ValueError(f"plan: {rows} rows a microbatch do not split over {first.dp} replicas")
        parallel = dict(tp=first.tp, pp=pp, cp=first.cp, ep=first.ep, vp=vp, dp=first.dp, zero=0,
                        microbatch=rows // first.dp)
        return dict(rack=rack, parallel=parallel, global_batch=self.global_batch, seq_len=self.problem.seq_len,
                    precision=self.problem.grad_dtype, optimizer=self.optimizer, recompute="none",
                    price_basis=self.problem.price_basis, kernels="eager")

    # -- running ---------------------------------------------------------------------------------

    def apply(self, model, optimizer: Callable | None = None):
        """Run the plan in this process: returns a :class:`~interop.live.runner.PlanRunner` whose
        ``step(inputs, targets, loss_fn)`` trains one global batch. ``optimizer(params)`` builds each
        replica's optimizer (default: the planned one, torch's fused kernel, lr 1e-3)."""
        import interop
        from interop.live.runner import PlanRunner

        if not self.live:
            raise RuntimeError(f"the plan is for rack {self.rack.name!r} ({len(self.rack)} slots), which cannot be "
                               f"installed in this process (more slots than a live rack holds); it is plan-only")
        if self.rack_object is not None and interop.current_rack() is not self.rack_object:
            interop.set_rack(self.rack_object)
        return PlanRunner(self.layout, self.blocks, model, optimizer or default_optimizer(self.optimizer))


    def distribute(self, model, optimizer: Callable | None = None):
        """This rank's part of the plan across processes (call on every rank of a torchrun job on the "hybrid"
        backend, one rank per slot): a :class:`~interop.live.distributed.DistributedPlanRunner` built on
        torch.distributed.pipelining, FSDP2 (data parallelism) and parallelize_module/DTensor (tensor
        parallelism); its ``last_step.modelled_seconds`` is the step on the one modelled clock all ranks share.
        A plan the export does not run (replica counts or tensor-parallel degrees that differ between stages, a
        stage with both tensor and data parallelism) is refused with a message naming it
        (:func:`~interop.live.distributed.exportable`); :meth:`apply` runs every plan."""
        from interop.live.distributed import DistributedPlanRunner

        return DistributedPlanRunner(self.layout, self.blocks, model, optimizer or default_optimizer(self.optimizer))


def default_optimizer(name: str) -> Callable:
    """The planned optimizer as torch builds it: the fused kernel (one launch per replica, as planned)."""
    import torch

    if name == "sgd":
        return lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9, fused=True)
    if name == "adam":
        return lambda params: torch.optim.Adam(params, lr=1e-3, fused=True)
    return lambda params: torch.optim.AdamW(params, lr=1e-3, fused=True)


# -- the entry point --------------------------------------------------------------------------------


def plan(model, example_inputs, rack=None, *, slots=None, objective: str = "time", global_batch: int | None = None,
         microbatches: int | None = None, schedule: str = "auto", optimizer: str = "adamw", recompute: str = "auto",
         max_seconds: float | None = None, split_spec: dict | None = None, loss_fn: Callable | None = None,
         example_targets=None, price_basis: str = DEFAULT_BASIS) -> Plan:
    """Partition ``model`` across ``rack`` (see the module doc).

    ``example_inputs``: the model's positional inputs for one global batch (dimension 0 is the batch);
    ``rack``: a live :class:`interop.Rack`, a spec string or a preset (None: the current rack); a spec too
    large for a live rack is planned without being installed (the plan cannot ``apply``). ``slots``: the
    slot indices the plan may use (default: all). ``objective``: ``time`` (seconds per step), ``cost``
    (dollars per step, from the catalogue's prices on ``price_basis``: ``on-demand``, ``capacity-block`` or
    ``reserved-effective``) or ``energy`` (joules per step: power x step time of every slot used). ``global_batch``: rows per step (default: the example's). ``microbatches`` /
    ``schedule``: fixed, or searched (None / ``"auto"``). ``optimizer``: ``adamw``, ``adam`` or ``sgd``
    (optimizer state in memory, the fused kernel's time). ``recompute``: ``auto`` or ``none`` (a live plan
    runs blocks whole). ``max_seconds``: a wall-time budget for the search. ``split_spec``: the pipelining
    API's split points where the model's structure gives none; ``loss_fn(outputs, targets)`` and
    ``example_targets``: the loss the last block is costed with (default: cross-entropy over the last
    dimension).
    """
    import interop
    from interop.live.cut import cut

    check_plan_arguments(objective=objective, schedule=schedule, optimizer=optimizer, recompute=recompute,
                         slots=slots, global_batch=global_batch, microbatches=microbatches,
                         max_seconds=max_seconds, split_spec=split_spec)
    rack_object, spec, live = _resolve_rack(rack)
    n_slots = len(spec)
    if slots is None:
        chosen = range(n_slots)
    else:
        chosen = tuple(int(s) for s in slots)  # ints already (numpy's included): checked above
        bad = [s for s in chosen if not 0 <= s < n_slots]
        if bad or not chosen or len(set(chosen)) != len(chosen):
            listing = ", ".join(f"{s.index} ({s.kind})" for s in spec.iter_slots()) if n_slots <= 64 else \
                f"0..{n_slots - 1}"
            raise ValueError(f"slots: {list(chosen) if not bad else bad} "
                             f"{'not on' if bad else 'is not a list of distinct slots of'} rack {spec.name!r}; "
                             f"its slots are {listing}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    blocks = cut(model, args, split_spec=split_spec, loss_fn=loss_fn)
    if example_targets is not None:
        blocks.example_targets = example_targets
    global_batch = blocks.example_batch if global_batch is None else int(global_batch)
    microbatches = None if microbatches is None else int(microbatches)
    seq_len = _seq_len(args)
    if microbatches is not None:
        if microbatches < 1 or global_batch % microbatches:
            raise ValueError(f"microbatches: {microbatches} does not divide the global batch ({global_batch})")
        counts = (microbatches,)
    else:
        counts = ()
    schedules = ("1f1b", "gpipe", "interleaved") if schedule == "auto" else (schedule,)
    dtype = _param_dtype(model)
    from planner.comm import CommPricer

    # One transfer model (collectives.transfer) prices the runner's copies on the timeline and the step
    # model's pipeline hops alike.
    pricer = CommPricer(spec)
    # torch keeps optimizer state in the parameters' dtype and no master copy (master_weights=False).
    problem = Problem(blocks, spec, chosen, global_batch, seq_len, objective=objective, price_basis=price_basis,
                      schedules=schedules,
                      microbatches=counts, optimizer=optimizer, recompute="none", calibrated=False,
                      master_weights=False, state_bytes=OPTIMIZERS[optimizer].state_bytes(dtype.itemsize),
                      grad_dtype=devices.dtype_name(dtype), max_seconds=max_seconds, pricer=pricer)
    layout, result, stats = search(problem)
    return Plan(blocks, layout, Prediction.of(result), spec, objective, optimizer, problem, stats, live,
                rack_object)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_plan_arguments(*, objective, schedule, optimizer, recompute, slots, global_batch, microbatches,
                         max_seconds, split_spec) -> None:
    """:func:`plan`'s arguments, each checked before any work: a ValueError or TypeError that names the
    argument and what it accepts (None always means "not given"; 0 is not None)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if schedule not in SCHEDULE_CHOICES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULE_CHOICES)}, got {schedule!r}")
    if not isinstance(optimizer, str) or optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if recompute not in RECOMPUTE_CHOICES:
        raise ValueError(f"recompute: a live plan runs its blocks whole; expected one of "
                         f"{', '.join(RECOMPUTE_CHOICES)}, got {recompute!r}")
    if slots is not None:
        if isinstance(slots, (str, bytes)) or not isinstance(slots, Iterable):
            raise TypeError(f"slots: expected a list of slot indices (ints), got {type(slots).__name__}")
        wrong = [s for s in slots if not _is_int(s)]
        if wrong:
            raise TypeError(f"slots: expected slot indices (ints), got {wrong[0]!r} ({type(wrong[0]).__name__})")
    for name, value in (("global_batch", global_batch), ("microbatches", microbatches)):
        if value is None:
            continue
        if not _is_int(value):
            raise TypeError(f"{name}: expected a positive int or None, got {value!r} ({type(value).__name__})")
        if value < 1:
            raise ValueError(f"{name}: expected a positive int or None (None: "
                             f"{'the example batch' if name == 'global_batch' else 'searched'}), got {value}")
    if max_seconds is not None:
        if isinstance(max_seconds, bool) or not isinstance(max_seconds, numbers.Real):
            raise TypeError(f"max_seconds: expected a number of seconds or None, got {max_seconds!r} "
                            f"({type(max_seconds).__name__})")
        if not math.isfinite(max_seconds) or max_seconds <= 0:
            raise ValueError(f"max_seconds: expected a positive, finite number of seconds or None (no budget), "
                             f"got {max_seconds}")
    if split_spec is not None and not isinstance(split_spec, Mapping):
        raise TypeError(f"split_spec: expected a dict of submodule name -> SplitPoint (the pipelining API's), "
                        f"or None, got {type(split_spec).__name__}")


def _param_dtype(model):
    import torch

    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    if len(dtypes) > 1:
        raise ValueError(f"model: its parameters mix dtypes {sorted(map(str, dtypes))}; the plan's runner keeps one "
                         "gradient buffer per replica (cast the model to one dtype)")
    dtype = dtypes.pop() if dtypes else torch.float32
    if devices.dtype_name(dtype) not in ("float32", "bfloat16"):
        raise ValueError(f"model: parameters in {dtype}; a plan trains float32 or bfloat16 parameters")
    return dtype


def _seq_len(args) -> int:
    import torch

    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return int(first.shape[1]) if first is not None and first.dim() > 1 else 1


def _resolve_rack(rack):
    import interop
    from interop import _C  # the runtime owns the slot limit

    if rack is None:
        current = interop.current_rack()
        return current, current.spec, True
    if isinstance(rack, interop.Rack):
        return rack, rack.spec, True
    spec = devices.parse_rack(rack)
    current = interop.current_rack()
    if current is not None and (current.name == spec.name or current.spec == spec):
        return current, current.spec, True
    if len(spec) > _C.MAX_SLOTS:
        return None, spec, False
    return interop.Rack(spec), spec, True


__all__ = ["Plan", "Prediction", "default_optimizer", "plan"]
