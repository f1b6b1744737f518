"""The CUDA layer's patch ledger and the device-argument helpers every patch shares.

Every attribute the layer replaces goes through :data:`PATCHES`, so :func:`interop.cuda.uninstall` restores
them all; :data:`ORIGINAL` keeps the originals the layer itself calls. Dynamo treats every replacement as it
treats the torch function it stands in for (:func:`skip_frames`).
"""

from __future__ import annotations

import functools
import sys
import types

import torch

from interop.cuda_layer import mapping
from interop.cuda_layer.usage import touch
from interop.import_hooks import after_import, cancel

_MISSING = object()


class Patches:
    """Every (object, attribute, original) the layer replaced, so :meth:`undo` restores them all."""

    def __init__(self) -> None:
        self.done: list[tuple[object, object, object, bool]] = []

    def set(self, owner, name: str, value) -> None:
        original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        self.done.append((owner, name, original, False))
        setattr(owner, name, value)
        if _dynamo_loaded():
            skip_frames([value])

    def set_item(self, mapping: dict, key, value) -> None:
        """``mapping[key] = value``, undone like an attribute (a registry such as ForkingPickler's reducers)."""
        self.done.append((mapping, key, mapping.get(key, _MISSING), True))
        mapping[key] = value
        if _dynamo_loaded():
            skip_frames([value])

    def values(self) -> list:
        """The replacements in place."""
        return [owner[name] if item else getattr(owner, name, None) for owner, name, _, item in self.done]

    def undo(self) -> None:
        for owner, name, original, item in reversed(self.done):
            if item:
                if original is _MISSING:
                    owner.pop(name, None)
                else:
                    owner[name] = original
            elif original is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, original)
        self.done.clear()


PATCHES = Patches()


def _dynamo_loaded() -> bool:
    return hasattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code")


def _frame_codes(value) -> list[types.CodeType]:
    """The code objects Python runs as frames when ``value`` (a function, property, static or class method, or
    a class and its methods) is called."""
    if isinstance(value, property):
        parts = (value.fget, value.fset, value.fdel)
    elif isinstance(value, (staticmethod, classmethod)):
        parts = (value.__func__,)
    elif isinstance(value, type):
        parts = tuple(p for v in vars(value).values() for p in ((v.__func__,) if isinstance(
            v, (staticmethod, classmethod)) else (v.fget, v.fset) if isinstance(v, property) else (v,)))
    else:
        parts = (value,)
    return [p.__code__ for p in parts if isinstance(p, types.FunctionType)]


def skip_frames(values) -> None:
    """Dynamo never compiles one of ``values`` (the layer's replacements) as a frame of its own, as it never
    compiles a frame of torch's own files: torch code reached at run time from a compiled region (Dynamo's stream
    tracking asks torch.accelerator.current_stream, which asks current_accelerator) calls the replacement, and
    Dynamo, finding a frame outside torch, tried to compile it, found only skipped torch functions inside and
    counted a graph break that the same program on the CPU does not have. Where traced code calls a replacement,
    Dynamo still inlines it (a frame's skip mark is not an inlining rule)."""
    from torch._dynamo.eval_frame import skip_code

    for value in values:
        for code in _frame_codes(value):
            skip_code(code)
ORIGINAL: dict[str, object] = {}
"""Originals the layer itself calls (``"torch.load"``, ``"Tensor.to"``...)."""


def keep(key: str, fn):
    """Remember ``fn`` as the original of ``key`` (the first one kept wins) and return the original."""
    ORIGINAL.setdefault(key, fn)
    return ORIGINAL[key]

# -- device arguments in every form --------------------------------------------------------------------------------------

def translate(value, ints: bool = True):
    """A device argument (or a map_location dict) with every CUDA device replaced by its mapped slot."""
    if isinstance(value, dict):
        return {_translate_key(k): translate(v, ints) for k, v in value.items()}
    return mapping.to_hybrid(value, ints=ints)


def _translate_key(key):
    return str(mapping.to_hybrid(key)) if mapping.is_cuda_like(key) else key


def names_cuda(value) -> bool:
    """True for a device argument in a CUDA form: a CUDA string or device, an int, or a map_location dict."""
    return (mapping.is_cuda_like(value) or (isinstance(value, int) and not isinstance(value, bool))
            or isinstance(value, dict))


def device_kwarg(fn, api_name: str, *, kwarg: str = "device", ints: bool = True):
    """``fn`` with its ``kwarg`` translated (CUDA forms -> the mapped slot); records CUDA uses."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        value = kwargs.get(kwarg)
        if value is not None and names_cuda(value):
            touch(api_name, "mapped", f"{kwarg}= names the mapped slot")
            kwargs[kwarg] = translate(value, ints)
        return fn(*args, **kwargs)
    return wrapper

def first_positional_device(args) -> bool:
    """True when ``args[0]`` names a CUDA device (a CUDA string or device, or a bare int)."""
    return bool(args) and (mapping.is_cuda_like(args[0]) or (isinstance(args[0], int)
                                                               and not isinstance(args[0], bool)))


def device_kwarg_positional(fn, api_name: str, index: int = 0):
    """``fn`` whose device is its positional argument ``index`` (or ``device=``), translated."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > index and names_cuda(args[index]):
            touch(api_name, "mapped", "the mapped slot")
            args = args[:index] + (mapping.to_hybrid(args[index]),) + args[index + 1:]
        elif kwargs.get("device") is not None and names_cuda(kwargs["device"]):
            touch(api_name, "mapped", "the mapped slot")
            kwargs["device"] = mapping.to_hybrid(kwargs["device"])
        return fn(*args, **kwargs)
    return wrapper


_WAITING: list[tuple[str, object]] = []
"""(module, patch) pairs registered with :func:`interop.import_hooks.after_import` and not yet run."""


def when_imported(name: str, patch) -> None:
    """``patch(module)`` now if ``name`` is imported, else right after its first import."""
    def run_once(module):
        entry = (name, run_once)
        if entry in _WAITING:
            _WAITING.remove(entry)
        patch(module)
    _WAITING.append((name, run_once))
    after_import(name, run_once)


def forget_pending_imports() -> None:
    """Drop the patches still waiting for an import (uninstall)."""
    while _WAITING:
        cancel(*_WAITING.pop())
