"""A plan exported across processes: one rank per slot, PyTorch's own engines on the "hybrid" backend.

Under torchrun, after ``torch.distributed.init_process_group("hybrid")`` (rank r owns
``hybrid:r``), every rank calls :meth:`Plan.distribute` (the same plan on every rank)
and gets a :class:`DistributedPlanRunner`:

* pipeline parallelism: ``torch.distributed.pipelining.PipelineStage`` per rank
  with ``ScheduleGPipe`` / ``Schedule1F1B`` (one stage per rank) or
  ``ScheduleInterleaved1F1B`` (several), over one pipeline group per replica lane;
* data parallelism: each stage module sharded with FSDP2 (``fully_shard``, gradients
  reduce-scattered over the stage's replicas, parameters kept gathered between forward
  and backward), which pipelining drives across microbatches;
* tensor parallelism: each block's column/row pairs of linear layers
  (:mod:`~interop.live.tensor_parallel`) as ``nn.Linear`` modules sharded by
  ``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` (its bias added after
  the sum, as Megatron does) over the stage's tensor-parallel group, the rest of the block
  whole on every rank; the row-parallel partial sums are all-reduced in place on the
  group (DTensor's functional all_reduce would copy its input first, a copy per collective
  that the plan's step model does not have); each tensor rank is its own pipeline lane
  (rank ``t`` of a stage receives from rank ``t`` of the previous one), so no broadcast
  enters or leaves a stage;
* the optimizer: one per parameter kind on a rank (plain tensors, DTensors: torch's fused and
  foreach kernels take one kind per list); fused SGD steps DTensors through the rule DTensor
  has for fused Adam, registered for SGD;
* parameters a model ties across stages (an embedding and its LM head) are summed
  over their holders with one ``all_reduce`` after the schedule (pipelining keeps a
  copy per stage and leaves them to the user);
* modelled time: the backend carries each rank's modelled clock with every collective and
  transfer (:mod:`collectives.distributed`), so the ranks share one clock; a step starts with
  every rank at the latest rank's clock and ends when the last rank's optimizer has stepped:
  :attr:`DistributedPlanRunner.last_step` ``.modelled_seconds``, the same measure as the
  in-process runner's. :meth:`write_trace` (every rank calls it) writes every rank's timeline
  as one trace on rank 0 (:func:`interop.export_trace` with ``all_ranks=True``).

PyTorch's pipelining runs one rank per stage in each pipeline group, so the export
takes plans whose stages have equal replica counts and equal tensor-parallel degrees
(the in-process runner also runs asymmetric ones); tensor and data parallelism on one
stage (a 2-D mesh of FSDP2 and TP) is not exported. Values that cross stages as integers (a batch size export traced
symbolically) are recomputed on the receiving stage from its microbatch, since
pipelining sends tensors only.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils import _pytree as pytree

from interop.live.bind import bind, eval_size
from interop.live.exported_blocks import ExportedBlocks
from interop.live.record import busy_marks, step_record


class TensorStage(nn.Module):
    """A stage module with tensor-only inputs and outputs (pipelining sends tensors only): integers and
    constants crossing the boundary are rebuilt from the microbatch's rows."""

    def __init__(self, blocks: ExportedBlocks, stage: nn.Module, start: int, stop: int, last: bool):
        super().__init__()
        self.stage = stage
        self.inputs = list(blocks.live(start))
        self.outputs = [] if last else list(blocks.live(stop))
        self.specs = blocks.values
        self.symbol = blocks.batch_symbol
        self.keep_in = [n for n in self.inputs if self.specs[n].kind == "tensor"]
        self.keep_out = [n for n in self.outputs if self.specs[n].kind == "tensor"]
        self.last = last

    def forward(self, *tensors):
        given = dict(zip(self.keep_in, tensors))
        rows = next(t.shape[self.specs[n].batch_dim] for n, t in given.items()
                    if self.specs[n].batch_dim is not None)
        args = []
        for n in self.inputs:
            spec = self.specs[n]
            if spec.kind == "tensor":
                args.append(given[n])
            elif spec.kind == "int":
                args.append(eval_size(spec.expr, rows, self.symbol))
            else:
                args.append(spec.expr)
        out = self.stage(*args)
        if self.last:
            return out
        values = dict(zip(self.outputs, out))
        kept = tuple(values[n] for n in self.keep_out)
        return kept if len(kept) > 1 else kept[0]


SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B"}


def _fused_sgd_on_dtensor() -> None:
    """Let ``torch.optim.SGD(fused=True)`` step DTensor parameters (tensor-parallel shards, FSDP2's).

    DTensor registers sharding rules for the fused Adam and AdamW kernels (element-wise over their tensor
    lists) but not for the fused SGD kernel, which is element-wise alike; without a rule a fused SGD step on
    DTensor parameters fails, and the foreach path it would fall back to is one kernel per tensor. Registered
    once, the same way DTensor registers the fused Adam kernels."""
    from torch.distributed.tensor._ops import _pointwise_ops as pointwise
    from torch.distributed.tensor._api import DTensor

    op = torch.ops.aten._fused_sgd_.default
    if op in DTensor._op_dispatcher.sharding_propagator.op_single_dim_strategy_funcs:
        return
    pointwise._register_single_dim_pointwise(op)


def exportable(layout) -> tuple[int, int]:
    """The (data-parallel, tensor-parallel) degrees every stage of ``layout`` shares, or an error naming what the
    export across processes does not run (the in-process runner, :meth:`Plan.apply`, runs every plan)."""
    dps = {st.dp for st in layout.stages}
    if len(dps) != 1:
        raise ValueError(f"distribute: the stages have {sorted(dps)} data-parallel replicas; "
                         "torch.distributed.pipelining runs one rank per stage in each pipeline group, so the "
                         "export needs the same replica count on every stage (plan with microbatches and slots "
                         "that give one, or run the plan in one process with Plan.apply)")
    tps = {st.tp for st in layout.stages}
    if len(tps) != 1:
        raise ValueError(f"distribute: the stages have tensor-parallel degrees {sorted(tps)}; each tensor rank is "
                         "its own pipeline lane, so the export needs one degree on every stage (run the plan in "
                         "one process with Plan.apply)")
    dp, tp = dps.pop(), tps.pop()
    if tp > 1 and dp > 1:
        raise NotImplementedError(f"distribute: stages with both tensor parallelism (tp={tp}) and data parallelism "
                                  f"(dp={dp}), a 2-D mesh of TP and FSDP2, are not exported; run the plan in one "
                                  "process with Plan.apply")
    return dp, tp


class DistributedPlanRunner:
    """This rank's part of a plan run across processes (see the module doc)."""

    def __init__(self, layout, blocks: ExportedBlocks, model: nn.Module,
                 optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
                 loss_fn: Callable | None = None):
        import torch.distributed.pipelining as pipelining

        self.dp, self.tp = exportable(layout)
        if not dist.is_initialized():
            raise RuntimeError("distribute: call torch.distributed.init_process_group('hybrid') first (one rank per "
                               "slot, e.g. under torchrun)")
        self.layout, self.blocks = layout, blocks
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        used = layout.slots
        if max(used) >= self.world:
            raise ValueError(f"distribute: the plan uses slots {list(used)} but the job has {self.world} ranks "
                             "(rank r owns hybrid:r: launch one rank per slot of the rack)")
        self.virtual = layout.virtual_stages()
        self._make_groups()
        self.device = torch.device("hybrid", self.rank)
        self.stages, self.modules = [], []
        self.active = self.pp_group is not None
        self.loss_fn = loss_fn
        self._losses: list[torch.Tensor] = []
        self.last_step = None
        """The last step's :class:`~interop.live.record.StepRecord` (modelled seconds on the one clock all
        ranks share; peak bytes and busy seconds of this rank's slot), on every rank."""
        self.shards: dict[str, object] = {}
        """Canonical name -> :class:`~interop.live.tensor_parallel.ParamShard` of a parameter tensor
        parallelism splits (its DTensor holds the shards in the arranged order)."""
        self._pipelining = pipelining
        self.schedule = None
        self.optimizers = []
        if not self.active:
            return
        self._make_stages(model)
        self.params = [p for m in self.modules for p in m.parameters()]
        self._make_optimizers(optimizer)

    def _make_groups(self) -> None:
        """This rank's process groups: its pipeline lane, its stage's tensor-parallel and data-parallel meshes,
        and one group per parameter tied across stages. Every rank takes part in creating every group, in the
        same order."""
        from torch.distributed.device_mesh import DeviceMesh

        layout = self.layout
        # Lane (d, t) of the pipeline: tensor rank t of replica d of every stage.
        lanes = [[st.slots[k] for st in layout.stages] for k in range(self.dp * self.tp)]
        self.pp_group, self.lane, self.pp_rank, self.tensor_rank = None, None, None, 0
        for k, ranks in enumerate(lanes):
            group = dist.new_group(ranks)
            if self.rank in ranks:
                self.pp_group, self.pp_rank = group, ranks.index(self.rank)
                self.lane, self.tensor_rank = divmod(k, self.tp)
        self.tp_mesh = None
        if self.tp > 1:
            for st in layout.stages:
                for d in range(self.dp):
                    members = list(st.slots[d * self.tp:(d + 1) * self.tp])
                    group = dist.new_group(members)
                    if self.rank in members:
                        self.tp_mesh = DeviceMesh.from_group(group, "hybrid", mesh=members, mesh_dim_names=("tp",))
        self.dp_mesh = None
        if self.dp > 1:
            for st in layout.stages:
                group = dist.new_group(list(st.slots))
                if self.rank in st.slots:
                    self.dp_mesh = DeviceMesh.from_group(group, "hybrid", mesh=list(st.slots), mesh_dim_names=("dp",))
        # A parameter tied across stages: after each stage's data-parallel reduction, lane d's copies (one per
        # holding stage) are summed.
        self.tied_groups = []
        for name, holders in self.blocks.tied.items():
            stages_holding = sorted({vs.rank for vs in self.virtual if any(vs.start <= b < vs.stop for b in holders)})
            if len(stages_holding) < 2:
                continue
            for k in range(self.dp * self.tp):
                ranks = [layout.stages[s].slots[k] for s in stages_holding]
                group = dist.new_group(ranks)
                if self.rank in ranks:
                    self.tied_groups.append((name, group))

    def _make_stages(self, model: nn.Module) -> None:
        """This rank's pipeline stages: each of its virtual stages bound on its slot, tensor-parallel through
        ``parallelize_module``, sharded with FSDP2 over its replicas."""
        from torch.distributed.fsdp import fully_shard

        for vs in (vs for vs in self.virtual if vs.rank == self.pp_rank):
            last = vs.index == len(self.virtual) - 1
            stage = bind(self.blocks.stage_module(vs.start, vs.stop), model, self.device)
            if self.tp > 1:
                self._parallelize(stage, vs.start)
            module = TensorStage(self.blocks, stage, vs.start, vs.stop, last)
            if self.dp > 1:
                # FSDP2 (ZeRO-2 here: parameters stay gathered between forward and backward), which pipelining
                # drives across microbatches; DDP's reducer assumes one backward per forward.
                fully_shard(module, mesh=self.dp_mesh, reshard_after_forward=False)
            self.modules.append(module)
            self.stages.append(self._pipelining.PipelineStage(module, vs.index, len(self.virtual), self.device,
                                                              group=self.pp_group))

    def _make_optimizers(self, optimizer) -> None:
        if self.tp > 1 or self.dp > 1:
            _fused_sgd_on_dtensor()
        if self.dp == 1:
            for p in self.params:
                p.grad = torch.zeros_like(p)
        # A tensor-parallel stage holds DTensor shards beside the plain parameters of its whole ops; torch's
        # fused and foreach kernels take one kind per tensor list, so each kind gets its optimizer.
        from torch.distributed.tensor import DTensor

        kinds = ([p for p in self.params if not isinstance(p, DTensor)],
                 [p for p in self.params if isinstance(p, DTensor)])
        self.optimizers = [optimizer(group) for group in kinds if group] if optimizer is not None else []

    def _parallelize(self, stage, start: int) -> None:
        """Tensor parallelism of one stage module with PyTorch's engine: each block as its tensor rank's graph
        (split sizes divided, the pairs' linears as nn.Linear holding the arranged weights), then
        ``parallelize_module`` with ColwiseParallel / RowwiseParallel over the stage's tensor-parallel mesh."""
        from torch.distributed.tensor.parallel import parallelize_module

        from interop.live.tensor_parallel import flatten, parallel_styles, shard_block

        graphs, styles = [], {}
        for k, blk in enumerate(stage.blocks):
            plan = self.blocks.tp_plan(start + k)
            flat = flatten(blk)
            if not plan.active:
                graphs.append(flat)
                continue
            graphs.append(shard_block(flat, plan, self.tp, self.tensor_rank, "export"))
            styles.update(parallel_styles(plan, prefix=f"blocks.{k}."))
            for target, spec in plan.params.items():
                self.shards[self.blocks.canonical.get(target, target)] = spec
        stage.blocks = nn.ModuleList(graphs)
        if styles:
            parallelize_module(stage, self.tp_mesh, styles)

    def _schedule(self):
        # Built once: a schedule infers its stages' shapes on its first step (object messages between ranks).
        # The loss is scaled by 1/microbatches where it is computed (the in-process runner seeds its backward
        # so), instead of every gradient being divided after the schedule (scale_grads).
        cls = getattr(self._pipelining, SCHEDULES[self.layout.schedule])
        if self.layout.schedule == "interleaved":
            return cls(self.stages, self.layout.microbatches, loss_fn=self._loss, scale_grads=False)
        return cls(self.stages[0], self.layout.microbatches, loss_fn=self._loss, scale_grads=False)

    def _loss(self, outputs, targets):
        loss = self.loss_fn(outputs, targets)
        self._losses.append(loss.detach())
        return loss * (1.0 / self.layout.microbatches)

    @property
    def first(self) -> bool:
        return self.active and any(s.is_first for s in self.stages)

    @property
    def last(self) -> bool:
        return self.active and any(s.is_last for s in self.stages)

    def step(self, inputs, targets, loss_fn: Callable[[Any, Any], torch.Tensor]):
        """One training step of this lane's share of the global batch. Every rank passes the whole global batch
        (each lane takes its rows). Returns the mean loss on the last stage's ranks, None elsewhere."""
        if not self.active:
            self._step_start()
            self._step_end([])
            return None
        self.loss_fn = loss_fn
        if self.schedule is None:
            self.schedule = self._schedule()
        self._losses = []
        rows = self.layout.global_batch // self.dp  # every tensor rank of replica d takes replica d's rows
        lo, hi = self.lane * rows, (self.lane + 1) * rows
        flat = pytree.tree_flatten(inputs if isinstance(inputs, tuple) else (inputs,))[0]
        # Inputs and targets go to the slot before the step begins (a loader prefetches them).
        args = [t[lo:hi].to(self.device) for t in flat if isinstance(t, torch.Tensor)] if self.first else []
        target = (pytree.tree_map(lambda t: t[lo:hi].to(self.device) if isinstance(t, torch.Tensor) else t, targets)
                  if self.last else None)
        for opt in self.optimizers:
            # Gradients accumulate into kept buffers, cleared before the step begins (as the in-process runner's
            # flat buffers and DDP's bucket views; FSDP2 keeps its own).
            opt.zero_grad(set_to_none=self.dp > 1)
        self._step_start()
        if self.first and self.last:
            self.schedule.step(*args, target=target)
        elif self.first:
            self.schedule.step(*args)
        elif self.last:
            self.schedule.step(target=target)
        else:
            self.schedule.step()
        # The microbatches' losses are the last ones (a schedule's first step also runs the loss to infer shapes).
        losses = self._losses[-self.layout.microbatches:] if self.last else []
        self._reduce_tied()
        for opt in self.optimizers:
            opt.step()
        self._step_end(losses)
        if losses:
            return torch.stack([loss.detach().cpu() for loss in losses]).mean()
        return None

    # -- the step on the one modelled clock ---------------------------------------------------------

    def _clock_max(self, value: int) -> int:
        """The largest ``value`` over every rank (a host exchange: not placed on the timeline)."""
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _step_start(self) -> None:
        """Every rank starts the step at the latest rank's modelled clock (every stream of its slot)."""
        from interop.session import current_timeline

        timeline = current_timeline()
        self._t0 = self._clock_max(timeline.now_ps(self.rank))
        timeline.advance_to(self.rank, self._t0)
        self._busy0 = busy_marks(timeline, (self.rank,))  # the step's records are placed after
        torch.hybrid.reset_peak_memory_stats(self.rank)

    def _step_end(self, losses) -> None:
        from interop.session import current_timeline

        timeline = current_timeline()
        mine = timeline.now_ps(self.rank)
        t1 = self._clock_max(mine)
        record = step_record(timeline, (self.rank,), self._t0, t1, self.layout.microbatches,
                             busy_before=self._busy0)
        total = torch.tensor([sum(float(x.detach().cpu()) for x in losses), float(len(losses))],
                             dtype=torch.float64)
        dist.all_reduce(total)
        record.loss = float(total[0] / total[1]) if total[1] else float("nan")
        self.last_step = record

    def _reduce_tied(self) -> None:
        canonical = self.blocks.canonical
        for name, group in self.tied_groups:
            for module in self.modules:
                for pname, p in module.named_parameters(remove_duplicate=False):
                    if canonical.get(_model_name(pname), _model_name(pname)) == name and p.grad is not None:
                        grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                        dist.all_reduce(grad, group=group)
                        break

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every parameter of the model on the CPU under the model's own names, gathered on every rank."""
        local = {}
        for module in self.modules:
            for pname, p in module.named_parameters(remove_duplicate=False):
                value = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
                name = self.blocks.canonical.get(_model_name(pname), _model_name(pname))
                spec = self.shards.get(name)
                if spec is not None:  # a tensor-parallel weight: its DTensor holds the ranks' shards in order
                    value = spec.full(list(value.chunk(self.tp, dim=spec.dim)))
                local.setdefault(name, value)
        parts = [None] * self.world
        dist.all_gather_object(parts, local)
        merged: dict[str, torch.Tensor] = {}
        for part in parts:
            for k, v in (part or {}).items():
                merged.setdefault(k, v)
        return merged

    def write_trace(self, path: str | os.PathLike) -> str | None:
        """Write every rank's modelled timeline as one Chrome trace on rank 0 (every rank calls it; returns the
        path on rank 0, None elsewhere): one modelled clock, each collective and transfer once."""
        import interop

        return interop.export_trace(path, all_ranks=True)

    def report(self):
        """The modelled report of every rank's timeline, on rank 0 (every rank calls it; None elsewhere)."""
        import interop

        return interop.report(all_ranks=True)


def _model_name(name: str) -> str:
    # stage modules nest the model's names: [module.]stage.blocks.<k>.<model name>
    parts = name.split(".")
    for i in range(len(parts) - 1):
        if parts[i] == "blocks" and parts[i + 1].isdigit():
            return ".".join(parts[i + 2:])
    return name
