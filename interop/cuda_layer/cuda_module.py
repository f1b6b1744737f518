"""``torch.cuda`` itself: its functions answered for the mapped slots (:mod:`interop.cuda_layer.api`), the APIs the
rack cannot serve refused by name, ``torch.cuda.nvtx`` as named ranges on the modelled timeline,
``torch.cuda.amp``'s classes recorded, and the private helpers torch reaches once CUDA looks available."""

from __future__ import annotations

import functools
import types

import torch

from interop.cuda_layer import api, mapping, refusals
from interop.cuda_layer.patch_ledger import ORIGINAL, PATCHES, keep, when_imported
from interop.cuda_layer.usage import touch
from interop.device_arg import parse_device


_KEEP = {"amp", "nvtx", "memory", "random", "streams", "graphs", "jiterator", "comm", "sparse", "tunable", "gds",
         "green_contexts", "profiler", "nccl", "OutOfMemoryError", "CudaError", "AcceleratorError",
         "DeferredCudaCallError", "Device", "classproperty", "check_error", "cudaStatus", "DEVICE_REQUIREMENT",
         "PYTORCH_RELEASES_CODE_CC", "has_half", "has_magma"}


def _patch_torch_cuda() -> None:
    cuda = torch.cuda
    submodules = [cuda] + [getattr(cuda, m) for m in ("memory", "random", "streams", "graphs") if hasattr(cuda, m)]
    for api_name in api.SERVED:
        short = api_name.split(".", 2)[2]
        if "." in short:
            continue
        replacement = getattr(api, short, None) or api.LEGACY_TENSOR_TYPES.get(short)
        if replacement is None:
            continue
        for module in submodules:
            if module is cuda or short in vars(module):
                PATCHES.set(module, short, replacement)
    for api_name, instead in refusals.UNSUPPORTED.items():
        *owner_path, short = api_name.split(".")
        owner = torch
        for part in owner_path[1:]:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if owner is not None and hasattr(owner, short):
            PATCHES.set(owner, short, refusals.unsupported(api_name, instead, getattr(owner, short)))
    # Public functions of torch.cuda that nothing above answers: refused by name, never half-working.
    for name, value in list(vars(cuda).items()):
        if name.startswith("_") or name in _KEEP or f"torch.cuda.{name}" in api.SERVED:
            continue
        if getattr(value, "__hybrid_api__", None) is not None:
            continue
        if isinstance(value, types.FunctionType) and (value.__module__ or "").startswith("torch.cuda"):
            PATCHES.set(cuda, name, refusals.unsupported(f"torch.cuda.{name}", "no equivalent on the rack"))
    # torch internals reach these private helpers once CUDA looks available.
    PATCHES.set(cuda, "_lazy_init", lambda: None)
    PATCHES.set(cuda, "_is_in_bad_fork", lambda: False)
    PATCHES.set(cuda, "_initialized", True)
    PATCHES.set(cuda, "_get_device_index", _get_device_index)
    _patch_nvtx()
    _patch_amp_module()


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    """torch.cuda's own helper, answered in CUDA indices (a hybrid device: the CUDA index its slot answers to)."""
    arg = parse_device(device)
    if arg.current:
        if optional:
            return api.current_device.__wrapped__()
        raise ValueError("Expected a torch.device with a specified index or an integer, but got: None")
    if arg.bare:
        return arg.index
    if arg.type == "cpu":
        if allow_cpu:
            return -1
        raise ValueError(f"Expected a cuda device, but got: {device}")
    if arg.index is None:
        return api.current_device.__wrapped__() if optional else -1
    return arg.index if arg.type == "cuda" else mapping.cuda_index_of_slot(arg.index)


def _patch_nvtx() -> None:
    from interop.hybrid import nvtx as hybrid_nvtx

    nvtx = torch.cuda.nvtx

    def push(msg):
        touch("torch.cuda.nvtx.range_push", "modelled", "a named range on the slot's modelled timeline")
        return hybrid_nvtx.range_push(msg)

    def pop():
        touch("torch.cuda.nvtx.range_pop", "modelled", "closes the named range")
        return hybrid_nvtx.range_pop()

    def mark(msg):
        touch("torch.cuda.nvtx.mark", "modelled", "an instant on the slot's modelled timeline")
        hybrid_nvtx.mark(msg)

    def range_(msg, *args, **kwargs):
        touch("torch.cuda.nvtx.range", "modelled", "a named range on the slot's modelled timeline")
        return hybrid_nvtx.range(msg, *args, **kwargs)

    starts: dict[int, int] = {}

    def range_start(msg) -> int:
        touch("torch.cuda.nvtx.range_start", "modelled", "a named range on the slot's modelled timeline")
        depth = hybrid_nvtx.range_push(msg)
        starts[id(msg) ^ depth] = depth
        return id(msg) ^ depth

    def range_end(range_id) -> None:
        touch("torch.cuda.nvtx.range_end", "modelled", "closes the named range")
        if starts.pop(range_id, None) is not None:
            hybrid_nvtx.range_pop()

    for name, fn in (("range_push", push), ("range_pop", pop), ("mark", mark), ("range", range_),
                     ("range_start", range_start), ("range_end", range_end)):
        PATCHES.set(nvtx, name, fn)
    for name, how in (("range_push", "modelled"), ("range_pop", "modelled"), ("mark", "modelled"),
                      ("range", "modelled"), ("range_start", "modelled"), ("range_end", "modelled")):
        api.SERVED[f"torch.cuda.nvtx.{name}"] = (how, "named ranges on the slot's modelled timeline")


def _patch_amp_module() -> None:
    # torch.cuda.amp.autocast / GradScaler subclass torch.amp's and pass "cuda" to them: the torch.amp
    # patches map it. Their own names are recorded here.
    amp = torch.cuda.amp
    for name in ("autocast", "GradScaler"):
        cls = getattr(amp, name, None)
        if cls is None:
            continue
        original = cls.__init__
        api_name = f"torch.cuda.amp.{name}"
        api.SERVED[api_name] = ("mapped", "the torch.amp equivalent on the hybrid slots")

        def init(self, *args, __original=original, __api=api_name, **kwargs):
            touch(__api, "mapped", "the torch.amp equivalent on the hybrid slots")
            __original(self, *args, **kwargs)
        functools.update_wrapper(init, original)
        PATCHES.set(cls, "__init__", init)


def _keep_triton_on_its_own_driver(nvidia_driver) -> None:
    # Triton picks its GPU driver from torch.cuda.is_available(); answered True for the mapped slots, it would
    # load libcuda on a machine without one (and torch.compile's cache key asks for that driver). Triton is
    # asked the real question; launches with hybrid tensors go to their slot through interop.compile.
    real = ORIGINAL["torch.cuda.is_available"]
    original = nvidia_driver.CudaDriver.is_active

    def is_active() -> bool:
        return bool(real()) and original()
    PATCHES.set(nvidia_driver.CudaDriver, "is_active", staticmethod(is_active))


def install() -> None:
    """Patch torch.cuda and its submodules."""
    keep("torch.cuda.is_available", torch.cuda.is_available)
    when_imported("triton.backends.nvidia.driver", _keep_triton_on_its_own_driver)
    _patch_torch_cuda()
