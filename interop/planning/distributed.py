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
* parameters a model ties across stages (an embedding and its LM head) are summed
  over their holders with one ``all_reduce`` after the schedule (pipelining keeps a
  copy per stage and leaves them to the user);
* after each step the rank's modelled timeline can be merged: :meth:`write_trace` on
  every rank gathers all ranks' records to rank 0, which writes one Chrome trace.

PyTorch's pipelining runs one rank per stage in each pipeline group, so the export
takes plans whose stages have equal replica counts (the in-process runner also runs
asymmetric ones). Values that cross stages as integers (a batch size export traced
symbolically) are recomputed on the receiving stage from its microbatch, since
pipelining sends tensors only.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils import _pytree as pytree

from interop.planning.export_blocks import ExportedBlocks, _eval, bind


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
                args.append(_eval(spec.expr, rows, self.symbol))
            else:
                args.append(spec.expr)
        out = self.stage(*args)
        if self.last:
            return out
        values = dict(zip(self.outputs, out))
        kept = tuple(values[n] for n in self.keep_out)
        return kept if len(kept) > 1 else kept[0]


SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B"}


class DistributedPlanRunner:
    """This rank's part of a plan run across processes (see the module doc)."""

    def __init__(self, layout, blocks: ExportedBlocks, model: nn.Module,
                 optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
                 loss_fn: Callable | None = None):
        import torch.distributed.pipelining as pipelining
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        if not dist.is_initialized():
            raise RuntimeError("distribute: call torch.distributed.init_process_group('hybrid') first (one rank per "
                               "slot, e.g. under torchrun)")
        dps = {st.dp for st in layout.stages}
        if len(dps) != 1:
            raise ValueError(f"distribute: the stages have {sorted(dps)} data-parallel replicas; "
                             "torch.distributed.pipelining runs one rank per stage in each pipeline group, so the "
                             "export needs the same replica count on every stage (plan with microbatches and slots "
                             "that give one, or run the plan in one process with Plan.apply)")
        if any(st.tp > 1 for st in layout.stages):
            raise NotImplementedError("distribute: tensor-parallel stages are not exported yet")
        self.layout, self.blocks = layout, blocks
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        used = layout.slots
        if max(used) >= self.world:
            raise ValueError(f"distribute: the plan uses slots {list(used)} but the job has {self.world} ranks "
                             "(rank r owns hybrid:r: launch one rank per slot of the rack)")
        self.dp = dps.pop()
        p = len(layout.stages)
        self.virtual = layout.virtual_stages()
        # Lane d of the pipeline: replica d of every stage. Every rank takes part in creating every group.
        lanes = [[st.slots[d] for st in layout.stages] for d in range(self.dp)]
        self.pp_group, self.lane, self.pp_rank = None, None, None
        for d, ranks in enumerate(lanes):
            group = dist.new_group(ranks)
            if self.rank in ranks:
                self.pp_group, self.lane, self.pp_rank = group, d, ranks.index(self.rank)
        self.dp_mesh = None
        if self.dp > 1:
            for st in layout.stages:  # every rank creates every group, in the same order
                group = dist.new_group(list(st.slots))
                if self.rank in st.slots:
                    self.dp_mesh = DeviceMesh.from_group(group, "hybrid", mesh=list(st.slots), mesh_dim_names=("dp",))
        # A parameter tied across stages: after each stage's data-parallel reduction, lane d's copies (one per
        # holding stage) are summed.
        self.tied_groups = []
        for name, holders in blocks.tied.items():
            stages_holding = sorted({vs.rank for vs in self.virtual if any(vs.start <= b < vs.stop for b in holders)})
            if len(stages_holding) < 2:
                continue
            for d in range(self.dp):
                ranks = [layout.stages[s].slots[d] for s in stages_holding]
                group = dist.new_group(ranks)
                if self.rank in ranks:
                    self.tied_groups.append((name, group))
        self.device = torch.device("hybrid", self.rank)
        self.stages, self.modules = [], []
        self.active = self.pp_group is not None
        self.loss_fn = loss_fn
        if not self.active:
            self.schedule = None
            return
        mine = [vs for vs in self.virtual if vs.rank == self.pp_rank]
        for vs in mine:
            last = vs.index == len(self.virtual) - 1
            module = TensorStage(blocks, bind(blocks.stage_module(vs.start, vs.stop), model, self.device),
                                 vs.start, vs.stop, last)
            if self.dp > 1:
                # FSDP2 (ZeRO-2 here: parameters stay gathered between forward and backward), which pipelining
                # drives across microbatches; DDP's reducer assumes one backward per forward.
                fully_shard(module, mesh=self.dp_mesh, reshard_after_forward=False)
            self.modules.append(module)
            self.stages.append(pipelining.PipelineStage(module, vs.index, len(self.virtual), self.device,
                                                        group=self.pp_group))
        self.params = [p for m in self.modules for p in m.parameters()]
        self.optimizer = optimizer(self.params) if optimizer is not None and self.params else None
        self._pipelining = pipelining
        self.schedule = None

    def _schedule(self, loss_fn):
        cls = getattr(self._pipelining, SCHEDULES[self.layout.schedule])
        if self.layout.schedule == "interleaved":
            return cls(self.stages, self.layout.microbatches, loss_fn=loss_fn)
        return cls(self.stages[0], self.layout.microbatches, loss_fn=loss_fn)

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
            return None
        if self.schedule is None or loss_fn is not self.loss_fn:
            self.loss_fn = loss_fn
            self.schedule = self._schedule(loss_fn)
        rows = self.layout.global_batch // self.dp
        lo, hi = self.lane * rows, (self.lane + 1) * rows
        flat = pytree.tree_flatten(inputs if isinstance(inputs, tuple) else (inputs,))[0]
        args = [t[lo:hi].to(self.device) for t in flat if isinstance(t, torch.Tensor)]
        target = pytree.tree_map(lambda t: t[lo:hi].to(self.device) if isinstance(t, torch.Tensor) else t, targets)
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if self.first and self.last:
            self.schedule.step(*args, target=target, losses=losses)
        elif self.first:
            self.schedule.step(*args)
        elif self.last:
            self.schedule.step(target=target, losses=losses)
        else:
            self.schedule.step()
        self._reduce_tied()
        if self.optimizer is not None:
            self.optimizer.step()
        if losses:
            return torch.stack([loss.detach().cpu() for loss in losses]).mean()
        return None

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
                value = p.full_tensor() if hasattr(p, "full_tensor") else p
                local.setdefault(self.blocks.canonical.get(_model_name(pname), _model_name(pname)), value.detach().cpu())
        parts = [None] * self.world
        dist.all_gather_object(parts, local)
        merged: dict[str, torch.Tensor] = {}
        for part in parts:
            for k, v in (part or {}).items():
                merged.setdefault(k, v)
        return merged

    def write_trace(self, path: str | os.PathLike) -> str | None:
        """Gather every rank's modelled timeline to rank 0 and write one Chrome trace there (returns the path
        on rank 0, None elsewhere). Each rank's records sit on its own slot; times are each rank's modelled
        clock."""
        import interop
        from interop.timeline_export import trace_events

        records = interop.timeline()
        parts = [None] * self.world
        dist.all_gather_object(parts, records)
        if self.rank != 0:
            return None
        merged = sorted((r for part in parts for r in part), key=lambda r: (r.start_ps, r.slot))
        doc = {"traceEvents": trace_events(merged, interop.current_rack()), "displayTimeUnit": "ns",
               "otherData": {"rack": interop.current_rack().name, "ranks": self.world,
                             "note": "merged from every rank's modelled timeline; every duration is modelled"}}
        path = os.fspath(path)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path


def _model_name(name: str) -> str:
    # stage modules nest the model's names: [module.]stage.blocks.<k>.<model name>
    parts = name.split(".")
    for i in range(len(parts) - 1):
        if parts[i] == "blocks" and parts[i + 1].isdigit():
            return ".".join(parts[i + 2:])
    return name
