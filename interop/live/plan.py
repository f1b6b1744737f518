"""``interop.plan``: partition one model across a heterogeneous rack, and the :class:`Plan` it returns.

The model is cut into blocks from its own structure (:mod:`~interop.live.export_blocks`),
the plan search (:mod:`~planner.plan_search`) places the blocks on the rack's
slots, and the step model (:func:`~planner.step_model`) predicts the step.
:meth:`Plan.apply` runs the plan in this process (:mod:`~interop.live.runner`);
:meth:`Plan.baselines` compares it with every homogeneous sub-rack, the uniform split
and an ideal homogeneous rack of equal peak FLOPs. Every time is modelled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import devices
from devices.chip_set import DEFAULT_BASIS, ChipSet, Economics
from devices.units import format_bytes
from devices.text_table import table
from planner.layout import Layout
from planner.plan_search import OBJECTIVES, Problem, SearchStats, search
from planner.stage import Stage
from planner.step import OPTIMIZERS, StepResult

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
    """Exposed communication on the critical stage, by kind (tp, cp, ep, dp, pp), modelled seconds."""
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


@dataclass(frozen=True, slots=True)
class Baseline:
    """One modelled comparison point."""

    name: str
    seconds: float | None
    """Modelled step seconds; None when it does not fit."""
    slots: int
    note: str = ""


@dataclass(slots=True)
class Baselines:
    """The plan against the alternatives (all modelled)."""

    plan_seconds: float
    rows: list[Baseline]
    ideal_seconds: float | None
    """An ideal homogeneous rack of the rack's peak FLOPs at the best homogeneous sub-rack's utilisation."""
    ideal_note: str = ""

    @property
    def gap_to_ideal(self) -> float | None:
        """plan seconds / ideal seconds - 1 (the heterogeneity overhead; HexiScale's MFU gap)."""
        return None if not self.ideal_seconds else self.plan_seconds / self.ideal_seconds - 1.0

    def table(self) -> str:
        rows = [["this plan", "-", f"{self.plan_seconds * 1e3:.3f}", "1.00x", ""]]
        for b in self.rows:
            speed = f"{b.seconds / self.plan_seconds:.2f}x" if b.seconds else "-"
            rows.append([b.name, b.slots, "does not fit" if b.seconds is None else f"{b.seconds * 1e3:.3f}",
                         speed, b.note])
        if self.ideal_seconds:
            rows.append(["ideal homogeneous rack, equal peak FLOPs", "-", f"{self.ideal_seconds * 1e3:.3f}",
                         f"{self.ideal_seconds / self.plan_seconds:.2f}x", self.ideal_note])
        out = table(["alternative (modelled)", "slots", "ms/step", "its time / plan's", "note"], rows,
                    align="lrrrl")
        if self.gap_to_ideal is not None:
            out += (f"\ngap to the ideal homogeneous rack of equal peak FLOPs: {100 * self.gap_to_ideal:+.1f} % "
                    "(modelled)")
        return out


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

    def _block_span(self, chunks) -> str:
        names = self.blocks.names
        return " + ".join(f"{c.start}-{c.stop - 1} ({names[c.start]}..{names[c.stop - 1]})"
                          if len(c) > 1 else f"{c.start} ({names[c.start]})" for c in chunks)

    def table(self) -> str:
        """The plan as a printed table (every time and byte modelled; * = projected chip)."""
        p = self.predicted
        rows = []
        for st in self.stages:
            projected = "*" if devices.chip(st.kind).projected else ""
            rows.append([st.index, self._block_span(st.chunks), st.kind + projected,
                         ",".join(map(str, st.slots)), st.tp, st.dp, st.microbatch,
                         f"{st.forward[0] * 1e6:.1f}", f"{st.backward[0] * 1e6:.1f}",
                         f"{st.busy * 1e3:.3f}", f"{st.idle * 1e3:.3f}",
                         format_bytes(st.memory.total), f"{100 * st.memory.total / st.memory.capacity:.2f} %"])
        head = (f"plan for {self.blocks.name} ({len(self.blocks)} blocks) on rack {self.rack.name}: "
                f"{len(self.stages)} stage(s), {self.schedule}, {self.microbatches} microbatch(es) of "
                f"{self.global_batch // self.microbatches} rows, objective {self.objective}")
        body = table(["stage", "blocks", "kind", "slots", "tp", "dp", "rows/replica", "fwd us/mb", "bwd us/mb",
                      "busy ms", "idle ms", "peak mem", "of HBM"], rows, align="rlllrrrrrrrrr")
        bd = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in p.breakdown.items() if v)
        foot = (f"predicted step (modelled): {p.seconds * 1e3:.3f} ms  [{bd} ms on the critical stage]\n"
                f"search: {self.stats.candidates} layouts bounded, {self.stats.evaluated} evaluated with the step "
                f"model, {'exact' if self.stats.exact else 'bounded'}, {self.stats.seconds:.2f} s (measured)")
        money = self.economics()
        foot += (f"\ncost (modelled): {money.cost_text()}\nenergy (modelled): {money.energy_text()}")
        if any(devices.chip(st.kind).projected for st in self.stages):
            foot += "\n* projected chip: its figures are projections, not published specifications"
        return "\n".join([head, body, foot])

    def economics(self) -> Economics:
        """Cost (on the problem's price basis) and energy of the predicted step over every slot it uses."""
        chips = ChipSet.of((st.kind, len(st.slots)) for st in self.stages)
        tokens = self.global_batch * self.problem.seq_len
        return chips.economics(self.predicted.seconds, tokens, self.problem.price_basis)

    def to_json(self) -> str:
        """The plan as JSON: stages, schedule, batch split, the modelled step and per-slot figures."""
        p = self.predicted
        doc = {
            "model": self.blocks.name, "blocks": list(self.blocks.names), "rack": self.rack.name,
            "objective": self.objective, "optimizer": self.optimizer, "schedule": self.schedule,
            "microbatches": self.microbatches, "global_batch": self.global_batch,
            "stages": [{"index": st.index, "chunks": [[c.start, c.stop] for c in st.chunks], "kind": st.kind,
                        "slots": list(st.slots), "tp": st.tp, "dp": st.dp, "microbatch": st.microbatch,
                        "forward_s": list(st.forward), "backward_s": list(st.backward), "busy_s": st.busy,
                        "idle_s": st.idle, "memory": {"weights": st.memory.weights, "gradients": st.memory.gradients,
                                                      "optimizer": st.memory.optimizer,
                                                      "activations": st.memory.activations,
                                                      "capacity": st.memory.capacity},
                        "projected": st.projected} for st in self.stages],
            "predicted": {"seconds": p.seconds, "breakdown": p.breakdown, "exposed": p.exposed,
                          "busy_s": {str(k): v for k, v in p.busy.items()},
                          "idle_s": {str(k): v for k, v in p.idle.items()},
                          "peak_bytes": {str(k): v for k, v in p.peak_bytes.items()}, "modelled": True},
            "search": {"candidates": self.stats.candidates, "evaluated": self.stats.evaluated,
                       "exact": self.stats.exact, "seconds_measured": self.stats.seconds},
        }
        return json.dumps(doc, indent=2)

    def gantt(self, path: str | os.PathLike) -> str:
        """A one-page PNG of the modelled step: stages x microbatches (forward, backward), the data-parallel
        reduction and optimizer after them, idle time as bubble."""
        from interop.charts import pipeline_gantt

        result = self.problem.evaluate(self.layout, record=True)
        labels = [f"stage {st.index}: {st.kind} x{len(st.slots)} [{','.join(map(str, st.slots))}] "
                  f"blocks {', '.join(f'{c.start}-{c.stop - 1}' for c in st.chunks)}" for st in result.stages]
        finish = {}
        for s, _, _, _, _, end in result.events:
            finish[s] = max(finish.get(s, 0.0), end)
        tails = []
        for st in result.stages:
            t = finish.get(st.index, 0.0)
            dp_tail = st.exposed.get("dp", 0.0)
            if dp_tail > 0:
                tails.append((st.index, "reduce", t, t + dp_tail))
                t += dp_tail
            tails.append((st.index, "optimizer", t, t + st.optimizer))
        title = (f"plan for {self.blocks.name} on {self.rack.name}: {self.schedule}, {self.microbatches} "
                 f"microbatches, step {result.seconds * 1e3:.3f} ms (modelled)")
        return pipeline_gantt(labels, result.events, path, title=title, tails=tails, total=result.seconds,
                              note="every time is modelled by the step model (per-op cost model, collectives "
                                   "on the rack topology); hatched: idle (pipeline bubble)")

    # -- alternatives -------------------------------------------------------------------------

    def baselines(self) -> Baselines:
        """Modelled: every homogeneous sub-rack (the best plan on one kind's slots), the uniform split (this
        plan's stages with the blocks divided evenly), and an ideal homogeneous rack of equal peak FLOPs."""
        if self._baselines is not None:
            return self._baselines
        from planner.plan_search import DoesNotFit

        rows = []
        best_homog = None
        pb = self.problem
        for kind, slots in pb.kinds.items():
            sub = Problem(pb.blocks, pb.spec, tuple(slots), pb.global_batch, pb.seq_len, objective=pb.objective,
                          price_basis=pb.price_basis, schedules=pb.schedules, microbatches=pb.microbatches, optimizer=pb.optimizer,
                          recompute=pb.recompute, calibrated=pb.calibrated, master_weights=pb.master_weights,
                          pricer=pb.pricer)
            try:
                layout, result, _ = search(sub)
            except DoesNotFit as e:
                rows.append(Baseline(f"homogeneous: {kind} only", None, len(slots), str(e).split(";")[0]))
                continue
            note = f"{len(layout.stages)} stage(s), {layout.microbatches} mb"
            rows.append(Baseline(f"homogeneous: {kind} only", result.seconds, len(slots), note))
            peak = sum(_peak(self, kind) for _ in slots)
            utilisation = result.model_flops / result.seconds / peak if result.seconds else 0.0
            if best_homog is None or utilisation > best_homog[0]:
                best_homog = (utilisation, kind, result)
        uniform = _uniform(self)
        if uniform is not None:
            result = pb.evaluate(uniform)
            fits = all(s.memory.fits for s in result.stages)
            rows.append(Baseline("uniform split (this plan's stages, equal block counts)",
                                 result.seconds if fits else None, len(uniform.slots)))
        ideal = None
        note = ""
        if best_homog is not None and best_homog[0] > 0:
            rack_peak = sum(_peak(self, self.rack.slot(s).kind) for s in pb.slots)
            ideal = self.predicted.result.model_flops / (best_homog[0] * rack_peak)
            note = (f"{format_flops(rack_peak)} peak at {best_homog[1]}'s modelled utilisation "
                    f"{100 * best_homog[0]:.2f} %")
        self._baselines = Baselines(self.predicted.seconds, rows, ideal, note)
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
        result = self.problem.evaluate(layout)
        return Plan(self.blocks, layout, Prediction.of(result), self.rack, self.objective, self.optimizer,
                    self.problem, SearchStats(candidates=1, evaluated=1, exact=False), self.live, self.rack_object)

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


def _peak(plan: Plan, kind: str) -> float:
    return devices.chip(kind).peak_for(plan.problem.grad_dtype).value


def format_flops(x: float) -> str:
    return f"{x / 1e12:,.0f} TFLOP/s"


def _uniform(plan: Plan) -> Layout | None:
    n = len(plan.blocks)
    stages = plan.layout.stages
    virtual = len(stages) * plan.layout.chunks
    if virtual > n:
        return None
    base, extra = divmod(n, virtual)
    sizes = [base + (1 if k < extra else 0) for k in range(virtual)]
    starts = [sum(sizes[:k]) for k in range(virtual)]
    p = len(stages)
    new = []
    for s, st in enumerate(stages):
        chunks = tuple(range(starts[c * p + s], starts[c * p + s] + sizes[c * p + s]) for c in range(plan.layout.chunks))
        new.append(Stage(chunks=chunks, kind=st.kind, slots=st.slots, tp=st.tp))
    return Layout(tuple(new), plan.layout.schedule, plan.layout.microbatches, plan.layout.global_batch)


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
    from interop.live.export_blocks import cut

    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if schedule not in SCHEDULE_CHOICES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULE_CHOICES)}, got {schedule!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: expected one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if recompute not in RECOMPUTE_CHOICES:
        raise ValueError(f"recompute: a live plan runs its blocks whole; expected one of "
                         f"{', '.join(RECOMPUTE_CHOICES)}, got {recompute!r}")
    rack_object, spec, live = _resolve_rack(rack)
    n_slots = len(spec)
    if slots is None:
        chosen = tuple(range(n_slots))
    else:
        chosen = tuple(int(s) for s in slots)
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
    batch = blocks.example_batch
    global_batch = global_batch or batch
    if global_batch < 1:
        raise ValueError(f"global_batch: expected a positive number of rows, got {global_batch}")
    seq_len = _seq_len(args)
    if microbatches is not None:
        if microbatches < 1 or global_batch % microbatches:
            raise ValueError(f"microbatches: {microbatches} does not divide the global batch ({global_batch})")
        counts = (microbatches,)
    else:
        counts = ()
    schedules = ("1f1b", "gpipe", "interleaved") if schedule == "auto" else (schedule,)
    dtype = _param_dtype(model)
    from planner.plan_search import GroupPricer

    # One transfer model (collectives.transfer) prices the runner's copies on the timeline and the step
    # model's pipeline hops alike.
    pricer = GroupPricer(spec)
    problem = Problem(blocks, spec, chosen, global_batch, seq_len, objective=objective, price_basis=price_basis,
                      schedules=schedules,
                      microbatches=counts, optimizer=optimizer, recompute="none", calibrated=False,
                      master_weights=False, state_bytes=STATE_TENSORS[optimizer] * dtype.itemsize,
                      grad_dtype=str(dtype).removeprefix("torch."), max_seconds=max_seconds, pricer=pricer)
    layout, result, stats = search(problem)
    return Plan(blocks, layout, Prediction.of(result), spec, objective, optimizer, problem, stats, live,
                rack_object)


STATE_TENSORS = {"adamw": 2, "adam": 2, "sgd": 1}
"""Optimizer state tensors per parameter in torch (exp_avg and exp_avg_sq; the momentum buffer), each in the
parameter's dtype; torch keeps no separate master copy."""


def _param_dtype(model):
    import torch

    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    if len(dtypes) > 1:
        raise ValueError(f"model: its parameters mix dtypes {sorted(map(str, dtypes))}; the plan's runner keeps one "
                         "gradient buffer per replica (cast the model to one dtype)")
    dtype = dtypes.pop() if dtypes else torch.float32
    if str(dtype).removeprefix("torch.") not in ("float32", "bfloat16"):
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
    spec = rack if isinstance(rack, devices.RackSpec) else devices.parse_rack(rack)
    current = interop.current_rack()
    if current is not None and (current.name == spec.name or current.spec == spec):
        return current, current.spec, True
    if len(spec) > _C.MAX_SLOTS:
        return None, spec, False
    return interop.Rack(spec), spec, True


__all__ = ["Baseline", "Baselines", "Plan", "Prediction", "default_optimizer", "plan"]
