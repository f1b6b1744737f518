"""Data-parallel replicas that the emulation holds once: what is equal by construction is stored once.

The replicas of a data-parallel stage start from the same parameters, and their gradients are all-reduced
before the optimizer steps: every replica's optimizer then computes the same update from the same state, bit
for bit (a deterministic kernel on equal inputs). So the in-process runner keeps replica 0's parameters and
optimizer state only, and gives replicas 1.. tensors on their own slots over those bytes
(``interop._C._shared_on_slot``): each slot's account is charged as for its own copy, so ``memory_allocated``,
its peak and the plan's per-slot peaks read exactly what independent replicas would, while the host holds the
bytes once. Only replica 0's optimizer runs; its records on the timeline are placed again on every other
replica's slots at the same costs (:meth:`interop.timelines.Timeline.replay`), where each replica's own step
would have been placed. Each replica keeps an optimizer object of its own (never stepped) whose state is
replica 0's, on its slots, so its ``state_dict()`` is what its own steps would have made.

A stage is shared only where that holds: more than one replica, one slot per replica (tensor-parallel ranks
shard after binding), every replica on an emulated slot of replica 0's chip kind (the costs are the kind's; a
cuda-backed slot's bytes live on its own GPU). Activations and buffers stay each replica's own.

Gradients differ between replicas until they are all-reduced, and are equal after. So a shared stage's replicas
run in step (:func:`interop.live.bind.lockstep`: forward block by block, one backward over all of them), each
bucket of gradients is all-reduced as soon as every replica's copy is final, and replicas 1.. then give the
bytes of the result back to the host (:func:`release`: zeros, the slot still charged): the host holds one
replica's gradients plus the buckets in flight, not one set per replica. Each step's clearing of their buffers
is replica 0's op, its records replayed on their slots (:func:`zero_replicas`). Replica 0's gradients are the
stage's (its optimizer, ``gradients()``); the others' read zero after their bucket is reduced. Each slot's work,
accounting and timeline are what its own replica's would be (``tests/interop/live/test_shared_replicas.py``).
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import torch


def shares(stage, rack) -> bool:
    """Whether ``stage``'s (a :class:`planner.layout.VirtualStage`) replicas may hold replica 0's parameters and
    optimizer state (see the module doc)."""
    if stage.dp < 2 or any(len(slots) != 1 for slots in stage.replicas):
        return False
    first = rack.devices[stage.replicas[0][0]]
    return all(rack.devices[s].backing.is_emulated and rack.devices[s].kind == first.kind
               for (s,) in stage.replicas)


def shared_params(source_rank) -> dict[str, torch.Tensor]:
    """Replica 0's trainable parameters under their canonical names: what :func:`interop.live.bind.bind` gives the
    other replicas over the same bytes."""
    return dict(zip(source_rank.names, source_rank.params))


def on_slot(tensor: torch.Tensor, slot: int) -> torch.Tensor:
    """``tensor`` (on a slot) as a tensor on ``slot`` over the same bytes, charged on ``slot``."""
    from interop import _C

    return _C._shared_on_slot(tensor.detach(), slot)


def step(replicas) -> None:
    """The optimizer step of one shared stage's replicas (``StageReplica`` list, replica 0 first): replica 0's
    runs; the others take its state over the same bytes and its records on their slots."""
    from interop.session import current_timeline

    first = replicas[0]
    if first.optimizer is None:
        return
    timeline = current_timeline()
    with timeline.holding():
        timeline.ingest()
        begin = timeline.placed
        first.optimizer.step()
        timeline.ingest()
        end = timeline.placed
        for rep in replicas[1:]:
            _mirror_state(first.optimizer, rep.optimizer, rep.slots[0])
            timeline.replay(begin, end, list(first.slots), list(rep.slots))


def _mirror_state(source: torch.optim.Optimizer, mirror: torch.optim.Optimizer, slot: int) -> None:
    """Give ``mirror`` (a replica's optimizer over the same parameters, never stepped) ``source``'s state: its
    tensors on the slots as views of the same bytes (made once: the optimizer updates them in place), anything
    else (a CPU step count, a number) copied, as it changes every step."""
    for group, mine in zip(source.param_groups, mirror.param_groups):
        for p, q in zip(group["params"], mine["params"]):
            state = source.state.get(p)
            if not state:
                continue
            own = mirror.state[q]
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.device.type == "hybrid":
                    held = own.get(key)
                    if (held is None or held.data_ptr() != value.data_ptr() or held.shape != value.shape
                            or held.stride() != value.stride()):
                        own[key] = on_slot(value, slot)
                elif isinstance(value, torch.Tensor):
                    own[key] = value.clone()
                else:
                    own[key] = value


def release(tensor: torch.Tensor) -> None:
    """Zero ``tensor`` (contiguous, on an emulated slot) without a record, giving its whole pages back to the
    host: its slot stays charged for it, and a page is taken again when next written. Where pages cannot be
    given back (not Linux), the bytes are zeroed in place."""
    from interop import _C

    if not tensor.is_contiguous():
        raise ValueError("release: the tensor must be contiguous")
    view = _C._execution_alias(tensor, "release").view(-1)  # the host's bytes, no record
    start, size = view.data_ptr(), view.element_size()
    first = -(-start // _PAGE) * _PAGE
    last = (start + view.numel() * size) // _PAGE * _PAGE
    if last > first and _give_back(first, last - first):
        view[:(first - start) // size].zero_()
        view[(last - start) // size:].zero_()
    else:
        view.zero_()


def zero_replicas(buffers: list) -> None:
    """Clear a shared stage's gradient buffers (replica 0's first) as each replica's ``zero_()`` would: replica
    0's op runs, and its records are replayed on the other replicas' slots, whose buffers are released
    (:func:`release`: zeros, their pages not taken until the backward writes them). Replica 0's stays resident:
    the backward fills it whole before the step's peak anyway, and pages given back and taken again cost a
    fault and a clearing each (on a virtual machine whose host reclaims freed memory, the first touch again)."""
    from interop.session import current_timeline

    first = buffers[0]
    if first is None:
        return
    timeline = current_timeline()
    with timeline.holding():
        timeline.ingest()
        begin = timeline.placed
        first.zero_()
        timeline.ingest()
        end = timeline.placed
        for buffer in buffers[1:]:
            release(buffer)
            timeline.replay(begin, end, [first.device.index], [buffer.device.index])


_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4  # Linux: drop a private anonymous page; read again, it is zero
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _give_back(address: int, length: int) -> bool:
    """Drop the host's pages ``[address, address + length)`` (page-aligned, private anonymous memory: malloc's);
    False where that cannot be done."""
    if _libc is None:
        return False
    return _libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), _MADV_DONTNEED) == 0


__all__ = ["on_slot", "release", "shared_params", "shares", "step", "zero_replicas"]
