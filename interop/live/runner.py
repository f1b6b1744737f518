"""Run a plan in this process: the pipeline schedule, stage by stage, on the plan's slots.

What runs, and where it lands on the modelled timeline:

* Each stage replica is the stage's blocks bound to the user's current parameters on
  the replica's slot (:func:`~interop.live.export_blocks.bind`); ops run on the slot's
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

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from interop.live.export_blocks import ExportedBlocks, _tensor_attrs, bind, split_rows
from planner.layout import Layout, VirtualStage

FORWARD, BACKWARD = "F", "B"


@dataclass(slots=True)
class StepRecord:
    """What one executed step did (times modelled, memory measured by the slots' allocators)."""

    modelled_seconds: float
    """Span of the step on the modelled timeline: every slot starts together, the step ends when the last
    slot finishes its optimizer step."""
    start_s: float
    end_s: float
    loss: float
    microbatches: int
    peak_bytes: dict[int, int] = field(default_factory=dict)
    """Per slot, the allocator's peak during the step (parameters, gradients, optimizer state, activations)."""
    busy_s: dict[int, float] = field(default_factory=dict)
    """Per slot, modelled time spent on ops, copies and collectives during the step."""


@dataclass(slots=True)
class _Rank:
    """One tensor rank of a replica (the replica itself when tp is 1): its slot, blocks and gradient buffer."""

    slot: int
    blocks: nn.ModuleList
    params: list[nn.Parameter]
    names: list[str]
    """Canonical model name of each parameter."""
    block_of: list[int]
    """The stage-local block each parameter belongs to (its first holder)."""
    shards: dict = field(default_factory=dict)
    """Canonical name -> its :class:`~interop.live.tensor_parallel.ParamShard` (parameters split over the
    tensor ranks)."""
    grad_buffer: torch.Tensor | None = None
    """The flat buffer every parameter's ``.grad`` views."""


@dataclass(slots=True)
class _Replica:
    stage: VirtualStage
    index: int
    slots: tuple[int, ...]
    module: nn.Module
    rows: tuple[int, int]
    """Its rows within each microbatch."""
    ranks: list[_Rank]
    optimizer: Any = None
    seed: torch.Tensor | None = None
    """The last stage's backward seed (the loss scale), made once."""
    seed_scale: float = 0.0

    @property
    def home(self) -> int:
        return self.slots[0]

    @property
    def device(self) -> torch.device:
        return torch.device("hybrid", self.home)

    @property
    def names(self) -> list[str]:
        return self.ranks[0].names


class PlanRunner:
    """The in-process runner :meth:`Plan.apply` returns (see the module doc)."""

    def __init__(self, layout: Layout, blocks: ExportedBlocks, model: nn.Module,
                 optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None):
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
        rows = layout.microbatch_rows
        self.virtual = layout.virtual_stages()
        self.replicas: list[list[_Replica]] = []
        for st in self.virtual:
            stage_module = blocks.stage_module(st.start, st.stop)
            part = rows // st.dp
            reps = []
            for r, slots in enumerate(st.replicas):
                module, ranks = _replica_module(blocks, stage_module, model, slots)
                params = [p for rank in ranks for p in rank.params]
                rep = _Replica(st, r, slots, module, (r * part, (r + 1) * part), ranks)
                if optimizer is not None and params:
                    rep.optimizer = optimizer(params)
                reps.append(rep)
            self.replicas.append(reps)
        self._tied = self._tied_groups()
        tied_names = {n for n, _ in self._tied}
        # Every tensor rank's gradients are views into one flat buffer (DDP's gradient_as_bucket_view), its
        # parameters ordered by block: each microbatch's backward adds into it, one zero_ per step clears it,
        # and a data-parallel stage all-reduces each block's slice in place, rank by rank. A parameter shared by
        # two blocks of a stage belongs to the first (its gradient is final when that block's backward is);
        # parameters held by several stages (tied) are reduced apart.
        self._buckets: list[list[list[list[tuple[int, int]]]]] = []  # [stage][replica][rank][block]
        for reps in self.replicas:
            per_rep = []
            for rep in reps:
                per_rank = []
                for rank in rep.ranks:
                    order = sorted(range(len(rank.params)), key=lambda j: rank.block_of[j])
                    rank.params = [rank.params[j] for j in order]
                    rank.names = [rank.names[j] for j in order]
                    rank.block_of = [rank.block_of[j] for j in order]
                    total = sum(p.numel() for p in rank.params)
                    dtypes = {p.dtype for p in rank.params}
                    if len(dtypes) > 1:
                        raise NotImplementedError(f"stage {rep.stage.index} mixes parameter dtypes "
                                                  f"{sorted(map(str, dtypes))}; the runner keeps one gradient buffer "
                                                  "per replica")
                    rank.grad_buffer = (torch.zeros(total, dtype=rank.params[0].dtype,
                                                    device=torch.device("hybrid", rank.slot)) if rank.params else None)
                    spans = [[0, 0] for _ in rank.blocks]
                    offset = 0
                    for p, n, k in zip(rank.params, rank.names, rank.block_of):
                        if n in tied_names:
                            offset += p.numel()
                            continue
                        if spans[k] == [0, 0]:
                            spans[k] = [offset, offset]
                        spans[k][1] = offset + p.numel()
                        offset += p.numel()
                    per_rank.append([tuple(x) for x in spans] if len(reps) > 1 else [(0, 0)] * len(spans))
                per_rep.append(per_rank)
            self._buckets.append(per_rep)
        self._bucket_params = [[[[[p for p, n, k in zip(rank.params, rank.names, rank.block_of)
                                   if k == b and n not in tied_names] if len(reps) > 1 else []
                                  for b in range(len(rank.blocks))] for rank in rep.ranks] for rep in reps]
                               for reps in self.replicas]
        self._armed: set[int] = set()
        self._ready: dict[tuple[int, int, int, int], Any] = {}
        self._counts: dict[tuple[int, int, int, int], int] = {}
        for s, reps in enumerate(self.replicas):
            for rep in reps:
                for t, rank in enumerate(rep.ranks):
                    for k, bucket in enumerate(self._bucket_params[s][rep.index][t]):
                        for p in bucket:
                            p.register_post_accumulate_grad_hook(self._hook(s, rep.index, t, rank.slot, k,
                                                                            len(bucket)))
        # Transfers and gradient reductions run on their own streams, so a slot computes while data
        # travels: sends per direction, receives per direction, and one for data-parallel reductions.
        self._streams = {(slot, purpose): torch.hybrid.Stream(device=slot) for slot in layout.slots
                         for purpose in ("send_fwd", "send_bwd", "recv_fwd", "recv_bwd", "reduce")}
        self.last_step: StepRecord | None = None

    def _hook(self, s: int, r: int, t: int, slot: int, k: int, size: int):
        # The hook lives in the parameter's autograd node (C++), which the cyclic collector cannot see
        # through: it holds the runner weakly so that a dropped runner frees its slots' memory.
        runner = weakref.ref(self)

        def ready(_param) -> None:
            self_ = runner()
            if self_ is None or s not in self_._armed:
                return
            key = (s, r, t, k)
            self_._counts[key] = self_._counts.get(key, 0) + 1
            if self_._counts[key] == size:  # the bucket's gradients are final: it may be reduced from now
                self_._ready[key] = _record(slot)

        return ready

    # -- setup helpers ------------------------------------------------------------------

    def _tied_groups(self) -> list[tuple[str, list[list[nn.Parameter]]]]:
        """Per tied parameter held by several stages: per (stage, replica), its copies on the tensor ranks."""
        groups = []
        for name in self.blocks.tied:
            copies = [[p for rank in rep.ranks for p, n in zip(rank.params, rank.names) if n == name]
                      for reps in self.replicas for rep in reps]
            copies = [c for c in copies if c]
            holders = {rep.stage.index for reps in self.replicas for rep in reps if name in rep.names}
            if len(holders) > 1:
                if any(name in rank.shards for reps in self.replicas for rep in reps for rank in rep.ranks):
                    raise NotImplementedError(f"{name} is tied across stages and split by tensor parallelism")
                groups.append((name, copies))
        return groups

    # -- one step ------------------------------------------------------------------------

    def step(self, inputs, targets, loss_fn: Callable[[Any, Any], torch.Tensor]) -> torch.Tensor:
        """One training step over the plan's global batch: forward and backward of every microbatch in the
        schedule's order, gradient reduction, optimizer step. Returns the loss (a CPU scalar tensor: the
        mean over microbatches of ``loss_fn(outputs, targets)``)."""
        from interop.session import current_timeline as current
        from interop.timelines import PS

        layout = self.layout
        flat = pytree.tree_flatten(inputs if isinstance(inputs, tuple) else (inputs,))[0]
        if len(flat) != len(self.blocks.inputs):
            raise ValueError(f"inputs: the model takes {len(self.blocks.inputs)} input tensor(s), got {len(flat)}")
        rows = {t.shape[0] for t in flat if isinstance(t, torch.Tensor) and t.dim() > 0}
        if rows != {layout.global_batch}:
            raise ValueError(f"inputs: the plan's step takes a global batch of {layout.global_batch} rows, got "
                             f"{sorted(rows)}")
        m, mb = layout.microbatches, layout.microbatch_rows
        first, last = self.replicas[0], self.replicas[-1]
        # Inputs and targets go to their slots before the step begins (a loader prefetches them).
        staged_in = {}
        staged_tgt = {}
        for i in range(m):
            for rep in first:
                lo, hi = i * mb + rep.rows[0], i * mb + rep.rows[1]
                staged_in[i, rep.index] = [
                    split_rows(t, self.blocks.values[n], lo, hi, self.blocks.batch_symbol, layout.global_batch)
                    .to(rep.device) if isinstance(t, torch.Tensor) else t
                    for t, n in zip(flat, self.blocks.inputs)]
            for rep in last:
                lo, hi = i * mb + rep.rows[0], i * mb + rep.rows[1]
                staged_tgt[i, rep.index] = pytree.tree_map(
                    lambda t: t[lo:hi].to(rep.device) if isinstance(t, torch.Tensor) else t, targets)
        slots = layout.slots
        self._prepare_buckets()
        t0 = self._barrier(slots)
        busy_before = {s: current().busy_by_slot.get(s, 0) for s in slots}  # the step's records are placed after
        for s in slots:
            torch.hybrid.reset_peak_memory_stats(s)

        scale = 1.0 / (m * len(last))
        state: dict[tuple, Any] = {}
        losses: list[torch.Tensor] = []
        backwards = [0] * len(self.virtual)
        for kind, s, i in issue_order(layout.orders(), len(self.virtual)):
            if kind == FORWARD:
                self._forward(s, i, state, staged_in, staged_tgt, loss_fn, scale, losses)
                continue
            backwards[s] += 1
            if backwards[s] == m:
                self._armed.add(s)  # this backward makes the stage's gradients final
            self._backward(s, i, state)
            if backwards[s] == m:
                self._reduce_stage(s)
        state.clear()
        self._reduce_tied()
        for rep in (r for reps in self.replicas for r in reps):
            if rep.optimizer is not None:
                rep.optimizer.step()
        timeline = current()
        t1 = max(timeline.now_ps(s) for s in slots)
        peaks = {s: torch.hybrid.max_memory_allocated(s) for s in slots}
        busy = {s: timeline.busy_by_slot.get(s, 0) - busy_before[s] for s in slots}
        # The reported loss is summed after the step's end: a training loop reads it while the next step runs.
        total = sum(loss.cpu() for loss in losses) * scale if scale != 1.0 else sum(loss.cpu() for loss in losses)
        self.last_step = StepRecord((t1 - t0) / PS, t0 / PS, t1 / PS, float(total), m, peaks,
                                    {s: v / PS for s, v in busy.items()})
        return total

    def _barrier(self, slots) -> int:
        """Every stream the step uses starts at the latest clock among the plan's slots."""
        from interop.session import current_timeline as current

        timeline = current()
        timeline.ingest()
        streams = [torch.hybrid.default_stream(s) for s in slots] + list(self._streams.values())
        clock = {st: timeline.clocks.get((st.device.index, st.stream_id), 0) for st in streams}
        latest = max(streams, key=clock.get)
        event = torch.hybrid.Event()
        event.record(latest)
        for st in streams:
            event.wait(st)
        timeline.ingest()
        return clock[latest]

    def _forward(self, s: int, i: int, state, staged_in, staged_tgt, loss_fn, scale, losses) -> None:
        reps = self.replicas[s]
        lastp = s == len(self.replicas) - 1
        for rep in reps:
            if s == 0:
                args = staged_in.pop((i, rep.index))
                leaves = []
            else:
                args, leaves = self._receive(s, i, rep, state)
            out = rep.module(*args)
            if lastp:
                loss = loss_fn(out, staged_tgt.pop((i, rep.index)))
                losses.append(loss.detach())
                if rep.seed is None or rep.seed_scale != scale:
                    rep.seed = torch.full((), scale, dtype=loss.dtype, device=loss.device)
                    rep.seed_scale = scale
                state["out", s, i, rep.index] = [loss]
            else:
                state["out", s, i, rep.index] = list(out)
            state["in", s, i, rep.index] = leaves
            state["fwd_event", s, i, rep.index] = _record(rep.home)

    def _receive(self, s: int, i: int, rep: _Replica, state) -> tuple[list, list]:
        """The inputs of replica ``rep`` of stage ``s`` for microbatch ``i``, copied from stage ``s-1``."""
        blocks = self.blocks
        names = blocks.live(self.virtual[s].start)
        prev = self.replicas[s - 1]
        args, leaves = [], []
        lo, hi = rep.rows
        for k, name in enumerate(names):
            spec = blocks.values[name]
            if spec.kind == "int":
                args.append(split_rows(None, spec, lo, hi, blocks.batch_symbol, 0))
                continue
            if spec.kind != "tensor":
                args.append(spec.expr)
                continue
            sources = prev if spec.batch_dim is not None else prev[:1]
            parts = []
            for src in sources:
                a, b = max(lo, src.rows[0]), min(hi, src.rows[1])
                if spec.batch_dim is not None and a >= b:
                    continue
                value = state["out", s - 1, i, src.index][k]
                if spec.batch_dim is not None and (a, b) != src.rows:
                    value = value.narrow(spec.batch_dim, a - src.rows[0], b - a)
                parts.append((value.detach(), src.home, state["fwd_event", s - 1, i, src.index], a - lo))
            x = self._assemble(parts, rep.home, spec.batch_dim, hi - lo, "fwd")
            if x.is_floating_point() and state["out", s - 1, i, prev[0].index][k].requires_grad:
                x.requires_grad_(True)
                leaves.append((k, x))
            args.append(x)
        return args, leaves

    def _copy(self, value: torch.Tensor, src: int, dst: int, ready, direction: str, out=None) -> torch.Tensor:
        """Copy ``value`` from ``src`` to ``dst`` (into ``out`` if given): leaves on ``src``'s send stream once
        ``ready`` (the producing action) has passed, lands on ``dst``'s receive stream; ``_arrived`` makes
        ``dst``'s compute stream wait for it."""
        if src == dst and out is None:
            return value
        send = self._streams[src, f"send_{direction}"]
        recv = self._streams[dst, f"recv_{direction}"]
        ready.wait(send)
        with torch.no_grad(), torch.hybrid.stream(send), torch.hybrid.stream(recv):
            if out is not None:
                return out.copy_(value)
            return value.to(torch.device("hybrid", dst))

    def _arrived(self, dst: int, direction: str) -> None:
        event = torch.hybrid.Event()
        event.record(self._streams[dst, f"recv_{direction}"])
        event.wait(torch.hybrid.default_stream(dst))

    def _backward(self, s: int, i: int, state) -> None:
        lastp = s == len(self.replicas) - 1
        for rep in self.replicas[s]:
            outs = state.pop(("out", s, i, rep.index))
            if lastp:
                # Seeded with the loss scale 1/(microbatches x replicas): the mean over the global batch.
                torch.autograd.backward(outs[0], rep.seed)
            else:
                tensors, grads = [], []
                for k, out in enumerate(outs):
                    if not isinstance(out, torch.Tensor) or not out.requires_grad:
                        continue
                    g = self._gather_grad(s, i, rep, k, state)
                    if g is not None:
                        tensors.append(out)
                        grads.append(g)
                if tensors:
                    torch.autograd.backward(tensors, grads)
            state["bwd_event", s, i, rep.index] = _record(rep.home)
            # The received inputs are done with: only their gradients wait for the previous stage to take them.
            leaves = state.get(("in", s, i, rep.index))
            if leaves:
                state["in", s, i, rep.index] = [(k, x.grad) for k, x in leaves]
        if not lastp:
            for nxt in self.replicas[s + 1]:
                state.pop(("in", s + 1, i, nxt.index), None)
                state.pop(("bwd_event", s + 1, i, nxt.index), None)
        state.pop(("fwd_event", s, i, 0), None)

    def _gather_grad(self, s: int, i: int, rep: _Replica, k: int, state) -> torch.Tensor | None:
        """The gradient of output ``k`` of ``rep`` (its rows), from the next stage's input leaves."""
        spec = self.blocks.values[self.blocks.live(self.virtual[s].stop)[k]]
        lo, hi = rep.rows
        parts = []
        for dst in self.replicas[s + 1]:
            grad = dict(state.get(("in", s + 1, i, dst.index), [])).get(k)
            if grad is None:
                continue
            offset = 0
            if spec.batch_dim is not None:
                a, b = max(lo, dst.rows[0]), min(hi, dst.rows[1])
                if a >= b:
                    continue
                if (a, b) != dst.rows:
                    grad = grad.narrow(spec.batch_dim, a - dst.rows[0], b - a)
                offset = a - lo
            parts.append((grad, dst.home, state["bwd_event", s + 1, i, dst.index], offset))
        if not parts:
            return None
        if spec.batch_dim is not None:
            return self._assemble(parts, rep.home, spec.batch_dim, hi - lo, "bwd")
        # A value without a batch dimension went to every replica: its gradients add up.
        total = self._assemble(parts[:1], rep.home, None, 0, "bwd")
        for part in parts[1:]:
            total = total + self._assemble([part], rep.home, None, 0, "bwd")
        return total

    def _assemble(self, parts, dst: int, dim: int | None, rows: int, direction: str) -> torch.Tensor:
        """Copy ``parts`` ((tensor, its slot, ready event, row offset)) to ``dst`` as one tensor; several parts
        land straight in their rows of one buffer (no concatenation on the receiver)."""
        if len(parts) == 1:
            value, src, ready, _ = parts[0]
            out = self._copy(value, src, dst, ready, direction)
        else:
            first = parts[0][0]
            shape = list(first.shape)
            shape[dim] = rows
            out = torch.empty(shape, dtype=first.dtype, device=torch.device("hybrid", dst))
            for value, src, ready, offset in parts:
                self._copy(value, src, dst, ready, direction, out=out.narrow(dim, offset, value.shape[dim]))
        self._arrived(dst, direction)
        return out

    # -- gradient reduction ----------------------------------------------------------------

    def _prepare_buckets(self) -> None:
        """Point every parameter's ``.grad`` at its slice of its rank's flat buffer, cleared."""
        self._armed.clear()
        self._ready.clear()
        self._counts.clear()
        for reps in self.replicas:
            for rep in reps:
                for rank in rep.ranks:
                    if rank.grad_buffer is None:
                        continue
                    rank.grad_buffer.zero_()
                    offset = 0
                    for p in rank.params:
                        p.grad = rank.grad_buffer[offset:offset + p.numel()].view_as(p)
                        offset += p.numel()

    def _reduce_stage(self, s: int) -> None:
        """All-reduce stage ``s``'s buckets across its replicas (tensor rank by tensor rank) on the reduce streams,
        each bucket once every replica's copy of it is final; the replica's optimizer waits for the last one."""
        import collectives

        reps = self.replicas[s]
        if len(reps) < 2:
            return
        for t in range(len(reps[0].ranks)):
            spans = self._buckets[s][0][t]
            blocks = [k for k, (a, b) in enumerate(spans) if b > a]
            order = sorted(blocks, key=lambda k: -k)  # backward finishes the last block first
            slots = [rep.ranks[t].slot for rep in reps]
            streams = [self._streams[slot, "reduce"] for slot in slots]
            for k in order:
                for rep, stream in zip(reps, streams):
                    self._ready.pop((s, rep.index, t, k)).wait(stream)
                with contextlib.ExitStack() as stack:
                    for stream in streams:
                        stack.enter_context(torch.hybrid.stream(stream))
                    collectives.all_reduce([rep.ranks[t].grad_buffer[slice(*self._buckets[s][rep.index][t][k])]
                                            for rep in reps], op="sum")
            for slot, stream in zip(slots, streams):
                done = torch.hybrid.Event()
                done.record(stream)
                done.wait(torch.hybrid.default_stream(slot))

    def _reduce_tied(self) -> None:
        """Sum a tied parameter's gradient over every (stage, replica) holding it (their first tensor rank's
        copies), then give every tensor rank's copy the sum."""
        import collectives

        for _, groups in self._tied:
            firsts = [g[0] for g in groups]
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in firsts]
            by_slot: dict[int, list[torch.Tensor]] = {}
            for g in grads:
                by_slot.setdefault(g.device.index, []).append(g)
            local = []
            for gs in by_slot.values():
                for g in gs[1:]:
                    gs[0].add_(g)
                local.append(gs[0])
            if len(local) > 1:
                collectives.all_reduce(local, op="sum")
            for gs in by_slot.values():
                for g in gs[1:]:
                    g.copy_(gs[0])
            for p, g in zip(firsts, grads):
                p.grad = g
            for group in groups:
                if len(group) > 1:
                    collectives.broadcast([p.grad for p in group], root=0)

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
                others = [dict(_tensor_attrs(r.blocks[k])) for r in ranks[1:]]
                for name, t in _tensor_attrs(blk):
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


def issue_order(orders: list[list[tuple[str, int, int]]], stages: int) -> list[tuple[str, int, int]]:
    """One host order of every action that respects the pipeline's dependencies.

    ``F(s, i)`` needs ``F(s-1, i)``; ``B(s, i)`` needs ``B(s+1, i)`` (the last stage's backward needs its
    own forward). Ranks are visited round-robin, each issuing its next action once that action's producer
    is issued. Times come from the slots' clocks, not from this order: any such order places the same.
    """
    done: set[tuple[str, int, int]] = set()
    pos = [0] * len(orders)
    out: list[tuple[str, int, int]] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r, order in enumerate(orders):
            while pos[r] < len(order):
                kind, s, i = order[pos[r]]
                if kind == FORWARD:
                    ready = s == 0 or (FORWARD, s - 1, i) in done
                else:
                    ready = (FORWARD, s, i) in done if s == stages - 1 else (BACKWARD, s + 1, i) in done
                if not ready:
                    break
                done.add((kind, s, i))
                out.append((kind, s, i))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: o[pos[r]] for r, o in enumerate(orders) if pos[r] < len(o)}
            raise RuntimeError(f"pipeline schedule deadlocks: next actions per stage {stuck}")
    return out


def _replica_module(blocks: ExportedBlocks, stage_module, model: nn.Module, slots: tuple[int, ...]):
    """A replica's module on its slots and its tensor ranks: the stage's blocks bound on its slot, or (several
    slots) a :class:`~interop.live.tensor_parallel.TensorParallelChunk` of each rank's shards."""
    if len(slots) == 1:
        module = bind(stage_module, model, torch.device("hybrid", slots[0]))
        params, names, block_of = _unique_params(module.blocks, blocks.canonical)
        return module, [_Rank(slots[0], module.blocks, params, names, block_of)]
    from interop.live.tensor_parallel import TensorParallelChunk, flatten, shard_block

    tp = len(slots)
    per_rank = []
    shards: dict[str, object] = {}
    for t, slot in enumerate(slots):
        bound = bind(stage_module, model, torch.device("hybrid", slot))
        graphs = []
        for k, blk in enumerate(bound.blocks):
            plan = blocks.tp_plan(stage_module.start + k)
            flat = flatten(blk)
            graphs.append(shard_block(flat, plan, tp, t, "local") if plan.active else flat)
            for target, spec in plan.params.items() if plan.active else ():
                shards[blocks.canonical.get(target, target)] = spec
        per_rank.append(graphs)
    module = TensorParallelChunk(per_rank, stage_module.wiring, stage_module.input_names, stage_module.output_names,
                                 stage_module.last, stage_module.out_spec, slots)
    ranks = []
    for slot, rank_blocks in zip(slots, module.ranks):
        params, names, block_of = _unique_params(rank_blocks, blocks.canonical)
        ranks.append(_Rank(slot, rank_blocks, params, names, block_of, {n: shards[n] for n in names if n in shards}))
    return module, ranks


def _unique_params(module_blocks, canonical: dict[str, str]):
    params, names, block_of, seen = [], [], [], set()
    for k, blk in enumerate(module_blocks):
        for name, p in blk.named_parameters(remove_duplicate=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            params.append(p)
            names.append(canonical.get(name, name))
            block_of.append(k)
    return params, names, block_of


def _record(slot: int):
    event = torch.hybrid.Event()
    event.record(torch.hybrid.current_stream(slot))
    return event
