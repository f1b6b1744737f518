"""Collectives over tensors on hybrid slots, in one process (like NCCL's
one-process, multi-device use): one tensor per participant, each on its own
slot, participants in list order.

Each call chooses an algorithm by modelled time (or takes the one given),
runs that algorithm's schedule on the real bytes (zero-copy aliases of the
slots' memory) and places the same schedule's modelled time on every
participant's timeline. Everything is checked before any output is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from collectives import algorithms, executor
from collectives.device_hooks import hooks
from collectives.ops import check_reduce_op
from collectives.algorithm_choice import CollectiveEstimate, cached_plan, topology
from collectives.schedule import check_splits


@dataclass(frozen=True, slots=True)
class Result:
    """What a collective call returns: the outputs (per participant) and the modelled estimate that was placed."""

    outputs: list
    estimate: CollectiveEstimate
    slots: tuple[int, ...]


def _slots(op: str, tensors: Sequence, what: str) -> tuple[int, ...]:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{op}: {what} must be a non-empty list of tensors, one per participant")
    slots = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {what}[{i}] must be a torch.Tensor, got {type(t).__name__}")
        device = t.device
        if device.type != "hybrid":
            raise ValueError(f"{op}: {what}[{i}] is on {device}; every tensor must be on a hybrid slot")
        slots.append(device.index)
    if len(set(slots)) != len(slots):
        seen: dict[int, int] = {}
        for i, s in enumerate(slots):
            if s in seen:
                raise ValueError(f"{op}: {what}[{seen[s]}] and {what}[{i}] are both on hybrid:{s}; "
                                 "each participant needs its own slot")
            seen[s] = i
    return tuple(slots)


def _check_pairs(op: str, inputs: Sequence, outputs: Sequence) -> None:
    if len(outputs) != len(inputs):
        raise ValueError(f"{op}: expected {len(inputs)} outputs (one per participant), got {len(outputs)}")
    for i, (a, b) in enumerate(zip(inputs, outputs)):
        if b is None or b is a:
            continue
        if not isinstance(b, torch.Tensor) or b.device != a.device:
            where = b.device if isinstance(b, torch.Tensor) else type(b).__name__
            raise ValueError(f"{op}: outputs[{i}] must be on {a.device} like inputs[{i}], got {where}")


def _run(op: str, inputs: list, outputs: list, slots: tuple[int, ...], *, reduce_op: str = "sum",
         algorithm: str | None = None, root: int = 0, splits=None, factor=None) -> Result:
    algorithms.check_name(algorithm)
    if splits is not None:
        splits = check_splits(splits, len(slots))
    h = hooks()
    rack = h.rack()
    topo = topology(rack.spec)
    first = next(t for t in list(inputs) + list(outputs) if t is not None)
    count = executor.infer_count(op, inputs, outputs, splits)
    # A training loop all-reduces the same buckets every step: each is planned once (the one plan cache).
    chosen = cached_plan(topo, op, count, first.element_size(), slots, algorithm, root=root, splits=splits)
    schedule = chosen.schedule
    if schedule is None:
        raise RuntimeError(f"{op}: the {chosen.estimate.algorithm} plan has no step schedule to execute")
    ins = [None if t is None else h.alias(t) for t in inputs]
    # In place (the same tensor as input and output): one alias serves both.
    outs = [None if t is None else ins[i] if t is inputs[i] else h.alias(t) for i, t in enumerate(outputs)]
    present = [t for t in ins + outs if t is not None]
    if not all(t.is_cpu for t in present) and len({t.device for t in present}) > 1:
        # Slots of different backings (host memory and a real GPU): the schedule
        # runs on host copies and the results are written back.
        staged_in = [None if t is None else t.cpu() for t in ins]
        staged_out = [None if t is None else t.cpu() for t in outs]
        executor.run(schedule, staged_in, staged_out, reduce_op, factor)
        for dst, src in zip(outs, staged_out):
            if dst is not None:
                dst.copy_(src)
    else:
        executor.run(schedule, ins, outs, reduce_op, factor)
    est = chosen.estimate
    h.place(op, list(slots), est.seconds, est.nbytes, est.algorithm, est.sources, _link(topo, slots))
    return Result(list(outputs), est, slots)


_links: dict[tuple[int, tuple[int, ...]], tuple[object, str]] = {}


def _link(topo, slots: tuple[int, ...]) -> str:
    """The timeline's link label of a collective over ``slots`` (the domains it spans), cached per topology."""
    key = (id(topo), slots)
    hit = _links.get(key)
    if hit is None or hit[0] is not topo:
        if len(_links) > 256:
            _links.clear()
        hit = _links[key] = (topo, f"collective {'+'.join(sorted({topo.domain_name(s) for s in slots}))}")
    return hit[1]


def run(op: str, inputs: Sequence, outputs: Sequence, *, reduce_op: str = "sum", algorithm: str | None = None,
        root: int = 0, splits=None, factor=None) -> Result:
    """Any collective in nccl-tests' buffer convention (``collectives.ops``): one input and one output
    per participant, None where the op gives that participant no buffer. Participant i's slot is where its
    tensors are; out-of-place and in-place (NCCL-style aliasing) both work."""
    if len(inputs) != len(outputs):
        raise ValueError(f"{op}: expected as many outputs as inputs ({len(inputs)}), got {len(outputs)}")
    per_rank = []
    for i, (a, b) in enumerate(zip(inputs, outputs)):
        t = a if a is not None else b
        if t is None:
            raise ValueError(f"{op}: participant {i} has neither an input nor an output tensor")
        if a is not None and b is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
                and a.device != b.device:
            raise ValueError(f"{op}: participant {i}'s input is on {a.device} and its output on {b.device}")
        per_rank.append(t)
    slots = _slots(op, per_rank, "participants")
    check_reduce_op(reduce_op)
    return _run(op, list(inputs), list(outputs), slots, reduce_op=reduce_op, algorithm=algorithm, root=root,
                splits=splits, factor=factor)


def _like(t: torch.Tensor, numel: int, shape=None) -> torch.Tensor:
    return torch.empty(shape if shape is not None else (numel,), dtype=t.dtype, device=t.device)


def all_reduce(tensors: Sequence[torch.Tensor], op: str = "sum", *, algorithm: str | None = None,
               outputs: Sequence[torch.Tensor] | None = None, factor: float | None = None) -> Result:
    """Reduce ``tensors`` element-wise across participants; in place unless ``outputs`` is given.

    ``op``: sum, prod, min, max, avg, premul_sum (with ``factor``), band, bor, bxor.
    """
    slots = _slots("all_reduce", tensors, "tensors")
    check_reduce_op(op)
    outputs = list(tensors) if outputs is None else list(outputs)
    _check_pairs("all_reduce", tensors, outputs)
    return _run("all_reduce", list(tensors), outputs, slots, reduce_op=op, algorithm=algorithm, factor=factor)


def reduce_scatter(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor] | None = None, op: str = "sum",
                   *, algorithm: str | None = None, factor: float | None = None) -> Result:
    """Reduce across participants and leave participant i with block i (inputs hold p blocks)."""
    slots = _slots("reduce_scatter", inputs, "inputs")
    check_reduce_op(op)
    p = len(inputs)
    if outputs is None:
        n = inputs[0].numel()
        if n % p:
            raise ValueError(f"reduce_scatter: input of {n} elements does not split into {p} blocks; pass outputs")
        shape = ((inputs[0].shape[0] // p,) + tuple(inputs[0].shape[1:])
                 if inputs[0].dim() and inputs[0].shape[0] % p == 0 else (n // p,))
        outputs = [_like(t, n // p, shape) for t in inputs]
    outputs = list(outputs)
    _check_pairs("reduce_scatter", inputs, outputs)
    return _run("reduce_scatter", list(inputs), outputs, slots, reduce_op=op, algorithm=algorithm, factor=factor)


def all_gather(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor] | None = None, *,
               algorithm: str | None = None) -> Result:
    """Every participant receives every input, concatenated in participant order."""
    slots = _slots("all_gather", inputs, "inputs")
    p = len(inputs)
    if outputs is None:
        t0 = inputs[0]
        shape = (p * t0.shape[0],) + tuple(t0.shape[1:]) if t0.dim() else (p,)
        outputs = [_like(t, p * t.numel(), shape) for t in inputs]
    outputs = list(outputs)
    _check_pairs("all_gather", inputs, outputs)
    return _run("all_gather", list(inputs), outputs, slots, algorithm=algorithm)


def broadcast(tensors: Sequence[torch.Tensor], root: int = 0, *, algorithm: str | None = None) -> Result:
    """Copy participant ``root``'s tensor into every other participant's, in place."""
    slots = _slots("broadcast", tensors, "tensors")
    _check_root("broadcast", root, len(tensors))
    return _run("broadcast", list(tensors), list(tensors), slots, algorithm=algorithm, root=root)


def reduce(tensors: Sequence[torch.Tensor], root: int = 0, op: str = "sum", *, algorithm: str | None = None,
           factor: float | None = None) -> Result:
    """Reduce into participant ``root``'s tensor, in place; the others are left as they were."""
    slots = _slots("reduce", tensors, "tensors")
    check_reduce_op(op)
    _check_root("reduce", root, len(tensors))
    return _run("reduce", list(tensors), list(tensors), slots, reduce_op=op, algorithm=algorithm, root=root,
                factor=factor)


def all_to_all(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor] | None = None, *,
               splits: Sequence[Sequence[int]] | None = None, algorithm: str | None = None) -> Result:
    """Participant i sends block j of its input to participant j.

    Even blocks by default; ``splits[i][j]`` elements from i to j for uneven ones
    (all_to_allv). Outputs hold the received blocks in sender order.
    """
    slots = _slots("all_to_all", inputs, "inputs")
    p = len(inputs)
    if splits is not None:
        splits = check_splits(splits, p)
    if outputs is None:
        if splits is None:
            outputs = [torch.empty_like(t) for t in inputs]
        else:
            outputs = [_like(inputs[j], sum(splits[i][j] for i in range(p))) for j in range(p)]
    outputs = list(outputs)
    _check_pairs("all_to_all", inputs, outputs)
    return _run("all_to_all", list(inputs), outputs, slots, algorithm=algorithm, splits=splits)


def gather(inputs: Sequence[torch.Tensor], root: int = 0, output: torch.Tensor | None = None, *,
           algorithm: str | None = None) -> Result:
    """Participant ``root`` receives every input, concatenated in participant order."""
    slots = _slots("gather", inputs, "inputs")
    p = len(inputs)
    _check_root("gather", root, p)
    if output is None:
        output = _like(inputs[root], p * inputs[root].numel())
    outputs = [output if i == root else None for i in range(p)]
    _check_pairs("gather", inputs, outputs)
    return _run("gather", list(inputs), outputs, slots, algorithm=algorithm, root=root)


def scatter(input: torch.Tensor, outputs: Sequence[torch.Tensor], root: int = 0, *,
            algorithm: str | None = None) -> Result:
    """Participant ``root``'s ``input`` (p blocks) is split: block i goes to ``outputs[i]``."""
    slots = _slots("scatter", outputs, "outputs")
    p = len(outputs)
    _check_root("scatter", root, p)
    if not isinstance(input, torch.Tensor) or input.device != outputs[root].device:
        raise ValueError(f"scatter: the input must be on the root's slot {outputs[root].device}")
    inputs = [input if i == root else None for i in range(p)]
    return _run("scatter", inputs, list(outputs), slots, algorithm=algorithm, root=root)


def send_recv(src: torch.Tensor, dst: torch.Tensor) -> Result:
    """Move ``src`` into ``dst`` (another slot), timed on the route between them."""
    slots = _slots("send_recv", [src, dst], "tensors")
    return _run("send_recv", [src, None], [None, dst], slots)


def barrier(devices: Sequence[int | torch.device | str]) -> Result:
    """Synchronise the listed slots: on the timeline, each continues when the last arrives."""
    tensors = [torch.empty(0, device=d if not isinstance(d, int) else f"hybrid:{d}") for d in devices]
    slots = _slots("barrier", tensors, "devices")
    return _run("barrier", tensors, [None] * len(tensors), slots)


def _check_root(op: str, root: int, p: int) -> None:
    if not isinstance(root, int) or not 0 <= root < p:
        raise ValueError(f"{op}: root must be a participant index in 0..{p - 1}, got {root!r}")
