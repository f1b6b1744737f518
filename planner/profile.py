"""What one block of a model does for one microbatch on one chip: its ops, parameters and activations.

A :class:`BlockProfile` is shape-level and chip-independent: the aten ops of
one forward and one backward (traced on the meta device through
``devices.cost.trace_ops``), the parameters one rank holds, the activations
autograd keeps from forward to backward, and the collectives the block issues
(tensor, context and expert parallelism). :mod:`planner.block_pricing`
prices a profile on a chip kind; the step model schedules the prices.

:func:`trace_profile` builds a profile from any callable block and its meta
inputs in one trace (one dispatch mode, ``trace_ops``' recorder, whose
:class:`~devices.cost.OpObserver` also notes which storages GEMMs read and,
on request, the live peak); :mod:`planner.decoder_blocks` builds the blocks
of a decoder language model with it, and :mod:`interop.live.exported_blocks`
the blocks of a real model. torch is imported only when tracing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import devices.cost

GROUPS = ("tp", "cp", "ep", "dp", "pp")
"""Parallel dimensions a collective can run over."""

OVERLAPS = ("none", "column_gemm", "row_gemm", "attention", "expert_gemm")
"""What compute can hide a block collective (see :class:`Collective`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Shard:
    """How a block is cut for one chip: microbatch, sequence and the tensor/context/expert degrees."""

    microbatch: int = 1
    """Samples in one microbatch on one data-parallel replica."""
    seq_len: int
    """Tokens per sample (the full sequence; context parallelism divides it)."""
    tp: int = 1
    """Tensor-parallel degree: attention heads, MLP width and vocabulary are split over ``tp`` chips."""
    cp: int = 1
    """Context-parallel degree: each chip holds ``seq_len / cp`` tokens of every sample."""
    ep: int = 1
    """Expert-parallel degree: each chip holds ``experts / ep`` experts of an MoE layer."""
    sequence_parallel: bool = True
    """With tp > 1, norms, residuals and dropout run on ``1/tp`` of the tokens (Megatron's SP)."""

    def __post_init__(self) -> None:
        for name in ("microbatch", "seq_len", "tp", "cp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.seq_len % self.cp:
            raise ValueError(f"cp: context parallelism {self.cp} does not divide seq_len {self.seq_len}")

    @property
    def tokens(self) -> int:
        """Tokens one chip holds outside attention: microbatch * seq_len / cp."""
        return self.microbatch * self.seq_len // self.cp


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective a block issues per microbatch on one of its parallel groups."""

    op: str
    """A ``collectives`` op name (``all_gather``, ``reduce_scatter``, ``all_reduce``, ``all_to_all``, ``send_recv``)."""
    group: str
    """The group it runs over: one of :data:`GROUPS`."""
    nbytes: int
    """S of one call, nccl-tests convention (``collectives.estimate``'s ``nbytes``)."""
    phase: str
    """``forward`` or ``backward``."""
    calls: int = 1
    """How many times it runs per microbatch in that phase (a ring's steps, say)."""
    overlap: str = "none"
    """What compute can hide it: ``column_gemm`` (TP all-gather before a column-parallel GEMM),
    ``row_gemm`` (TP reduce-scatter after a row-parallel GEMM), ``attention`` (CP ring exchange),
    ``expert_gemm`` (EP dispatch), ``none``."""

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"group: unknown group {self.group!r}; accepted: {', '.join(GROUPS)}")
        if self.phase not in ("forward", "backward"):
            raise ValueError(f"phase: expected 'forward' or 'backward', got {self.phase!r}")
        if self.overlap not in OVERLAPS:
            raise ValueError(f"overlap: unknown {self.overlap!r}; accepted: {', '.join(OVERLAPS)}")


@dataclass(frozen=True, slots=True)
class SavedTensor:
    """One activation autograd keeps from forward to backward."""

    nbytes: int
    shape: tuple[int, ...]
    gemm_input: bool
    """True when a matmul or attention op reads it (selective recompute keeps these)."""
    sequence_sharded: bool
    """True for hidden-sized activations that sequence parallelism divides by tp."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockProfile:
    """One block of a model, for one microbatch on one chip (shapes only; see the module doc)."""

    name: str
    """The block's name (``"embedding"``, ``"layers.3"``, ``"head"``, or the planner's)."""
    shard: Shard
    """The cut the profile was traced for."""
    forward: tuple[devices.cost.OpRecord, ...]
    """Aten ops of one forward."""
    backward: tuple[devices.cost.OpRecord, ...]
    """Aten ops of its backward (input and weight gradients)."""
    sequence_sharded: frozenset[int] = frozenset()
    """Indices into ``forward + backward`` of ops that sequence parallelism divides by tp (the
    traced shapes are the full sequence; the costing divides these ops' time by tp)."""
    params: int
    """Parameter elements one chip holds for this block (after TP and EP)."""
    expert_params: int = 0
    """Of which in MoE experts (data parallel over dp/ep chips instead of dp)."""
    param_bytes: int
    """Bytes of those parameters in the model's dtype."""
    saved: tuple[SavedTensor, ...] = ()
    """Activations kept from forward to backward (parameters excluded)."""
    input_bytes: int
    """The block's input activation per microbatch (all that full recompute keeps)."""
    output_bytes: int
    """Its output activation per microbatch (the pipeline send to the next stage)."""
    collectives: tuple[Collective, ...] = ()
    """Collectives per microbatch (TP, CP, EP)."""
    flops_scale: float = 1.0
    """How many chips' shards make the whole block (tp * cp for a sharded layer)."""
    model_flops: float = 0.0
    """Model FLOPs per microbatch for the whole (unsharded) block: 3 x the forward matmul and
    attention FLOPs times :attr:`flops_scale` (the MFU convention: recompute not counted)."""
    workspace: int = 0
    """Bytes of temporaries one forward and backward hold at their peak beyond the saved activations (the
    activation gradients, weight-gradient temporaries before they are accumulated); 0 when not measured."""
    note: str = ""
    """Modelling choices made for this block (MoE routing, kv-head replication, ...)."""
    host_reads: tuple[tuple[str, int], ...] = ()
    """``(phase, bytes)`` of each read of device data by the host per microbatch (a library's loop over its
    experts by ``offs.tolist()``): a copy over the chip's host link and a wait, priced on the rack by the step
    model (:data:`devices.cost.HOST_READ` records of the trace, set apart from :attr:`forward` and
    :attr:`backward`)."""

    def saved_bytes(self, mode: str = "none") -> int:
        """Activation bytes kept per microbatch under recompute ``mode`` (``none``/``selective``/``full``)."""
        tp = self.shard.tp if self.shard.sequence_parallel else 1
        if mode == "full":
            return self.input_bytes
        total = 0
        for t in self.saved:
            if mode == "selective" and not t.gemm_input:
                continue
            total += t.nbytes // tp if t.sequence_sharded else t.nbytes
        return total


def _storage_key(t) -> int:
    return t.untyped_storage()._cdata


class _Storages(devices.cost.OpObserver):
    """What a block's trace tells besides its op records, seen in the trace's own dispatch mode: which
    storages the forward's GEMMs read (selective recompute keeps those), and the most bytes the tensors the
    block makes hold at once (storages counted once, freed when their last tensor dies; the ``outside``
    storages, the parameters, their gradients and the inputs, not counted).

    A storage made in the trace is known by a serial number while it lives: the meta allocator hands a
    freed storage's address to the next one, so the address alone would confuse two tensors."""

    def __init__(self, outside: set[int]) -> None:
        self.outside = outside
        self.forward = True
        self.gemm_inputs: set = set()
        self.live: dict[int, list[int]] = {}
        """Storage key -> [serial, bytes, tensors alive on it]."""
        self.serial = 0
        self.current = self.peak = 0

    def ident(self, t) -> tuple:
        key = _storage_key(t)
        entry = self.live.get(key)
        return ("made", entry[0]) if entry is not None else ("held", key)

    def op(self, func, args, kwargs, out) -> None:
        import torch

        if self.forward and _category(func.name()) in GEMM_CATEGORIES:
            self.gemm_inputs.update(self.ident(a) for a in torch.utils._pytree.tree_leaves((args, kwargs))
                                    if isinstance(a, torch.Tensor))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._made(t)

    def _made(self, t) -> None:
        import weakref

        key = _storage_key(t)
        if key in self.outside:
            return
        entry = self.live.get(key)
        if entry is None:
            self.serial += 1
            entry = self.live[key] = [self.serial, t.untyped_storage().nbytes(), 0]
            self.current += entry[1]
            self.peak = max(self.peak, self.current)
        entry[2] += 1
        weakref.finalize(t, self._release, key, entry[0])

    def _release(self, key: int, serial: int) -> None:
        entry = self.live.get(key)
        if entry is not None and entry[0] == serial:
            entry[2] -= 1
            if entry[2] == 0:
                self.current -= entry[1]
                del self.live[key]


def trace_profile(name: str, block: Callable[..., Any], inputs: Sequence[Any], *, shard: Shard,
                  params: Iterable[Any], expert_params: Iterable[Any] = (), hidden_size: int | None = None,
                  collectives: Sequence[Collective] = (), grad_inputs: bool | Sequence[bool] = True,
                  model_flops_scale: float = 1.0, note: str = "", workspace: bool = False,
                  composites_of: str | None = None) -> BlockProfile:
    """Trace ``block(*inputs)`` forward and backward on the meta device into a :class:`BlockProfile`.

    ``inputs``: meta tensors (and other arguments) for one microbatch; the
    first tensor is the block's activation input. ``params``: the block's
    parameters (excluded from saved activations, counted in ``params``).
    ``hidden_size``: the model width; with ``shard.tp > 1`` and sequence
    parallelism, non-matmul ops on hidden-sized activations are marked
    sequence-sharded. ``model_flops_scale``: how many chips' shards make the
    whole block (tp, or 1 for a replicated block). ``grad_inputs``: whether the
    floating-point inputs require a gradient (one flag for all, or one per
    input, as the executed step differentiates them). ``workspace``: also measure,
    in the same trace, the most bytes alive at once and report what exceeds the
    saved activations as :attr:`BlockProfile.workspace`. ``composites_of``: the
    dispatch key of a backend whose composite kernels the trace expands as that
    backend does (:func:`devices.cost.trace_ops`).
    """
    import torch

    params = list(params)
    expert_params = list(expert_params)
    param_keys = {_storage_key(p) for p in params}
    saved: dict[tuple, tuple[int, tuple[int, ...]]] = {}
    boundary: list[int] = []
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    if first is None:
        raise ValueError(f"{name}: a block needs a tensor input")
    wants = [grad_inputs] * len(inputs) if isinstance(grad_inputs, bool) else list(grad_inputs)
    if len(wants) != len(inputs):
        raise ValueError(f"{name}: grad_inputs has {len(wants)} flags for {len(inputs)} inputs")
    meta_inputs = [x.detach().to("meta").requires_grad_(bool(want) and x.is_floating_point())
                   if isinstance(x, torch.Tensor) else x for x, want in zip(inputs, wants)]
    held = [t for t in params + [p.grad for p in params if p.grad is not None] + meta_inputs
            if isinstance(t, torch.Tensor)]
    storages = _Storages({_storage_key(t) for t in held})

    def pack(t):
        if _storage_key(t) not in param_keys:
            saved.setdefault(storages.ident(t), (t.untyped_storage().nbytes(), tuple(t.shape)))
        return t

    outputs: list[Any] = []

    def run(*args):
        # Each input enters through a view of its leaf: a gradient that reaches two inputs at once (a residual
        # add's) is one tensor, which the leaves' accumulation would copy, where between two blocks of a stage
        # it flows on as it is.
        args = [a.view_as(a) if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = block(*args)
            out_t = out[0] if isinstance(out, (tuple, list)) else out
            outputs.append(out_t)
            boundary.append(len(storages.records))
            storages.forward = False
            del out
            # Saved tensors stay the packed Python objects until their node's backward frees them.
            if out_t.requires_grad:
                torch.autograd.backward(out_t, torch.empty_like(out_t))

    records = devices.cost.trace_ops(run, *meta_inputs, observer=storages, composites_of=composites_of)
    host_reads = tuple(("forward" if i < boundary[0] else "backward", r.shapes[0][0])
                       for i, r in enumerate(records) if r.op == devices.cost.HOST_READ)
    forward = tuple(r for r in records[:boundary[0]] if r.op != devices.cost.HOST_READ)
    backward = tuple(r for r in records[boundary[0]:] if r.op != devices.cost.HOST_READ)

    tp = shard.tp
    saved_list = tuple(
        SavedTensor(nbytes, shape, ident in storages.gemm_inputs,
                    bool(hidden_size and tp > 1 and shape and shape[-1] == hidden_size))
        for ident, (nbytes, shape) in saved.items())
    sequence_sharded: set[int] = set()
    if hidden_size and tp > 1 and shard.sequence_parallel:
        for i, r in enumerate(forward + backward):
            if _category(r.op) in GEMM_CATEGORIES:
                continue
            if any(s and s[-1] == hidden_size for s in r.shapes + (r.out_shapes or ())):
                sequence_sharded.add(i)
    out_t = outputs[0]
    profile = BlockProfile(
        name=name, shard=shard, forward=forward, backward=backward, sequence_sharded=frozenset(sequence_sharded),
        params=sum(p.numel() for p in params), expert_params=sum(p.numel() for p in expert_params),
        param_bytes=sum(p.numel() * p.element_size() for p in params), saved=saved_list,
        input_bytes=_activation_bytes(first, shard, hidden_size),
        output_bytes=_activation_bytes(out_t, shard, hidden_size),
        collectives=tuple(collectives), flops_scale=model_flops_scale,
        model_flops=3.0 * gemm_flops(forward) * model_flops_scale, note=note, host_reads=host_reads)
    if workspace:
        profile = dataclasses.replace(profile, workspace=max(0, storages.peak - profile.saved_bytes("none")))
    return profile


def _activation_bytes(t, shard: Shard, hidden_size: int | None) -> int:
    # A hidden-sized activation between blocks is sequence-sharded under SP.
    nbytes = t.numel() * t.element_size()
    if shard.sequence_parallel and shard.tp > 1 and hidden_size and t.dim() and t.shape[-1] == hidden_size:
        return nbytes // shard.tp
    return nbytes


GEMM_CATEGORIES = ("matmul", "attention", "attention_backward", "attention_math")
"""Cost-model op families that count as model FLOPs (and whose inputs selective recompute keeps)."""


def gemm_flops(records) -> float:
    """FLOPs of the matmul and attention ops among ``records`` (FLOPs do not depend on the chip kind)."""
    total = 0.0
    for r in records:
        if _category(r.op) in GEMM_CATEGORIES:
            total += devices.estimate(_FLOPS_KIND, r.op, r.shapes, r.dtype, out_shapes=r.out_shapes,
                                      args=r.args).flops
    return total


_FLOPS_KIND = "h100"  # any catalogued kind: an op's FLOP count is the same on every chip


def _category(op: str) -> str:
    """The cost model's op family for an op name (``matmul``, ``attention``, ``elementwise``...)."""
    return devices.cost.classify(op)[0]


__all__ = ["GEMM_CATEGORIES", "GROUPS", "OVERLAPS", "BlockProfile", "Collective", "SavedTensor", "Shard",
           "gemm_flops", "trace_profile"]
