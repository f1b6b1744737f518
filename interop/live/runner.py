"""Run a plan in this process: the pipeline schedule, stage by stage, on the plan's slots.

:class:`PlanRunner` sets up the replicas and runs a step; the pipeline's actions and copies are
:mod:`interop.live.pipeline`, the gradient buffers and reductions :mod:`interop.live.reduction`,
and what a step did :class:`~interop.live.record.StepRecord`.

What runs, and where it lands on the modelled timeline:

* Each stage replica is the stage's blocks bound to the user's current parameters on
  the replica's slot (:func:`~interop.live.bind.bind`); ops run on the slot's
  default stream (its compute stream).
* Actions are issued in the schedule's order per stage (:func:`planner.schedule.actions`, the
  order the step model simulates).
  A forward receives its inputs as real copies from the previous stage's replicas (rows
  re-split where the data-parallel counts differ). A copy leaves the sender on a send
  stream (which waits for the sender's forward to finish) and lands on the receiver's
  compute stream: it starts when the sender's data is ready and the receiver has reached
  that action, and the receiver computes after it arrives. Gradients go back the same way.
* After the last backward of every stage: gradients of parameters that several stages
  hold (tied embeddings) are summed over every copy with ``collectives.all_reduce``,
  then each stage's data-parallel replicas all-reduce their gradient bucket on the
  fabric; then each replica's optimizer steps.
* The step starts with every slot of the plan at the same modelled instant (the latest
  clock among them, inputs already on their slots), and ends at the latest clock after
  the optimizer: :attr:`PlanRunner.last_step` ``.modelled_seconds``.
* Each slot is driven by a host of its own during the step (``Timeline.hosts_per_slot``), as each
  stage of a deployed plan is its own process: a synchronous read to the host (an experts' loop
  reading its offsets) holds back later work on its own slot only, not the other stages.
* A tensor-parallel stage (``tp > 1``) runs each replica as a
  :class:`~interop.live.tensor_parallel.TensorParallelChunk` on its ``tp`` slots: the
  blocks' column/row pairs of linear layers split over them (each slot holds its shards; the
  rest of the block whole on every slot), the two all_reduces of each pair on the fabric;
  inputs arrive on the replica's first slot and are broadcast, output gradients likewise.
  Each tensor rank keeps its own gradient buffer; data-parallel replicas reduce rank by rank.

Numerics: with one microbatch and one replica per stage, the loss and every gradient
are bit for bit those of the model run on one emulated slot (the stage modules run the
same aten ops on the same bytes; a tied parameter's two gradients are summed, which is
exact for two terms). More microbatches or replicas scale the loss by
1/(microbatches x last-stage replicas) and sum the parts, which rounds differently.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from interop.live.bind import split_rows, tensor_attrs
from interop.live.exported_blocks import ExportedBlocks
from interop.live.pipeline import FORWARD, Pipeline, StageReplica, issue_order, replica_module
from interop.live.record import StepRecord, busy_marks, step_record
from interop.live.reduction import GradientReducer
from interop.live.shared_replicas import shared_params, shares
from interop.live.shared_replicas import step as shared_step
from planner.layout import Layout


class PlanRunner:
    """The in-process runner :meth:`Plan.apply` returns (see the module doc)."""

    def __init__(self, layout: Layout, blocks: ExportedBlocks, model: nn.Module,
                 optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None, *,
                 share_replicas: bool = True):
        """``share_replicas``: a data-parallel stage's replicas hold replica 0's parameters and optimizer state
        over its bytes, each slot charged as for its own copy, and only replica 0's optimizer runs
        (:mod:`interop.live.shared_replicas`: the result, the accounting and the timeline are the same; False
        keeps a copy per replica, which the tests compare with)."""
        import interop

        layout.validate(len(blocks))
        rack = interop.current_rack()
        missing = [s for s in layout.slots if s >= len(rack)]
        if missing:
            raise ValueError(f"the plan uses slots {missing} but the current rack {rack.name!r} has "
                             f"{len(rack)} (0..{len(rack) - 1}); install the rack the plan was made for")
        self.layout, self.blocks, self.rack = layout, blocks, rack
        self.model_keys = list(model.state_dict().keys())
        self._model = model
        self.virtual = layout.virtual_stages()
        self.share_replicas = share_replicas
        self.shared_stages: set[int] = set()
        """Indices of the virtual stages whose replicas share replica 0's bytes."""
        self.replicas: list[list[StageReplica]] = [self._stage_replicas(st, model, optimizer)
                                                   for st in self.virtual]
        self.pipeline = Pipeline(blocks, self.virtual, self.replicas, layout.slots, lockstep=self.shared_stages)
        self.reducer = GradientReducer(self.replicas, blocks.tied, self.pipeline.streams, self.shared_stages)
        self.last_step: StepRecord | None = None
        self.trained = False
        """True after :meth:`end_training`."""

    def _stage_replicas(self, st, model: nn.Module, optimizer) -> list[StageReplica]:
        stage_module = self.blocks.stage_module(st.start, st.stop)
        part = self.layout.microbatch_rows // st.dp
        shared = self.share_replicas and shares(st, self.rack)
        reps = []
        for r, slots in enumerate(st.replicas):
            held = shared_params(reps[0].ranks[0]) if shared and r > 0 else None
            module, ranks = replica_module(self.blocks, stage_module, model, slots, held)
            params = [p for rank in ranks for p in rank.params]
            rep = StageReplica(st, r, slots, module, (r * part, (r + 1) * part), ranks)
            if optimizer is not None and params:
                rep.optimizer = optimizer(params)
            reps.append(rep)
        if shared:
            self.shared_stages.add(st.index)
        return reps

    # -- one step ------------------------------------------------------------------------

    def step(self, inputs, targets, loss_fn: Callable[[Any, Any], torch.Tensor]) -> torch.Tensor:
        """One training step over the plan's global batch: forward and backward of every microbatch in the
        schedule's order, gradient reduction, optimizer step. Returns the loss (a CPU scalar tensor: the
        mean over microbatches of ``loss_fn(outputs, targets)``)."""
        from interop.session import current_timeline as current

        if self.trained:
            raise RuntimeError("PlanRunner.step: training was ended (end_training() freed the optimizers and "
                               "gradients); apply the plan again to train more")
        staged_in, staged_tgt = self._stage_batch(inputs, targets)
        # Each slot is driven as a deployed plan drives it, by a process of its own: a stage's host reads (an
        # experts' loop reading its offsets) do not hold back the other stages.
        with current().hosts_per_slot():
            record, losses, scale = self._step(staged_in, staged_tgt, loss_fn)
        # The reported loss is summed after the step's end: a training loop reads it while the next step runs.
        total = sum(loss.cpu() for loss in losses) * scale if scale != 1.0 else sum(loss.cpu() for loss in losses)
        record.loss = float(total)
        self.last_step = record
        return total

    def _step(self, staged_in, staged_tgt, loss_fn) -> tuple:
        """The step on the staged microbatches: (its record, the microbatches' losses on their slots, their scale)."""
        from interop.session import current_timeline as current

        layout = self.layout
        m = layout.microbatches
        slots = layout.slots
        self.reducer.prepare()
        t0 = self.pipeline.barrier(slots)
        busy_before = busy_marks(current(), slots)  # the step's records are placed after
        for s in slots:
            torch.hybrid.reset_peak_memory_stats(s)

        scale = 1.0 / (m * len(self.replicas[-1]))
        state: dict[tuple, Any] = {}
        losses: list[torch.Tensor] = []
        backwards = [0] * len(self.virtual)
        for kind, s, i in issue_order(layout.orders(), len(self.virtual)):
            if kind == FORWARD:
                self.pipeline.forward(s, i, state, staged_in, staged_tgt, loss_fn, scale, losses)
                continue
            backwards[s] += 1
            if backwards[s] == m:
                self.reducer.arm(s)  # this backward makes the stage's gradients final
            self.pipeline.backward(s, i, state)
            if backwards[s] == m:
                self.reducer.reduce_stage(s)
        state.clear()
        self.reducer.reduce_tied()
        for k, reps in enumerate(self.replicas):
            if k in self.shared_stages:
                shared_step(reps)
                continue
            for rep in reps:
                if rep.optimizer is not None:
                    rep.optimizer.step()
        timeline = current()
        t1 = max(timeline.now_ps(s) for s in slots)
        return step_record(timeline, slots, t0, t1, m, busy_before=busy_before), losses, scale

    def _stage_batch(self, inputs, targets) -> tuple[dict, dict]:
        """Every microbatch's inputs on the first stage's replicas and targets on the last's, placed before the
        step begins (a loader prefetches them)."""
        layout = self.layout
        flat = pytree.tree_flatten(inputs if isinstance(inputs, tuple) else (inputs,))[0]
        if len(flat) != len(self.blocks.inputs):
            raise ValueError(f"inputs: the model takes {len(self.blocks.inputs)} input tensor(s), got {len(flat)}")
        rows = {t.shape[0] for t in flat if isinstance(t, torch.Tensor) and t.dim() > 0}
        if rows != {layout.global_batch}:
            raise ValueError(f"inputs: the plan's step takes a global batch of {layout.global_batch} rows, got "
                             f"{sorted(rows)}")
        mb = layout.microbatch_rows
        staged_in, staged_tgt = {}, {}
        for i in range(layout.microbatches):
            for rep in self.replicas[0]:
                lo, hi = i * mb + rep.rows[0], i * mb + rep.rows[1]
                staged_in[i, rep.index] = [
                    split_rows(t, self.blocks.values[n], lo, hi, self.blocks.batch_symbol, layout.global_batch)
                    .to(rep.device) if isinstance(t, torch.Tensor) else t
                    for t, n in zip(flat, self.blocks.inputs)]
            for rep in self.replicas[-1]:
                lo, hi = i * mb + rep.rows[0], i * mb + rep.rows[1]
                staged_tgt[i, rep.index] = pytree.tree_map(
                    lambda t: t[lo:hi].to(rep.device) if isinstance(t, torch.Tensor) else t, targets)
        return staged_in, staged_tgt

    def end_training(self) -> None:
        """Free what only further steps need (each replica's optimizer and its state, the gradient buffers):
        the trained parameters stay, for :meth:`state_dict`; :meth:`step` refuses from now on."""
        self.trained = True
        for reps in self.replicas:
            for rep in reps:
                rep.optimizer = None
                for rank in rep.ranks:
                    rank.grad_buffer = None
                    for p in rank.params:
                        p.grad = None
                    for leaf, _ in rank.aliases:
                        leaf.grad = None

    # -- results ---------------------------------------------------------------------------

    def gradients(self) -> dict[str, torch.Tensor]:
        """The gradients of the last step (after reduction), on the CPU, under the model's canonical names (a
        parameter split by tensor parallelism reassembled from its shards)."""
        out: dict[str, torch.Tensor] = {}
        for reps in self.replicas:
            ranks = reps[0].ranks
            for j, (p, name) in enumerate(zip(ranks[0].params, ranks[0].names)):
                if name in out or p.grad is None:
                    continue
                spec = ranks[0].shards.get(name)
                if spec is None:
                    out[name] = p.grad.detach().cpu()
                else:
                    out[name] = spec.full([r.params[j].grad.detach().cpu() for r in ranks])
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The trained parameters and buffers, on the CPU, under the model's own names (tied names share
        one tensor, as in the model)."""
        canonical = self.blocks.canonical
        found: dict[str, torch.Tensor] = {}
        for reps in self.replicas:
            ranks = reps[0].ranks
            for k, blk in enumerate(ranks[0].blocks):
                others = [dict(tensor_attrs(r.blocks[k])) for r in ranks[1:]]
                for name, t in tensor_attrs(blk):
                    key = canonical.get(name)
                    if key is None or key in found:
                        continue
                    spec = ranks[0].shards.get(key)
                    found[key] = (t.detach().cpu() if spec is None else
                                  spec.full([t.detach().cpu()] + [o[name].detach().cpu() for o in others]))
        own = self._model.state_dict()
        out: dict[str, torch.Tensor] = {}
        for key in self.model_keys:
            canon = canonical.get(key, key)
            out[key] = found.get(canon, own[key].detach().cpu())
        return out


__all__ = ["PlanRunner"]
