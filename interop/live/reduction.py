"""The in-process runner's gradient reduction: one flat gradient buffer per tensor rank, bucketed by block.

Every tensor rank's gradients are views into one flat buffer (DDP's ``gradient_as_bucket_view``),
its parameters ordered by block: each microbatch's backward adds into it, one ``zero_`` per step
clears it, and a data-parallel stage all-reduces each block's slice in place, rank by rank, on the
slots' reduce streams, as soon as every replica's copy of that block's gradients is final (a
post-accumulate-grad hook counts them). A parameter shared by two blocks of a stage belongs to the
first (its gradient is final when that block's backward is); each later holder adds its part into the
same gradient as its own backward makes it (:func:`~interop.live.pipeline.untie_holders`); parameters
held by several stages (tied embeddings) are summed over every copy after the schedule.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import torch
import torch.nn as nn

from interop.live.pipeline import StageReplica, record_event


class GradientReducer:
    """The gradient buffers, buckets and reductions of a runner's replicas (see the module doc)."""

    def __init__(self, replicas: list[list[StageReplica]], tied: dict[str, tuple[int, ...]], streams: dict,
                 shared: set[int] = frozenset()) -> None:
        """``tied``: parameters the model's blocks share (the exported blocks' ``tied``); ``streams``: the
        pipeline's side streams, of which each slot's ``reduce`` one is used here; ``shared``: the stages whose
        replicas share replica 0's parameters and run in step (:mod:`interop.live.shared_replicas`): each of
        their buckets is all-reduced as soon as every replica's copy is final, during the backward, and then
        only replica 0 keeps the bytes of the (equal) result."""
        self.replicas, self.streams, self.shared = replicas, streams, shared
        self.tied = self._tied_groups(tied)
        tied_names = {n for n, _ in self.tied}
        self.buckets: list[list[list[list[tuple[int, int]]]]] = [
            [[self._flat_buffer(rep, rank, tied_names, len(reps)) for rank in rep.ranks] for rep in reps]
            for reps in replicas]
        """[stage][replica][rank][block] -> the block's (start, stop) in the rank's buffer ((0, 0): none)."""
        self._bucket_params = [[[[[p for p, n, k in zip(rank.params, rank.names, rank.block_of)
                                   if k == b and n not in tied_names] if len(reps) > 1 else []
                                  for b in range(len(rank.blocks))] for rank in rep.ranks] for rep in reps]
                               for reps in replicas]
        self._armed: set[int] = set()
        self._ready: dict[tuple[int, int, int, int], Any] = {}
        self._counts: dict[tuple[int, int, int, int], int] = {}
        self._next: dict[tuple[int, int], list[int]] = {}
        """(stage, tensor rank) -> its buckets not yet reduced this step, in the order they are reduced."""
        for s, reps in enumerate(replicas):
            for rep in reps:
                for t, rank in enumerate(rep.ranks):
                    for k, bucket in enumerate(self._bucket_params[s][rep.index][t]):
                        for p in bucket:
                            p.register_post_accumulate_grad_hook(self._hook(s, rep.index, t, rank.slot, k,
                                                                            len(bucket)))

    def _tied_groups(self, tied) -> list[tuple[str, list[list[nn.Parameter]]]]:
        """Per tied parameter held by several stages: per (stage, replica), its copies on the tensor ranks."""
        groups = []
        for name in tied:
            copies = [[p for rank in rep.ranks for p, n in zip(rank.params, rank.names) if n == name]
                      for reps in self.replicas for rep in reps]
            copies = [c for c in copies if c]
            holders = {rep.stage.index for reps in self.replicas for rep in reps if name in rep.names}
            if len(holders) > 1:
                if any(name in rank.shards for reps in self.replicas for rep in reps for rank in rep.ranks):
                    raise NotImplementedError(f"{name} is tied across stages and split by tensor parallelism")
                groups.append((name, copies))
        return groups

    @staticmethod
    def _flat_buffer(rep: StageReplica, rank, tied_names: set[str], replicas: int) -> list[tuple[int, int]]:
        """Order the rank's parameters by block, give it its flat gradient buffer, and return each block's span
        in it (all (0, 0) when the stage has one replica: nothing to reduce)."""
        order = sorted(range(len(rank.params)), key=lambda j: rank.block_of[j])
        rank.params = [rank.params[j] for j in order]
        rank.names = [rank.names[j] for j in order]
        rank.block_of = [rank.block_of[j] for j in order]
        total = sum(p.numel() for p in rank.params)
        dtypes = {p.dtype for p in rank.params}
        if len(dtypes) > 1:
            raise NotImplementedError(f"stage {rep.stage.index} mixes parameter dtypes {sorted(map(str, dtypes))}; "
                                      "the runner keeps one gradient buffer per replica")
        # Left unfilled: prepare() clears it before every step.
        rank.grad_buffer = (torch.empty(total, dtype=rank.params[0].dtype, device=torch.device("hybrid", rank.slot))
                            if rank.params else None)
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
        return [tuple(x) for x in spans] if replicas > 1 else [(0, 0)] * len(spans)

    def _hook(self, s: int, r: int, t: int, slot: int, k: int, size: int):
        # The hook lives in the parameter's autograd node (C++), which the cyclic collector cannot see
        # through: it holds the reducer weakly so that a dropped runner frees its slots' memory.
        reducer = weakref.ref(self)

        def ready(_param) -> None:
            self_ = reducer()
            if self_ is None or s not in self_._armed:
                return
            key = (s, r, t, k)
            self_._counts[key] = self_._counts.get(key, 0) + 1
            if self_._counts[key] == size:  # the bucket's gradients are final: it may be reduced from now
                self_._ready[key] = record_event(slot)
                if s in self_.shared:
                    self_._reduce_ready(s, t)

        return ready

    def prepare(self) -> None:
        """Point every parameter's ``.grad`` at its slice of its rank's flat buffer, cleared."""
        from interop.live.shared_replicas import zero_replicas

        self._armed.clear()
        self._ready.clear()
        self._counts.clear()
        for s, reps in enumerate(self.replicas):
            if s in self.shared:
                zero_replicas([rep.ranks[0].grad_buffer for rep in reps])
            for rep in reps:
                for rank in rep.ranks:
                    if rank.grad_buffer is None:
                        continue
                    if s not in self.shared:
                        rank.grad_buffer.zero_()
                    offset = 0
                    for p in rank.params:
                        p.grad = rank.grad_buffer[offset:offset + p.numel()].view_as(p)
                        offset += p.numel()
                    for leaf, p in rank.aliases:  # a later holder adds into its parameter's gradient
                        leaf.grad = p.grad
            if len(reps) > 1:
                for t, rank in enumerate(reps[0].ranks):
                    spans = self.buckets[s][0][t]
                    self._next[s, t] = sorted((k for k, (a, b) in enumerate(spans) if b > a), key=lambda k: -k)

    def arm(self, s: int) -> None:
        """Stage ``s``'s next backward makes its gradients final: its buckets count toward reduction from now."""
        self._armed.add(s)

    def reduce_stage(self, s: int) -> None:
        """All-reduce stage ``s``'s buckets across its replicas (tensor rank by tensor rank) on the reduce streams,
        each bucket once every replica's copy of it is final; the replica's optimizer waits for the last one."""
        import collectives

        reps = self.replicas[s]
        if len(reps) < 2:
            return
        for t in range(len(reps[0].ranks)):
            for k in self._next.pop((s, t), []):  # the buckets not reduced during the backward
                self._reduce_bucket(s, t, k)
            for rep in reps:
                slot = rep.ranks[t].slot
                done = torch.hybrid.Event()
                done.record(self.streams[slot, "reduce"])
                done.wait(torch.hybrid.default_stream(slot))

    def _reduce_ready(self, s: int, t: int) -> None:
        """All-reduce tensor rank ``t``'s next buckets of stage ``s`` while every replica's copy is final (the
        backward finishes the last block first: buckets go in that order, each when the last replica finishes
        it, as DDP's overlap does)."""
        pending = self._next.get((s, t), [])
        reps = self.replicas[s]
        while pending and all((s, rep.index, t, pending[0]) in self._ready for rep in reps):
            self._reduce_bucket(s, t, pending.pop(0))

    def _reduce_bucket(self, s: int, t: int, k: int) -> None:
        """All-reduce bucket ``k`` of tensor rank ``t`` across stage ``s``'s replicas on their reduce streams,
        after each replica's copy of it is final; in a shared stage, replicas 1.. then give back the bytes of
        the (equal) result (:func:`~interop.live.shared_replicas.release`)."""
        import collectives

        from interop.live.shared_replicas import release

        reps = self.replicas[s]
        streams = [self.streams[rep.ranks[t].slot, "reduce"] for rep in reps]
        for rep, stream in zip(reps, streams):
            self._ready.pop((s, rep.index, t, k)).wait(stream)
        parts = [rep.ranks[t].grad_buffer[slice(*self.buckets[s][rep.index][t][k])] for rep in reps]
        with contextlib.ExitStack() as stack:
            for stream in streams:
                stack.enter_context(torch.hybrid.stream(stream))
            collectives.all_reduce(parts, op="sum")
        if s in self.shared:
            for part in parts[1:]:
                release(part)

    def reduce_tied(self) -> None:
        """Sum a tied parameter's gradient over every (stage, replica) holding it (their first tensor rank's
        copies), then give every tensor rank's copy the sum."""
        import collectives

        for _, groups in self.tied:
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


__all__ = ["GradientReducer"]
