"""Gather the ops a model would run, on the meta device, without running anything.

:func:`trace_ops` runs ``fn`` on meta tensors (shapes and dtypes only, no
data, no kernels) under a ``TorchDispatchMode`` that records every aten op
that reaches the dispatcher.  torch is imported only when it is called.

Lowering: a few composite ops decompose differently by device.  On meta,
``F.scaled_dot_product_attention`` falls back to the unfused math path and
``F.rms_norm`` to a chain of elementwise ops, where a GPU runs one fused
kernel each.  With ``lower=True`` (the default) the trace records what a GPU
runs: the flash (or memory-efficient) SDPA kernels with their backward, and
``_fused_rms_norm`` with ``_fused_rms_norm_backward``.

One dispatch mode: a caller that wants more from the same trace than the op
records (which storages an op reads, the bytes alive at once) passes an
:class:`OpObserver`, which sees every dispatched op inside the recorder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from devices.dtypes import dtype_name

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One op as the cost model takes it (the arguments of :func:`devices.cost.estimate`)."""

    op: str
    """``"aten::name"`` or ``"aten::name.overload"``."""
    shapes: tuple[Shape, ...]
    """Input tensor shapes in argument order (tensor lists flattened, scalars omitted)."""
    dtype: str
    """The op's compute dtype: its first floating-point input's (else its first tensor's)."""
    out_shapes: tuple[Shape, ...] | None = None
    """Output tensor shapes."""
    args: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    """Non-tensor arguments by schema name, as plain values (dtypes by name)."""


class OpObserver:
    """Sees every op a :func:`trace_ops` trace dispatches, right after it ran, in the trace's own dispatch
    mode: recorded ops and the helper ops a lowering runs unrecorded alike. Subclasses override :meth:`op`."""

    records: list[OpRecord]
    """The trace's records so far (set by :func:`trace_ops` before ``fn`` runs): ``len(records)`` splits a
    trace into phases."""

    def op(self, func: Any, args: tuple, kwargs: Mapping[str, Any], out: Any) -> None:
        """Called with each dispatched ``OpOverload``, its arguments and its output."""


def trace_ops(fn: Callable[..., Any], *args: Any, lower: bool = True, observer: OpObserver | None = None,
              composites_of: str | None = None, **kwargs: Any) -> list[OpRecord]:
    """Run ``fn(*args, **kwargs)`` on the meta device and return the aten ops it dispatched.

    Tensor arguments are moved to meta first (leaf copies keeping
    ``requires_grad``), so nothing heavy runs.  Build modules under
    ``with torch.device("meta"):`` so their parameters are meta as well; a
    module with real parameters would run real kernels.  ``fn`` may call
    ``.backward()``: the backward ops are recorded too.  ``observer``: an
    :class:`OpObserver` that sees the same ops (see the module doc).
    """
    import torch
    from torch.utils._pytree import tree_map

    def to_meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            return x.detach().to("meta").requires_grad_(x.requires_grad)
        return x

    args, kwargs = tree_map(to_meta, (args, kwargs))
    recorder = _recorder_class()(observer, composites_of)
    if observer is not None:
        observer.records = recorder.records
    if lower:
        with _lowering_class()(recorder), recorder:
            fn(*args, **kwargs)
    else:
        with recorder:
            fn(*args, **kwargs)
    return recorder.records


def _plain(value: Any) -> Any:
    import torch

    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _SKIP if any(v is _SKIP for v in items) else tuple(items)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    return _SKIP  # devices, layouts, memory formats, generators: no bearing on cost


_SKIP = object()


def make_record(func: Any, args: tuple, kwargs: Mapping[str, Any], out: Any) -> OpRecord:
    """The :class:`OpRecord` of one dispatched call of an ``OpOverload``."""
    import torch
    from torch.utils._pytree import tree_flatten

    schema = func._schema
    op = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    inputs = [t for t in tree_flatten((args, dict(kwargs)))[0] if isinstance(t, torch.Tensor)]
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    named: dict[str, object] = {}
    for i, arg in enumerate(schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name, _SKIP)
        if value is _SKIP or isinstance(value, torch.Tensor):
            continue
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            continue
        plain = _plain(value)
        if plain is not _SKIP:
            named[arg.name] = plain
    floating = [t for t in inputs if t.is_floating_point()]
    if floating or inputs:
        dtype = (floating or inputs)[0].dtype
    else:
        dtype = kwargs.get("dtype") or (outputs[0].dtype if outputs else torch.float32)
    return OpRecord(
        op=op,
        shapes=tuple(tuple(int(d) for d in t.shape) for t in inputs),
        dtype=dtype_name(dtype),
        out_shapes=tuple(tuple(int(d) for d in t.shape) for t in outputs),
        args=MappingProxyType(named),
    )


def _runs_composite(func: Any, key: str, memo: dict) -> bool:
    """Whether the backend ``key`` runs ATen op ``func`` through its composite kernel (it has none of its own).
    Other namespaces keep their own meta kernels: a library's custom op may register a Python composite
    that needs data (transformers' grouped-mm fallback)."""
    hit = memo.get(func)
    if hit is None:
        import torch

        name = func.name()
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        hit = memo[func] = func.namespace == "aten" and not has(name, key) and (
            has(name, "CompositeExplicitAutograd") or has(name, "CompositeExplicitAutogradNonFunctional"))
    return hit


HOST_READ = "hybrid::host_read"
"""The op of a record that stands for device data read by the host (``offs.tolist()`` in a library's loop): a
copy to the host over the slot's link, and a wait for it. ``shapes`` is ``((nbytes,),)``. The cost model does
not price it (it is no kernel of the chip's); :func:`planner.profile.trace_profile` sets such records apart."""

_HOST_READS = ("tolist", "item", "numpy", "__int__", "__index__", "__float__", "__bool__")


def balanced_offsets(func: Any, args: tuple, kwargs: Mapping[str, Any]):
    """``(args, kwargs, ends)`` of a grouped matmul with the convention of ``torch._grouped_mm`` (a 2-D first input,
    ``offs`` its groups' cumulative integer row ends) whose ``offs`` are replaced by ``ends``, the rows split evenly
    over the groups on the host: balanced routing, the assumption the what-ifs make of the experts
    (planner/decoder_blocks.py), standing in for routed offsets a meta tensor cannot give; None for any other op."""
    import torch

    names = [a.name for a in func._schema.arguments]
    if "offs" not in names:
        return None
    where = names.index("offs")
    offs = args[where] if where < len(args) else kwargs.get("offs")
    first = args[0] if args else None
    if (not isinstance(offs, torch.Tensor) or offs.dim() != 1 or offs.is_floating_point()
            or not isinstance(first, torch.Tensor) or first.dim() != 2 or offs.numel() == 0):
        return None
    groups, rows = offs.numel(), first.shape[0]
    ends = torch.tensor([(i + 1) * rows // groups for i in range(groups)], dtype=offs.dtype)
    if where < len(args):
        return args[:where] + (ends,) + args[where + 1:], kwargs, ends
    return args, {**kwargs, "offs": ends}, ends


def _balanced_loop(func: Any, args: tuple, kwargs: Mapping[str, Any]):
    """``(implementation, args, kwargs, offs)`` to trace a library's grouped matmul the way a slot runs it, or
    None (``offs``: the balanced offsets standing in for the routed ones: :func:`balanced_offsets`).

    A custom op (not ATen) over row groups whose implementation is Python (a ``torch.library.custom_op``):
    transformers' ``grouped_mm_fallback`` and its backward loop over the groups with one matmul each, by
    ``offs.tolist()``, which meta tensors cannot give. The slot runs that loop, so the trace runs it too, with
    balanced offsets. Each read of the offsets to the host is recorded as a :data:`HOST_READ`: on a slot it is a
    copy to the host and a wait."""
    from torch._library.custom_ops import _maybe_get_opdef

    if func.namespace == "aten":
        return None
    opdef = _maybe_get_opdef(func)
    balanced = balanced_offsets(func, args, kwargs) if opdef is not None else None
    if balanced is None:
        return None
    args, kwargs, ends = balanced
    return opdef._init_fn, args, kwargs, ends


def _recorder_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        """Records every op that reaches the dispatcher, then runs it (on meta: shapes only)."""

        def __init__(self, observer: OpObserver | None = None, composites_of: str | None = None) -> None:
            super().__init__()
            self.records: list[OpRecord] = []
            self.paused = 0
            self.observer = observer
            self.composites_of = composites_of
            self.keyset = (torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, composites_of))
                           if composites_of else None)
            self.memo: dict = {}
            self.expanding: list = []  # a composite that calls itself runs as one op

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            loop = (_balanced_loop(func, args, kwargs) if self.keyset is not None and func not in self.expanding
                    else None)
            if loop is not None:
                out = self._run_loop(func, *loop)
                if out is not None:
                    return out
            if (self.keyset is not None and func not in self.expanding
                    and _runs_composite(func, self.composites_of, self.memo)):
                self.expanding.append(func)
                before = len(self.records)
                try:
                    with self:  # the composite's parts dispatch (and are recorded) like any op
                        out = func.redispatch(self.keyset, *args, **kwargs)
                    expanded = len(self.records) > before or self.paused
                except NotImplementedError:
                    # A part the backend implements has no meta kernel (convolution's composite reaches
                    # convolution_overrideable, as on any backend that is neither CPU nor CUDA, and the slot's
                    # kernel runs the CPU's convolution): the outermost composite is recorded whole, by its own
                    # meta kernel.
                    if len(self.expanding) > 1:
                        raise
                    del self.records[before:]
                    out, expanded = func(*args, **kwargs), False
                finally:
                    self.expanding.pop()
                if expanded:
                    return out
                # Nothing dispatched: the composite has a meta shortcut (copy_ into a meta tensor returns at
                # once), so the op is recorded as itself, as the backend records it.
            else:
                out = func(*args, **kwargs)
            if not self.paused:
                self.records.append(make_record(func, args, kwargs, out))
            if self.observer is not None:
                self.observer.op(func, args, kwargs, out)
            return out

        def _run_loop(self, func, implementation, args, kwargs, offs):
            """The loop's parts and its reads of ``offs`` to the host, recorded; None (nothing recorded) when the
            implementation fails on meta."""
            self.expanding.append(func)
            before = len(self.records)
            try:
                with self, _host_reads_of(offs, self.records):
                    return implementation(*args, **kwargs)
            except Exception:  # noqa: BLE001 -- a loop that needs more than offs: recorded as one op
                del self.records[before:]
                return None
            finally:
                self.expanding.pop()

    return Recorder


def _host_reads_of(data: Any, records: list[OpRecord]):
    """A mode that records a :data:`HOST_READ` each time ``data`` (or a view of it) is read to the host."""
    import torch
    from torch.overrides import TorchFunctionMode

    storage = data.untyped_storage().data_ptr()
    reads = {getattr(torch.Tensor, name) for name in _HOST_READS}

    class HostReads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            t = args[0] if args else None
            if (func in reads and isinstance(t, torch.Tensor) and t.device.type == "cpu"
                    and t.untyped_storage().data_ptr() == storage):
                nbytes = t.numel() * t.element_size()
                records.append(OpRecord(HOST_READ, ((nbytes,),), "uint8", ((nbytes,),)))
            return func(*args, **(kwargs or {}))

    return HostReads()


def _lowering_class() -> type:
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class FusedRMSNorm(torch.autograd.Function):
        # On meta there is no data, so the forward only has to produce the
        # right shapes; the backward calls the real aten op (it has a meta kernel).
        @staticmethod
        def forward(ctx, x, weight, normalized_shape, eps, recorder):
            recorder.paused += 1
            try:
                out = torch.empty_like(x)
                stat = x.shape[: x.dim() - len(normalized_shape)] + (1,) * len(normalized_shape)
                # CUDA keeps rstd in float for reduced-precision inputs.
                rstd = torch.empty(stat, dtype=torch.float32 if x.element_size() < 4 else x.dtype, device=x.device)
            finally:
                recorder.paused -= 1
            shapes = (tuple(x.shape),) + ((tuple(weight.shape),) if weight is not None else ())
            recorder.records.append(OpRecord(
                "aten::_fused_rms_norm", shapes, dtype_name(x.dtype),
                (tuple(out.shape), tuple(rstd.shape)),
                MappingProxyType({"normalized_shape": tuple(normalized_shape), "eps": eps})))
            ctx.save_for_backward(x, weight, rstd)
            ctx.normalized_shape = list(normalized_shape)
            return out

        @staticmethod
        def backward(ctx, grad):
            x, weight, rstd = ctx.saved_tensors
            mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[1]]
            gx, gw = torch.ops.aten._fused_rms_norm_backward(grad, x, ctx.normalized_shape, rstd, weight, mask)
            return gx, gw, None, None, None

    def _fused_kernel_takes(query, key, value, *args, enable_gqa=False, **kwargs):
        # Key/value heads that differ from the query's without enable_gqa broadcast (Falcon's multi-query
        # attention passes one key head): every fused kernel, CUDA's and the CPU's, refuses that, so CUDA and
        # a slot both run the math path, which meta records as it is.
        return enable_gqa or key.dim() < 3 or key.shape[-3] == query.shape[-3]

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if (attn_mask is None and query.dtype in (torch.float16, torch.bfloat16)
                and query.shape[-1] <= 256 and value.shape[-1] == query.shape[-1]):
            # What CUDA picks for half precision without a mask: FlashAttention-2,
            # which handles grouped-query attention natively. Value heads narrower than the query's
            # (multi-head latent attention: 128 against 192) it refuses; CUDA picks the
            # memory-efficient kernel, which takes them.
            return torch.ops.aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, scale=scale)[0]
        if key.shape[-3] != query.shape[-3]:
            # The memory-efficient kernel needs equal head counts: repeat K/V as torch does.
            groups = query.shape[-3] // key.shape[-3]
            key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                attn_mask.logical_not(), float("-inf"))
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]

    class Lowering(TorchFunctionMode):
        """Replaces device-dependent composites by the kernels a GPU runs (see module doc)."""

        def __init__(self, recorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
            on_meta = bool(tensors) and all(t.device.type == "meta" for t in tensors)
            if on_meta and func is F.scaled_dot_product_attention and _fused_kernel_takes(*args, **kwargs):
                return sdpa(*args, **kwargs)
            if on_meta and func is F.rms_norm:
                return _rms_norm(self.recorder, *args, **kwargs)
            return func(*args, **kwargs)

    def _rms_norm(recorder, input, normalized_shape, weight=None, eps=None):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        return FusedRMSNorm.apply(input, weight, shape, eps, recorder)

    return Lowering
