"""The eager engine: the batched generate ``interop.serve`` runs for real, and the same code priced op by op.

One engine, two executions. The functions here (:func:`prefill`, :func:`merge`,
:func:`step`, :func:`compact`) are what ``interop.serve`` runs on the rack's slots with
a transformers causal LM: a whole prompt per prefill, sequences joining a decode batch
whose KV cache is left-padded to its longest sequence (a 4-D mask marks the real
positions), one decode step per iteration for every sequence, finished sequences
compacted out. Every branch depends on shapes only, never on tensor values, and nothing
crosses from the host while serving. :class:`EagerCost` runs the same functions on the
meta device (the model built from its config, no weight materialised), records the aten
ops they dispatch and prices each as the rack's timeline does (``devices.estimate`` of
the op, launch overhead included): the what-if's iteration times are the executed ones'
by construction, up to the cost model's lookups. torch and transformers are imported
only inside these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import devices
from planner.serving.iteration import PARTS, Placement
from planner.serving.model_shape import ModelShape
from planner.serving.precision import Precision


@dataclass(slots=True)
class Batch:
    """A decode batch on one slot: per layer keys and values ``(B, kv heads, P, head dim)`` left-padded to
    ``P``, which positions are real ``(B, P)``, and each row's last token (the next input) ``(B,)``."""

    keys: list
    values: list
    valid: Any
    tokens: Any

    @property
    def size(self) -> int:
        return int(self.valid.shape[0])

    @property
    def padded(self) -> int:
        return int(self.valid.shape[1])


def kv_geometry(config) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a transformers config's KV cache."""
    heads = int(getattr(config, "num_attention_heads", None) or config.n_head)
    hidden = int(getattr(config, "hidden_size", None) or config.n_embd)
    kv = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    layers = int(getattr(config, "num_hidden_layers", None) or config.n_layer)
    return layers, kv, head_dim


def _cache(model, keys: Sequence, values: Sequence):
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=model.config)
    for layer, k, v in zip(cache.layers, keys, values):
        # Filled in place: building the cache from tensors would concatenate each onto an empty one.
        layer.keys, layer.values, layer.is_initialized = k, v, True
        layer.device, layer.dtype = k.device, k.dtype
    return cache


def _cache_argument(model) -> str:
    """The name the model's forward takes its KV cache by (``cache``; ``past_key_values`` before transformers 5.2x)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def prefill(model, ids) -> tuple[list, list, Any]:
    """One prompt ``ids`` ``(1, L)`` through ``model`` on its slot: (keys, values, first token ``(1,)``)."""
    import torch

    layers, kv, head_dim = kv_geometry(model.config)
    dtype = next(model.parameters()).dtype
    empty = [torch.empty(1, kv, 0, head_dim, dtype=dtype, device=ids.device) for _ in range(2 * layers)]
    cache = _cache(model, empty[:layers], empty[layers:])
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{_cache_argument(model): cache})
        token = out.logits[:, -1, :].argmax(-1)
    return [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers], token


def _pad_left(x, n: int):
    import torch.nn.functional as F

    if n == 0:
        return x
    return F.pad(x, (0, 0, n, 0)) if x.dim() == 4 else F.pad(x, (n, 0))


def merge(batch: Batch | None, joining: Sequence[tuple[list, list, Any]]) -> Batch:
    """``joining`` sequences (keys, values, token on the batch's slot) added to ``batch`` (None: a new one)."""
    import torch

    lengths = [int(keys[0].shape[-2]) for keys, _, _ in joining]
    old = batch.padded if batch is not None else 0
    padded = max([old] + lengths)
    device = joining[0][0][0].device
    layers = len(joining[0][0])
    keys, values = [], []
    for i in range(layers):
        for out, pick in ((keys, 0), (values, 1)):
            parts = [_pad_left((batch.keys if pick == 0 else batch.values)[i], padded - old)] if batch else []
            parts += [_pad_left(j[pick][i], padded - n) for j, n in zip(joining, lengths)]
            out.append(torch.cat(parts, 0))
    valid = [_pad_left(batch.valid, padded - old)] if batch else []
    valid += [_pad_left(torch.ones(1, n, dtype=torch.bool, device=device), padded - n) for n in lengths]
    tokens = ([batch.tokens] if batch else []) + [j[2] for j in joining]
    return Batch(keys, values, torch.cat(valid, 0), torch.cat(tokens, 0))


def step(model, batch: Batch) -> Batch:
    """One decode step of every sequence of ``batch``: their next tokens, the cache one position longer."""
    import torch

    with torch.no_grad():
        positions = batch.valid.sum(-1, keepdim=True)
        valid = torch.cat([batch.valid, torch.ones(batch.size, 1, dtype=torch.bool, device=batch.valid.device)], 1)
        cache = _cache(model, batch.keys, batch.values)
        out = model(input_ids=batch.tokens[:, None], attention_mask=valid[:, None, None, :], position_ids=positions,
                    use_cache=True, logits_to_keep=1, **{_cache_argument(model): cache})
        tokens = out.logits[:, -1, :].argmax(-1)
    return Batch([layer.keys for layer in cache.layers], [layer.values for layer in cache.layers], valid, tokens)


def compact(batch: Batch, runs: Sequence[tuple[int, int]], padded: int) -> Batch:
    """The rows of ``runs`` (``[start, stop)`` ranges, in order) of ``batch``, left padding cut to ``padded``."""
    import torch

    cut = batch.padded - padded

    def rows(x, cache: bool):
        parts = [x.narrow(0, a, b - a) for a, b in runs]
        if cut:
            parts = [p[:, :, cut:] if cache else p[:, cut:] for p in parts]
        return torch.cat(parts, 0)

    return Batch([rows(k, True) for k in batch.keys], [rows(v, True) for v in batch.values],
                 rows(batch.valid, False), torch.cat([batch.tokens.narrow(0, a, b - a) for a, b in runs], 0))


def runs_of(keep: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal ``[start, stop)`` runs of True in ``keep``."""
    out, start = [], None
    for i, k in enumerate(list(keep) + [False]):
        if k and start is None:
            start = i
        elif not k and start is not None:
            out.append((start, i))
            start = None
    return out


# -- pricing the same code on the meta device ------------------------------------------------


def _sdpa_mode():
    """Attention on meta dispatched as the CPU's chooser dispatches it on an emulated slot (its fused kernel
    where it takes the inputs, else the unfused path)."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import _disable_current_modes

    class CpuAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not F.scaled_dot_product_attention or args[0].device.type != "meta":
                return func(*args, **kwargs)
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            dropout = kwargs.get("dropout_p", 0.0)
            causal = kwargs.get("is_causal", False)
            scale = kwargs.get("scale")
            gqa = kwargs.get("enable_gqa", False)

            def shadow(t):  # the chooser reads metadata only: one row of the batch on the CPU
                return None if t is None else torch.empty((1,) + tuple(t.shape[1:]), dtype=t.dtype)

            with _disable_current_modes():  # the chooser is not an op of the slot
                choice = torch._fused_sdp_choice(shadow(q), shadow(k), shadow(v), shadow(mask), dropout, causal,
                                                 scale=scale, enable_gqa=gqa)
            if choice == int(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                if mask is not None and mask.dtype == torch.bool:
                    # as the composite turns a boolean mask into an additive one before the fused kernel
                    neg = torch.scalar_tensor(float("-inf"), dtype=q.dtype, device=q.device)
                    zero = torch.scalar_tensor(0.0, dtype=q.dtype, device=q.device)
                    mask = torch.where(mask, zero, neg)
                return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, dropout, causal, attn_mask=mask, scale=scale)[0]
            return func(*args, **kwargs)

    return CpuAttention


_KEEP = frozenset({"aten::copy_", "aten::_copy_from"})
"""Composite ops a slot records as one item (a copy)."""


def trace_slot_ops(fn, *args) -> list:
    """The ops ``fn(*args)`` dispatches on meta, recorded as a CPU-emulated slot's timeline records them: an op
    without a kernel of its own on the slot (a ``CompositeExplicitAutograd`` one, such as ``constant_pad_nd``,
    ``_to_copy`` or ``ones``) runs its decomposition there, so its constituents are recorded, not it; attention
    as the CPU's chooser dispatches it (:func:`_sdpa_mode`)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from devices.cost.meta_trace import balanced_offsets, make_record

    composite = torch._C.DispatchKey.CompositeExplicitAutograd
    has = torch._C._dispatch_has_kernel_for_dispatch_key

    class SlotRecorder(TorchDispatchMode):
        def __init__(self, records: list) -> None:
            super().__init__()
            self.records = records

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.name()
            if name not in _KEEP and has(name, "CompositeExplicitAutograd") and not has(name, "PrivateUse1"):
                # a grouped matmul's composite loops over its groups by offs, which meta tensors cannot give
                balanced = balanced_offsets(func, args, kwargs)
                if balanced is not None:
                    args, kwargs, _ = balanced
                before = len(self.records)
                try:
                    with SlotRecorder(self.records):
                        return func._op_dk(composite, *args, **kwargs)
                except NotImplementedError:
                    # a part with no meta kernel (convolution's composite reaches convolution_overrideable, which
                    # the slot runs as the CPU's convolution): the op recorded whole, by its own meta kernel
                    del self.records[before:]
            out = func(*args, **kwargs)
            self.records.append(make_record(func, args, kwargs, out))
            return out

    records: list = []
    with _sdpa_mode()(), SlotRecorder(records):
        fn(*args)
    return records


class EagerCost:
    """Seconds of the eager engine's operations on one slot, traced on meta and priced op by op."""

    def __init__(self, shape: ModelShape, kind: str, precision: Precision, placement: Placement, spec) -> None:
        if len(placement.slots) != 1:
            raise ValueError(f"kernels: the eager engine runs each instance on one slot; got tp {placement.tp} x pp "
                             f"{placement.pp} x ep {placement.ep}")
        self.shape, self.kind, self.precision, self.spec = shape, kind, precision, spec
        self.slot = placement.slots[0]
        self.projected = devices.chip(kind).projected
        self._model = None
        self._memo: dict[tuple, dict] = {}

    def figures(self) -> tuple:
        return ()

    # -- tracing ------------------------------------------------------------------------------

    def model(self):
        """The model on the meta device, in the precision's dtype."""
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            config = self.shape.blocks.config
            with torch.device("meta"):
                self._model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, self._dtype())).eval()
        return self._model

    def _dtype(self) -> str:
        return "float32" if self.precision.name == "float32" else "bfloat16"

    def _meta_kv(self, batch: int, length: int):
        import torch

        layers, kv, head_dim = kv_geometry(self.model().config)
        dtype = getattr(torch, self._dtype())
        make = lambda: [torch.empty(batch, kv, length, head_dim, dtype=dtype, device="meta") for _ in range(layers)]
        return make(), make()

    def _meta_batch(self, size: int, padded: int) -> Batch:
        import torch

        keys, values = self._meta_kv(size, padded)
        return Batch(keys, values, torch.empty(size, padded, dtype=torch.bool, device="meta"),
                     torch.empty(size, dtype=torch.long, device="meta"))

    def _traced(self, key: tuple, fn, make_inputs) -> dict:
        """``fn(*make_inputs())`` traced on meta (model and inputs built before: not ops of the slot), priced."""
        hit = self._memo.get(key)
        if hit is None:
            try:
                self.model()
                records = trace_slot_ops(fn, *make_inputs())
            except (ValueError, KeyboardInterrupt, MemoryError):
                raise
            except Exception as error:  # the family's own modules fail on meta (a host read, a config it lacks)
                raise ValueError(f"kernels: the eager engine cannot trace {self.shape.name}'s forward on the meta "
                                 f"device ({type(error).__name__}: {' '.join(str(error).split())[:300]}); "
                                 f"kernels='fused' prices its layers from their shapes") from error
            hit = self._memo[key] = self._price(records)
        return hit

    def _price(self, records) -> dict:
        parts = dict.fromkeys(PARTS, 0.0)
        for r in records:
            # As the rack's timeline prices a recorded op (interop.record_costs.RecordCoster.op): shapes, dtype, causality.
            args = {"is_causal": True} if r.args.get("is_causal") else None
            e = devices.estimate(self.kind, r.op, r.shapes, r.dtype or "float32", out_shapes=r.out_shapes, args=args)
            if e.seconds <= 0:
                continue
            roof = e.seconds - e.overhead_seconds
            parts["compute" if e.compute_seconds >= e.memory_seconds else "memory"] += roof
            parts["overhead"] += e.overhead_seconds
        return parts

    # -- the simulation's questions -------------------------------------------------------------

    def prefill_parts(self, length: int) -> dict:
        import torch

        return self._traced(("prefill", length), lambda ids: prefill(self.model(), ids),
                            lambda: (torch.empty(1, length, dtype=torch.long, device="meta"),))

    def decode_parts(self, size: int, padded: int) -> dict:
        return self._traced(("step", size, padded), lambda batch: step(self.model(), batch),
                            lambda: (self._meta_batch(size, padded),))

    def prefill(self, chunks, sampled: int) -> float:
        if len(chunks) != 1 or chunks[0][1] != 0:
            raise ValueError("the eager engine prefills one whole prompt per iteration")
        return sum(self.prefill_parts(chunks[0][0]).values())

    def mixed(self, chunks, batch: int, kv_tokens: int, sampled: int) -> float:
        raise ValueError("the eager engine does not mix prefill and decode (it serves disaggregated)")

    def decode(self, batch: int, kv_tokens: int, padded: int) -> float:
        return sum(self.decode_parts(batch, padded).values())

    def join(self, batch: int, padded: int, lengths) -> float:
        import torch

        def inputs():
            joining = []
            for n in lengths:
                keys, values = self._meta_kv(1, n)
                joining.append((keys, values, torch.empty(1, dtype=torch.long, device="meta")))
            return (self._meta_batch(batch, padded) if batch else None, joining)

        return sum(self._traced(("join", batch, padded, tuple(lengths)), merge, inputs).values())

    def leave(self, batch: int, padded: int, kept: int, kept_padded: int) -> float:
        # A compaction costs the same whatever rows are kept: one copy of the kept rows per tensor.
        return sum(self._traced(("leave", batch, padded, kept, kept_padded),
                                lambda old: compact(old, [(0, kept)], kept_padded),
                                lambda: (self._meta_batch(batch, padded),)).values())

    def transfer_messages(self, length: int) -> list[int]:
        """Bytes of each copy moving one request's KV cache (keys and values per layer) and its first token."""
        layers, kv, head_dim = kv_geometry(self.model().config)
        per = kv * length * head_dim * devices.itemsize(self._dtype())
        return [per] * (2 * layers) + [8]

    def parts(self, prefill_tokens: int, prefill_pairs: float, decode_seqs: int, decode_kv: int,
              sampled: int) -> dict:
        if prefill_tokens:
            return dict(self.prefill_parts(prefill_tokens))
        padded = max(1, round(decode_kv / max(1, decode_seqs)))
        return dict(self.decode_parts(decode_seqs, padded))


__all__ = ["Batch", "EagerCost", "compact", "kv_geometry", "merge", "prefill", "runs_of", "step", "trace_slot_ops"]
