"""The in-process runner's pipeline: stage replicas on their slots, the schedule's actions, and the copies
between stages.

:class:`StageReplica` is one data-parallel replica of a (virtual) stage: its module on its slots
(:func:`replica_module`: the stage's blocks bound on one slot, or a tensor-parallel chunk on
several) and one :class:`ReplicaRank` per tensor rank. :class:`Pipeline` runs a forward or a
backward action of every replica of a stage; inputs come from the previous stage's replicas as
real copies (rows re-split where the data-parallel counts differ), gradients go back the same
way. A copy leaves the sender on a send stream (which waits for the sender's action to finish)
and lands on the receiver's receive stream; the receiver's compute stream waits for it.
:func:`issue_order` is one host order of the actions that respects their dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from interop.live.bind import bind, lockstep, split_rows
from interop.live.exported_blocks import ExportedBlocks
from planner.layout import VirtualStage

FORWARD, BACKWARD = "F", "B"

STREAM_PURPOSES = ("send_fwd", "send_bwd", "recv_fwd", "recv_bwd", "reduce")
"""Each slot's side streams: sends and receives per direction, and one for data-parallel reductions, so that a
slot computes while data travels."""


@dataclass(slots=True)
class ReplicaRank:
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
    aliases: list[tuple[nn.Parameter, nn.Parameter]] = field(default_factory=list)
    """(a later holder's own leaf, the parameter it aliases) per parameter several blocks hold
    (:func:`untie_holders`): each leaf's ``.grad`` is its parameter's."""


@dataclass(slots=True)
class StageReplica:
    """One data-parallel replica of a (virtual) stage."""

    stage: VirtualStage
    index: int
    slots: tuple[int, ...]
    module: nn.Module
    rows: tuple[int, int]
    """Its rows within each microbatch."""
    ranks: list[ReplicaRank]
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


def replica_module(blocks: ExportedBlocks, stage_module, model: nn.Module, slots: tuple[int, ...],
                   shared: dict[str, torch.Tensor] | None = None):
    """A replica's module on its slots and its tensor ranks: the stage's blocks bound on its slot, or (several
    slots) a :class:`~interop.live.tensor_parallel.TensorParallelChunk` of each rank's shards. ``shared``: one
    slot's parameters held over another replica's bytes (:func:`~interop.live.bind.bind`)."""
    if len(slots) == 1:
        module = bind(stage_module, model, torch.device("hybrid", slots[0]), shared=shared)
        aliases = untie_holders(module.blocks)
        params, names, block_of = _unique_params(module.blocks, blocks.canonical, aliases)
        return module, [ReplicaRank(slots[0], module.blocks, params, names, block_of, aliases=aliases)]
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
        aliases = untie_holders(rank_blocks)
        params, names, block_of = _unique_params(rank_blocks, blocks.canonical, aliases)
        ranks.append(ReplicaRank(slot, rank_blocks, params, names, block_of,
                                 {n: shards[n] for n in names if n in shards}, aliases=aliases))
    return module, ranks


def untie_holders(module_blocks) -> list[tuple[nn.Parameter, nn.Parameter]]:
    """Give every later block holding a parameter an earlier block holds (an LM head tied to the embedding) a
    leaf of its own over the same bytes, and return the (leaf, parameter) pairs. Autograd would sum the holders'
    gradients in its input buffer, holding the later holder's from its backward to the first holder's (GPT-2's
    154 MB through the whole backward, per replica); with a leaf each, each holder's backward adds its gradient
    into the one ``.grad`` (the rank's flat buffer) as it is made, as Megatron's ``main_grad`` accumulation does.
    The sum is the same; the optimizer, the reduction and the state dict see the parameter only."""
    seen: set[int] = set()
    aliases: dict[int, nn.Parameter] = {}
    out = []
    for blk in module_blocks:
        mine = set()
        for mod in blk.modules():
            for key, p in list(mod._parameters.items()):
                if p is None or not p.requires_grad:
                    continue
                if id(p) in seen:
                    if id(p) not in aliases:
                        aliases[id(p)] = nn.Parameter(p.detach(), requires_grad=True)
                        out.append((aliases[id(p)], p))
                    mod._parameters[key] = aliases[id(p)]
                else:
                    mine.add(id(p))
        seen |= mine
        aliases.clear()
    return out


def _unique_params(module_blocks, canonical: dict[str, str], aliases=()):
    params, names, block_of, seen = [], [], [], {id(leaf) for leaf, _ in aliases}
    for k, blk in enumerate(module_blocks):
        for name, p in blk.named_parameters(remove_duplicate=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            params.append(p)
            names.append(canonical.get(name, name))
            block_of.append(k)
    return params, names, block_of


def record_event(slot: int):
    """An event recorded on ``slot``'s current stream (what a later copy or reduction waits for)."""
    event = torch.hybrid.Event()
    event.record(torch.hybrid.current_stream(slot))
    return event


class Pipeline:
    """The replicas of every (virtual) stage and the actions that move data between them (see the module doc).

    ``state`` (passed to each action) holds what is in flight within a step: per (stage, microbatch, replica)
    its outputs (``"out"``), its received inputs and later their gradients (``"in"``), and the events of its
    forward and backward (``"fwd_event"``, ``"bwd_event"``)."""

    def __init__(self, blocks: ExportedBlocks, virtual: list[VirtualStage], replicas: list[list[StageReplica]],
                 slots, lockstep: set[int] = frozenset()) -> None:
        """``lockstep``: the stages whose replicas run in step (:func:`~interop.live.bind.lockstep`): their
        forwards block by block, their backwards as one, so that each block's gradients are final on every
        replica together (:mod:`interop.live.shared_replicas`). Each slot's own work is the same either way."""
        self.blocks, self.virtual, self.replicas = blocks, virtual, replicas
        self.lockstep = lockstep
        self.streams = {(slot, purpose): torch.hybrid.Stream(device=slot) for slot in slots
                        for purpose in STREAM_PURPOSES}

    def barrier(self, slots) -> int:
        """Every stream the step uses starts at the latest clock among the plan's slots; returns that clock."""
        from interop.session import current_timeline as current

        timeline = current()
        timeline.ingest()
        streams = [torch.hybrid.default_stream(s) for s in slots] + list(self.streams.values())
        clock = {st: timeline.clocks.get((st.device.index, st.stream_id), 0) for st in streams}
        latest = max(streams, key=clock.get)
        event = torch.hybrid.Event()
        event.record(latest)
        for st in streams:
            event.wait(st)
        timeline.ingest()
        return clock[latest]

    # -- actions -------------------------------------------------------------------------

    def forward(self, s: int, i: int, state, staged_in, staged_tgt, loss_fn, scale, losses) -> None:
        """Forward of microbatch ``i`` on every replica of stage ``s`` (the last stage computes the loss)."""
        reps = self.replicas[s]
        lastp = s == len(self.replicas) - 1
        if s in self.lockstep:
            inputs = [(staged_in.pop((i, rep.index)), []) if s == 0 else self.receive(s, i, rep, state)
                      for rep in reps]
            outs = lockstep([rep.module.steps(*args) for rep, (args, _) in zip(reps, inputs)])
        else:
            inputs = outs = [None] * len(reps)
        for rep, given, out in zip(reps, inputs, outs):
            if given is not None:
                args, leaves = given
            elif s == 0:
                args = staged_in.pop((i, rep.index))
                leaves = []
            else:
                args, leaves = self.receive(s, i, rep, state)
            if out is None:
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
            state["fwd_event", s, i, rep.index] = record_event(rep.home)

    def backward(self, s: int, i: int, state) -> None:
        """Backward of microbatch ``i`` on every replica of stage ``s``, seeded by the next stage's input
        gradients (the last stage: by the loss scale)."""
        lastp = s == len(self.replicas) - 1
        reps = self.replicas[s]
        together = None
        if s in self.lockstep:
            together = [self._seeds(s, i, rep, state, lastp) for rep in reps]
            tensors = [t for outs, _ in together for t in outs]
            if tensors:
                torch.autograd.backward(tensors, [g for _, grads in together for g in grads])
        for rep in reps:
            if together is None:
                tensors, grads = self._seeds(s, i, rep, state, lastp)
                if tensors:
                    torch.autograd.backward(tensors, grads)
            state["bwd_event", s, i, rep.index] = record_event(rep.home)
            # The received inputs are done with: only their gradients wait for the previous stage to take them.
            leaves = state.get(("in", s, i, rep.index))
            if leaves:
                state["in", s, i, rep.index] = [(k, x.grad) for k, x in leaves]
        if not lastp:
            for nxt in self.replicas[s + 1]:
                state.pop(("in", s + 1, i, nxt.index), None)
                state.pop(("bwd_event", s + 1, i, nxt.index), None)
        state.pop(("fwd_event", s, i, 0), None)

    def _seeds(self, s: int, i: int, rep: StageReplica, state, lastp: bool) -> tuple[list, list]:
        """What ``rep``'s backward of microbatch ``i`` starts from: (outputs, their gradients)."""
        outs = state.pop(("out", s, i, rep.index))
        if lastp:
            # Seeded with the loss scale 1/(microbatches x replicas): the mean over the global batch.
            return [outs[0]], [rep.seed]
        tensors, grads = [], []
        for k, out in enumerate(outs):
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                continue
            g = self.gather_grad(s, i, rep, k, state)
            if g is not None:
                tensors.append(out)
                grads.append(g)
        return tensors, grads

    # -- transport -----------------------------------------------------------------------

    def receive(self, s: int, i: int, rep: StageReplica, state) -> tuple[list, list]:
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
            x = self.assemble(parts, rep.home, spec.batch_dim, hi - lo, "fwd")
            if x.is_floating_point() and state["out", s - 1, i, prev[0].index][k].requires_grad:
                x.requires_grad_(True)
                leaves.append((k, x))
            args.append(x)
        return args, leaves

    def gather_grad(self, s: int, i: int, rep: StageReplica, k: int, state) -> torch.Tensor | None:
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
            return self.assemble(parts, rep.home, spec.batch_dim, hi - lo, "bwd")
        # A value without a batch dimension went to every replica: its gradients add up.
        total = self.assemble(parts[:1], rep.home, None, 0, "bwd")
        for part in parts[1:]:
            total = total + self.assemble([part], rep.home, None, 0, "bwd")
        return total

    def assemble(self, parts, dst: int, dim: int | None, rows: int, direction: str) -> torch.Tensor:
        """Copy ``parts`` ((tensor, its slot, ready event, row offset)) to ``dst`` as one tensor; several parts
        land straight in their rows of one buffer (no concatenation on the receiver)."""
        if len(parts) == 1:
            value, src, ready, _ = parts[0]
            out = self.copy(value, src, dst, ready, direction)
        else:
            first = parts[0][0]
            shape = list(first.shape)
            shape[dim] = rows
            out = torch.empty(shape, dtype=first.dtype, device=torch.device("hybrid", dst))
            for value, src, ready, offset in parts:
                self.copy(value, src, dst, ready, direction, out=out.narrow(dim, offset, value.shape[dim]))
        self._arrived(dst, direction)
        return out

    def copy(self, value: torch.Tensor, src: int, dst: int, ready, direction: str, out=None) -> torch.Tensor:
        """Copy ``value`` from ``src`` to ``dst`` (into ``out`` if given): leaves on ``src``'s send stream once
        ``ready`` (the producing action) has passed, lands on ``dst``'s receive stream; the caller makes
        ``dst``'s compute stream wait for it."""
        if src == dst and out is None:
            return value
        send = self.streams[src, f"send_{direction}"]
        recv = self.streams[dst, f"recv_{direction}"]
        ready.wait(send)
        with torch.no_grad(), torch.hybrid.stream(send), torch.hybrid.stream(recv):
            if out is not None:
                return out.copy_(value)
            return value.to(torch.device("hybrid", dst))

    def _arrived(self, dst: int, direction: str) -> None:
        event = torch.hybrid.Event()
        event.record(self.streams[dst, f"recv_{direction}"])
        event.wait(torch.hybrid.default_stream(dst))


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


__all__ = ["BACKWARD", "FORWARD", "Pipeline", "ReplicaRank", "STREAM_PURPOSES", "StageReplica", "issue_order",
           "record_event", "replica_module", "untie_holders"]
