"""torch.compile and Triton on the rack's slots.

``import interop`` calls :func:`install`, which imports nothing heavy: each
registration waits for the module it extends (:mod:`interop.compile.imports`):

- ``torch._dynamo.device_interface``: the device interface (:mod:`.device`);
- ``torch._inductor.codegen.common``: the Inductor backend and device op
  overrides (:mod:`.inductor`: C++ kernels on emulated slots, Triton on
  GPU-backed ones, one timeline record per kernel launch);
- ``torch._inductor.runtime.hints``: a GPU-backed slot's properties are its GPU's;
- ``torch.utils._triton``: ``has_triton()`` answers True where a slot can run
  Triton (torch's check knows only built-in device types: pytorch#171956);
- ``triton.runtime.jit`` / ``.interpreter`` / ``.autotuner``: launches with
  hybrid tensors go to their slot (:mod:`.triton_launch`), autotuning on an
  emulated slot ranks configurations by modelled time (:mod:`.triton_autotune`).

Launches with anything but hybrid tensors reach Triton unchanged, and
``TRITON_INTERPRET`` is never set.
"""

from __future__ import annotations

import functools
import sys

from interop.compile.imports import after_import
from interop.compile.records import COMPILED_PREFIXES, INDUCTOR_PREFIX, TRITON_PREFIX

_installed = False


def _register_dynamo(device_interface) -> None:
    from interop.compile.device import register

    register(device_interface)


class _HybridCodegens:
    """Inductor's registry entry for the hybrid device (``codegen.common.device_codegens["hybrid"]``).

    Inductor keys code generation on the device *type*, and asks the entry's
    ``scheduling`` class whether that type is a Triton one while it lowers a
    graph. A hybrid slot is C++-backed or Triton-backed by its backing, so the
    entry answers for the graph being compiled (:func:`interop.compile.inductor.scheduling_class`).
    The classes are imported only when Inductor asks: they import its code generators.
    """

    cpp_wrapper_codegen = None
    fx_wrapper_codegen = None

    @property
    def scheduling(self):
        from interop.compile.inductor import scheduling_class

        return scheduling_class()

    @property
    def wrapper_codegen(self):
        from interop.compile.inductor import HybridWrapperCodegen

        return HybridWrapperCodegen


def _register_inductor(common) -> None:
    from interop.compile.op_overrides import CodegenVersion, HybridDeviceOpOverrides
    from interop.hybrid._utils import DEVICE_TYPE

    common.register_device_op_overrides(DEVICE_TYPE, HybridDeviceOpOverrides())
    # Registered as PyTorch's out-of-tree devices do (which also keys Inductor's caches on our code
    # generation's version); then the entry is replaced by one that picks the scheduling per graph.
    common.register_backend_for_device(DEVICE_TYPE, type(None), type(None), device_custom_pass=CodegenVersion())
    common.device_codegens[DEVICE_TYPE] = _HybridCodegens()


def _patch_hints(hints) -> None:
    from interop.compile.backing import patch_device_properties

    patch_device_properties(hints)


def _slots_run_triton() -> bool:
    """Every rack has a slot that runs Triton kernels: an emulated one runs them in Triton's interpreter."""
    import torch

    return torch.hybrid.device_count() > 0


def _patch_has_triton(module) -> None:
    original = module.has_triton
    if getattr(original, "_hybrid", False):
        return

    @functools.cache
    def has_triton() -> bool:
        """torch's answer, or True where a hybrid slot can run Triton kernels (torch's own check
        knows only built-in device types: pytorch#171956)."""
        return original() or (module.has_triton_package() and _slots_run_triton())

    has_triton._hybrid = True
    module.has_triton = has_triton
    # Modules that imported the function before this ran hold the original.
    for loaded in list(sys.modules.values()):
        namespace = getattr(loaded, "__dict__", None)
        if namespace is not None and namespace.get("has_triton") is original:
            namespace["has_triton"] = has_triton


def _patch_jit(module) -> None:
    from interop.compile.triton_launch import patch_jit

    patch_jit(module)


def _patch_interpreter(module) -> None:
    from interop.compile.triton_launch import patch_interpreter

    patch_interpreter(module)


def _patch_autotuner(module) -> None:
    from interop.compile.triton_autotune import patch_autotuner

    patch_autotuner(module)


def install() -> None:
    """Register the hybrid device with Dynamo, Inductor and Triton as each is imported (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    after_import("torch._dynamo.device_interface", _register_dynamo)
    after_import("torch._inductor.codegen.common", _register_inductor)
    after_import("torch._inductor.runtime.hints", _patch_hints)
    after_import("torch.utils._triton", _patch_has_triton)
    after_import("triton.runtime.jit", _patch_jit)
    after_import("triton.runtime.interpreter", _patch_interpreter)
    after_import("triton.runtime.autotuner", _patch_autotuner)


__all__ = ["COMPILED_PREFIXES", "INDUCTOR_PREFIX", "TRITON_PREFIX", "install"]
