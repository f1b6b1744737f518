"""Device arguments in every form (str, torch.device, int, dict) reach the mapped slot: every torch factory,
``Tensor.to/cuda/new_*/pin_memory/is_cuda``, ``UntypedStorage.cuda``, ``Module.to/to_empty/cuda``,
``torch.load`` (``map_location`` in any form, and CUDA checkpoints loaded without one), ``torch.save`` (a mapped
slot's storages saved as the CUDA device the script named), ``torch.Generator``,
``torch.set_default_device`` and ``with torch.device("cuda")``; ``torch.accelerator`` answers ``cuda`` to user and
library code."""

from __future__ import annotations

import functools
import sys

import torch

from interop.cuda_layer import api, mapping
from interop.cuda_layer.patch_ledger import (
    ORIGINAL, PATCHES, device_kwarg, device_kwarg_positional, first_positional_device, keep, names_cuda,
)
from interop.cuda_layer.usage import touch


def _factory_names() -> list[str]:
    """Every torch function with a ``device`` argument: ATen schemas, plus torch's device constructors."""
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::") and any(a.name == "device" for a in schema.arguments):
            names.add(schema.name.split("::", 1)[1])
    from torch.utils._device import _device_constructors

    names |= {f.__name__ for f in _device_constructors()}
    names -= {"Generator"}
    return sorted(n for n in names if callable(getattr(torch, n, None)))


# -- Tensor / Module / storage -----------------------------------------------------------------------------

def _tensor_to(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if first_positional_device(args):
            touch("Tensor.to(cuda)", "mapped", "the mapped slot")
            args = (mapping.to_hybrid(args[0]),) + args[1:]
        else:
            device = kwargs.get("device")
            if device is not None and names_cuda(device):
                touch("Tensor.to(cuda)", "mapped", "the mapped slot")
                kwargs["device"] = mapping.to_hybrid(device)
        return original(self, *args, **kwargs)
    return to


def _tensor_cuda(self, device=None, non_blocking: bool = False, memory_format=torch.preserve_format):
    """``Tensor.cuda()``: the tensor on the mapped slot of ``device`` (default: the current CUDA device)."""
    touch("Tensor.cuda", "mapped", "the tensor on the mapped slot")
    target = torch.device("hybrid", mapping.slot_of(device))
    return ORIGINAL["Tensor.to"](self, target, non_blocking=non_blocking, memory_format=memory_format)


def _is_cuda(self) -> bool:
    device = self.device
    if device.type == "hybrid":
        current = mapping._current
        return current is not None and current.cuda_index(device.index) is not None
    return device.type == "cuda"


def _pin_memory(original):
    @functools.wraps(original)
    def pin_memory(self, device=None):
        touch("Tensor.pin_memory", "mapped", "pinned host memory (async DMA to the slot when non_blocking)")
        return original(self) if device is None or names_cuda(device) else original(self, device)
    return pin_memory


def _module_to(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if first_positional_device(args):
            touch("Module.to(cuda)", "mapped", "parameters and buffers on the mapped slot")
            args = (mapping.to_hybrid(args[0]),) + args[1:]
        elif kwargs.get("device") is not None and names_cuda(kwargs["device"]):
            touch("Module.to(cuda)", "mapped", "parameters and buffers on the mapped slot")
            kwargs["device"] = mapping.to_hybrid(kwargs["device"])
        return original(self, *args, **kwargs)
    return to


def _module_cuda(self, device=None):
    """``Module.cuda()``: parameters and buffers on the mapped slot (tied weights stay tied)."""
    touch("Module.cuda", "mapped", "parameters and buffers on the mapped slot")
    return self.to(torch.device("hybrid", mapping.slot_of(device)))


def _storage_cuda(self, device=None, non_blocking: bool = False):
    touch("UntypedStorage.cuda", "mapped", "the storage on the mapped slot")
    return self.to(device=torch.device("hybrid", mapping.slot_of(device)), non_blocking=non_blocking)


# -- torch.load ----------------------------------------------------------------------------------------------

def _map_location(value):
    """A map_location in any form, CUDA devices mapped; None maps CUDA checkpoints' own locations."""
    if value is None:
        def restore(storage, location):
            if mapping.is_cuda_like(location):
                return storage.to(device=mapping.to_hybrid(location))
            return None  # torch's default restore
        return restore
    if callable(value) and not isinstance(value, (str, torch.device)):
        def restore_then_map(storage, location):
            out = value(storage, location)
            if isinstance(out, (str, torch.device)) and mapping.is_cuda_like(out):
                out = storage.to(device=mapping.to_hybrid(out))
            return out
        return restore_then_map
    if isinstance(value, dict):
        return {k: str(mapping.to_hybrid(v)) if mapping.is_cuda_like(v) else v for k, v in value.items()}
    return mapping.to_hybrid(value)


def _load(original):
    @functools.wraps(original)
    def load(f, map_location=None, *args, **kwargs):
        if map_location is not None and names_cuda(map_location):
            touch("torch.load(map_location=cuda)", "mapped", "CUDA locations load onto the mapped slot")
        return original(f, _map_location(map_location), *args, **kwargs)
    return load


def _location_tag(original):
    """torch.save's storage tag: a mapped slot's storages are saved as the CUDA device the script named, so the
    checkpoint loads on a GPU machine (and on the rack, through :func:`_map_location`) as a CUDA one does."""
    @functools.wraps(original)
    def location_tag(storage):
        device = getattr(storage, "device", None)
        if device is not None and device.type == mapping.DEVICE_TYPE and mapping._current is not None:
            index = mapping._current.cuda_index(device.index if device.index is not None else 0)
            if index is not None:
                touch("torch.save (storages on a mapped slot)", "mapped", "saved as the CUDA device the script named")
                return f"cuda:{index}"
        return original(storage)
    return location_tag


# -- torch.accelerator ------------------------------------------------------------------------------------

def _outside_torch(depth: int = 2) -> bool:
    """True when the caller ``depth`` frames up is user or library code, not torch's or interop's own.

    While Dynamo traces, the answer is torch's own (and no frame is read: Dynamo cannot trace
    ``sys._getframe``, and would break the graph there with a warning)."""
    if torch.compiler.is_compiling():
        return False
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return not (name == "torch" or name.startswith(("torch.", "interop")))


def _patch_accelerator() -> None:
    """torch.accelerator answers in CUDA's terms to user and library code (accelerate asks it which device
    to use), and in the device's own terms (``hybrid``) to torch itself, whose tensors live there."""
    acc = torch.accelerator
    original = {name: getattr(acc, name) for name in ("current_accelerator", "device_count",
                                                       "current_device_index", "set_device_index",
                                                       "current_stream", "synchronize")
                if hasattr(acc, name)}

    def current_accelerator(check_available: bool = False):
        if _outside_torch():
            touch("torch.accelerator.current_accelerator", "mapped", "answers cuda (the mapped slots)")
            return torch.device("cuda")
        return original["current_accelerator"](check_available)

    def device_count() -> int:
        if _outside_torch():
            return len(mapping.current())
        return original["device_count"]()

    def current_device_index() -> int:
        if _outside_torch():
            return api.current_device.__wrapped__()
        return original["current_device_index"]()

    def set_device_index(device) -> None:
        if _outside_torch() and device is not None and names_cuda(device):
            device = mapping.slot_of(device)
        original["set_device_index"](device)

    def current_stream(device=None):
        if _outside_torch() and device is not None and names_cuda(device):
            device = mapping.slot_of(device)
        return original["current_stream"](device)

    def synchronize(device=None) -> None:
        if device is not None and names_cuda(device):
            device = mapping.slot_of(device)
        original["synchronize"](device)

    for name, fn in (("current_accelerator", current_accelerator), ("device_count", device_count),
                     ("current_device_index", current_device_index), ("set_device_index", set_device_index),
                     ("current_stream", current_stream), ("synchronize", synchronize)):
        if name in original:
            functools.update_wrapper(fn, original[name])
            PATCHES.set(acc, name, fn)
    if hasattr(acc, "set_device_idx"):
        PATCHES.set(acc, "set_device_idx", set_device_index)
    if hasattr(acc, "current_device_idx"):
        PATCHES.set(acc, "current_device_idx", current_device_index)


def _generator_class():
    base = torch._C.Generator

    class _GeneratorMeta(type(base)):
        def __instancecheck__(cls, obj) -> bool:
            return isinstance(obj, base)

        def __subclasscheck__(cls, sub) -> bool:
            return issubclass(sub, base)

    class Generator(base, metaclass=_GeneratorMeta):
        """``torch.Generator(device="cuda")``: a generator of the mapped slot."""

        def __new__(cls, device="cpu"):
            if names_cuda(device):
                touch("torch.Generator(device='cuda')", "same", "a generator of the mapped slot")
                device = mapping.to_hybrid(device)
            return base.__new__(base, device)

    Generator.__module__ = "torch"
    Generator.__qualname__ = "Generator"
    return Generator


def install() -> None:
    """Device arguments in every form: factories, Tensor, Module, storage, torch.load, Generator, the default
    device, torch.accelerator."""
    keep("Tensor.to", torch.Tensor.to)
    keep("torch.load", torch.load)
    for name in _factory_names():
        PATCHES.set(torch, name, device_kwarg(getattr(torch, name), f"torch.{name}(device=cuda)"))
    for name in ("fftfreq", "rfftfreq"):
        if hasattr(torch.fft, name):
            PATCHES.set(torch.fft, name, device_kwarg(getattr(torch.fft, name), f"torch.fft.{name}(device=cuda)"))

    PATCHES.set(torch, "Generator", _generator_class())
    PATCHES.set(torch, "set_default_device",
                device_kwarg_positional(torch.set_default_device, "torch.set_default_device('cuda')"))
    from torch.utils import _device as device_ctx

    PATCHES.set(device_ctx.DeviceContext, "__init__",
                device_kwarg_positional(device_ctx.DeviceContext.__init__, "with torch.device('cuda')", index=1))
    PATCHES.set(torch, "load", _load(ORIGINAL["torch.load"]))
    from torch import serialization

    PATCHES.set(serialization, "load", torch.load)
    PATCHES.set(serialization, "location_tag", _location_tag(serialization.location_tag))

    PATCHES.set(torch.Tensor, "to", _tensor_to(ORIGINAL["Tensor.to"]))
    PATCHES.set(torch.Tensor, "cuda", _tensor_cuda)
    PATCHES.set(torch.Tensor, "is_cuda", property(_is_cuda, doc="True on a mapped slot (and on a real GPU)"))
    PATCHES.set(torch.Tensor, "pin_memory", _pin_memory(torch.Tensor.pin_memory))
    for name in ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_zeros", "new_tensor"):
        PATCHES.set(torch.Tensor, name, device_kwarg(getattr(torch.Tensor, name), f"Tensor.{name}(device=cuda)"))
    PATCHES.set(torch.UntypedStorage, "cuda", _storage_cuda)
    PATCHES.set(torch.nn.Module, "to", _module_to(torch.nn.Module.to))
    PATCHES.set(torch.nn.Module, "cuda", _module_cuda)
    PATCHES.set(torch.nn.Module, "to_empty", device_kwarg(torch.nn.Module.to_empty, "Module.to_empty(device=cuda)"))
    _patch_accelerator()
