"""What ``device`` numerics mode does to an op on a slot (see :mod:`interop.numerics.slots.mode`).

A Trainium engine computes in float32 and rounds each result once on its way out,
stochastically when the runtime enables it (Neuron: "stochastic rounding instead
of round-nearest-even for all internal rounding operations when casting from
FP32 to a reduced precision data type"). The CPU kernel behind a slot rounds the
same float32 value to nearest. So for an op with low-precision floating results
on such a slot, this mode runs the op as usual (one record on the timeline, the
slot's allocator, the autograd graph untouched), computes the same op in float32
on CPU aliases of its inputs (inputs it overwrites are copied first), and writes
the stochastically rounded float32 results over the op's results, in place.
Views, random ops and ops without low-precision results pass through.
"""

from __future__ import annotations

import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from interop.numerics.maths.quantize import quantize
from interop.numerics.slots.settings import SlotCounters, state

_FORMAT_OF = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float8_e4m3fn: "float8_e4m3fn",
              torch.float8_e5m2: "float8_e5m2"}
_NAME_OF = {name: dtype for dtype, name in _FORMAT_OF.items()}


def _alias(t: torch.Tensor) -> torch.Tensor:
    from interop import _C

    return _C._execution_alias(t, "an op in the device numerics mode")


def _hybrid_slot(args, kwargs) -> int | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.device.type == "hybrid":
                return value.device.index
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor) and item.device.type == "hybrid":
                    return item.device.index
    return None


@functools.lru_cache(maxsize=None)
def _shape_of(func) -> tuple[bool, tuple[int, ...], tuple[bool, ...]]:
    """(passes through, indices of written arguments, which returns alias an input) for an op overload."""
    schema = func._schema
    random = torch.Tag.nondeterministic_seeded in func.tags
    views = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    written = tuple(i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write)
    aliased = tuple(r.alias_info is not None for r in schema.returns)
    return random or views or not schema.returns and not written, written, aliased


def _low_precision(t, dtypes) -> bool:
    """A result this mode rounds: low precision, on a slot (a copy back to the host is exact)."""
    return isinstance(t, torch.Tensor) and t.dtype in dtypes and t.device.type == "hybrid"


def _snapshot(value, dtypes):
    """A float32 (or same-dtype) CPU copy of a written argument, taken before the op overwrites it."""
    if isinstance(value, torch.Tensor):
        source = _alias(value) if value.device.type == "hybrid" else value
        return source.to(torch.float32 if value.dtype in dtypes else value.dtype, copy=True)
    if isinstance(value, (list, tuple)):
        return [_snapshot(v, dtypes) for v in value]
    return value


def _upcast(value, dtypes):
    if isinstance(value, torch.Tensor):
        source = _alias(value) if value.device.type == "hybrid" else value
        return source.float() if value.dtype in dtypes else source
    if isinstance(value, torch.dtype):
        return torch.float32 if value in dtypes else value
    if isinstance(value, (list, tuple)):
        return type(value)(_upcast(v, dtypes) for v in value)
    return value


class DeviceNumericsMode(TorchDispatchMode):
    """Sees every op while a slot of the current rack is in device mode (installed by :func:`install`)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        slot = _hybrid_slot(args, kwargs)
        if slot is None:
            return func(*args, **kwargs)
        rack_state = state()
        if slot >= len(rack_state.slots):
            return func(*args, **kwargs)
        settings = rack_state.slots[slot]
        if settings.mode != "device":
            return func(*args, **kwargs)
        if settings.strict:
            _check_supported(func, args, kwargs, settings)
        names = settings.stochastic_dtypes
        passes, written, aliased = _shape_of(func)
        if not names or passes:
            return func(*args, **kwargs)
        dtypes = {_NAME_OF[n] for n in names if n in _NAME_OF}
        return _rounded(func, args, kwargs, dtypes, written, aliased, rack_state, slot)


def _rounded(func, args, kwargs, dtypes, written, aliased, rack_state, slot):
    names = [a.name for a in func._schema.arguments]
    positional = len(args)
    snapshots = {}
    for i in written:
        value = args[i] if i < positional else kwargs.get(names[i])
        if value is not None:
            snapshots[i] = _snapshot(value, dtypes)
    out = func(*args, **kwargs)

    pairs = []
    for i, snap in snapshots.items():
        pairs.append((args[i] if i < positional else kwargs[names[i]], snap))
    outs = out if isinstance(out, (tuple, list)) and len(aliased) > 1 else (out,)
    fresh = [k for k, is_alias in enumerate(aliased) if not is_alias]
    if not pairs and not any(_low_precision(outs[k], dtypes) or isinstance(outs[k], (list, tuple)) for k in fresh):
        return out
    up_args = [snapshots[i] if i in snapshots else _upcast(a, dtypes) for i, a in enumerate(args)]
    up_kwargs = {k: snapshots[names.index(k)] if names.index(k) in snapshots else _upcast(v, dtypes)
                 for k, v in kwargs.items()}
    wide = func(*up_args, **up_kwargs)
    wides = wide if isinstance(wide, (tuple, list)) and len(aliased) > 1 else (wide,)
    pairs += [(outs[k], wides[k]) for k in fresh]

    counters = None
    for real, value in pairs:
        for target, source in (zip(real, value) if isinstance(real, (list, tuple)) else ((real, value),)):
            if not _low_precision(target, dtypes) or not isinstance(source, torch.Tensor):
                continue
            if counters is None:
                counters = rack_state.counters.setdefault(slot, SlotCounters())
                counters.rounded_ops += 1
            _round_into(target, source, rack_state, slot, counters)
    return out


def _round_into(target: torch.Tensor, wide: torch.Tensor, rack_state, slot: int, counters) -> None:
    alias = _alias(target)
    wide = wide.to(alias.device, torch.float32)
    generator = rack_state.generator(slot, alias.device)
    rounded = quantize(wide, _FORMAT_OF[target.dtype], rounding="stochastic", generator=generator).codes
    finite, nonzero = torch.isfinite(wide), wide != 0
    counters.overflow += int((finite & ~torch.isfinite(rounded)).sum())
    counters.underflow += int((nonzero & (rounded == 0)).sum())
    counters.rounded_elements += wide.numel()
    alias.copy_(rounded)


def _check_supported(func, args, kwargs, settings) -> None:
    import devices

    dtype = next((v.dtype for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)), None)
    if dtype is None:
        return
    caps = devices.capabilities(settings.kind)
    op_class = devices.op_class(func.name())
    support = caps.support(op_class, dtype)
    if support.refused:
        from devices.capability import DTYPES

        native = [d for d in DTYPES if caps.support(op_class, d).native]
        raise ValueError(
            f"numerics: {settings.kind} (hybrid:{settings.slot}, device mode, strict) does not compute "
            f"{func.name()} ({op_class}) in {devices.dtype_label(dtype)}: {support.reason}"
            + (f"; instead: {support.instead}" if support.instead else "")
            + f". Supported in {op_class} on {settings.kind}: {', '.join(native)}")


_MODE: DeviceNumericsMode | None = None


def install(wanted: bool) -> None:
    """Push the mode (once) or pop it; the stack is per thread, so this acts on the calling thread."""
    global _MODE
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if wanted and _MODE is None:
        _MODE = DeviceNumericsMode()
        _MODE.__enter__()
    elif not wanted and _MODE is not None:
        stack = _get_current_dispatch_mode_stack()
        if stack and stack[-1] is _MODE:
            _MODE.__exit__(None, None, None)
            _MODE = None
        # Otherwise another mode was pushed on top of ours; ours stays and passes every op
        # through (no slot is in device mode) until it can be popped.


def installed() -> bool:
    """True while the dispatch mode is on this thread's stack."""
    return _MODE is not None
