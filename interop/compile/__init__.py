"""torch.compile and Triton on the rack's slots.

``import interop`` calls :func:`install`, which imports nothing heavy: each
registration waits for the module it extends (:mod:`interop.import_hooks`):

- ``torch._dynamo.device_interface``: the device interface (:mod:`.device_interface`);
- ``torch._decomp.decompositions_for_rng``: ``bernoulli`` stays whole on an emulated slot, as on the CPU,
  and the random ATen calls of a slot graph draw from the slot's generator (:mod:`.slot_random`);
- ``torch._inductor.codegen.common``: the device's registry entry and op overrides;
- ``torch._inductor.compile_fx``: each graph on a slot is compiled for the slot's
  execution device and called on the slot's memory (:mod:`.inductor`: C++
  kernels on emulated slots, Triton on GPU-backed ones, one timeline record per
  kernel launch);
- ``torch.utils._triton``: ``has_triton()`` answers True where a slot can run
  Triton (torch's check knows only built-in device types: pytorch#171956);
- ``triton.runtime.jit`` / ``.interpreter`` / ``.autotuner``: launches with
  hybrid tensors go to their slot (:mod:`.triton_launch`), autotuning on an
  emulated slot ranks configurations by modelled time (:mod:`.triton_autotune`);
- ``torch._higher_order_ops.triton_kernel_wrap``: Dynamo's analysis of what a
  Triton kernel writes works without a GPU driver (:mod:`.triton_tracing`);
- ``torch._higher_order_ops.flex_attention``: the ops a graph on an emulated slot
  calls for FlexAttention (:mod:`.flex_graph`);
- ``torch._dynamo.callback``: the compiler's own work (benchmarking, constant
  folding, a cold cache's extra runs) stays off the modelled timeline and the
  slots' peaks (:mod:`.compile_time`).

Launches with anything but hybrid tensors reach Triton unchanged, and
``TRITON_INTERPRET`` is never set.
"""

from __future__ import annotations

import functools
import sys

from interop.import_hooks import after_import
from interop.compile.records import COMPILED_PREFIXES, INDUCTOR_PREFIX, TRITON_PREFIX

_installed = False


def _register_dynamo(device_interface) -> None:
    from interop.compile.device_interface import register

    register(device_interface)


class _LoweredForExecutionDevice:
    """Inductor's registry entry for the hybrid device type (scheduling and wrapper classes alike).

    A graph on a hybrid slot is compiled for the slot's execution device
    (:func:`interop.compile.inductor.compile_for_slot`), so Inductor never lowers
    one with hybrid tensors; the entry answers the questions Inductor asks
    about the device type before that (caching, backend features) and refuses
    to generate code for it.
    """

    supports_caching = True

    def __init__(self, scheduler=None):
        if scheduler is not None:
            raise RuntimeError(_NOT_LOWERED)

    def get_backend_features(self, device):
        from torch.utils._ordered_set import OrderedSet

        return OrderedSet()

    @staticmethod
    def create(*args, **kwargs):
        raise RuntimeError(_NOT_LOWERED)


_NOT_LOWERED = ("a graph with hybrid tensors reached Inductor's code generation; interop compiles such graphs for "
                "their slot's execution device (interop.compile.inductor.compile_for_slot), which did not run")


def _register_inductor(common) -> None:
    from interop.compile.op_overrides import CodegenVersion, HybridDeviceOpOverrides
    from interop.hybrid._utils import DEVICE_TYPE

    common.register_device_op_overrides(DEVICE_TYPE, HybridDeviceOpOverrides())
    common.register_backend_for_device(DEVICE_TYPE, _LoweredForExecutionDevice, _LoweredForExecutionDevice,
                                       device_custom_pass=CodegenVersion())


def _patch_compile_fx(module) -> None:
    """Graphs on hybrid slots are compiled for their execution device (``compile_fx_inner`` looks
    ``_compile_fx_inner`` up at each call); every other graph reaches the original unchanged."""
    original = module._compile_fx_inner
    if getattr(original, "_hybrid", False):
        return

    @functools.wraps(original)
    def _compile_fx_inner(gm, example_inputs, compile_region_name=None, **graph_kwargs):
        from interop.compile.inductor import compile_for_slot

        return compile_for_slot(original, gm, example_inputs, compile_region_name, **graph_kwargs)

    _compile_fx_inner._hybrid = True
    module._compile_fx_inner = _compile_fx_inner


def _patch_random_decompositions(module) -> None:
    from interop.compile.slot_random import keep_cpu_decompositions

    keep_cpu_decompositions(module.extra_random_decomps)


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


def _patch_generate_ttir(module) -> None:
    from interop.compile.triton_tracing import patch_generate_ttir

    patch_generate_ttir(module)


def _patch_autotuner(module) -> None:
    from interop.compile.triton_autotune import patch_autotuner

    patch_autotuner(module)


def _patch_compile_callbacks(module) -> None:
    from interop.compile.compile_time import install as keep_compile_time_apart

    keep_compile_time_apart(module)


def _define_flex_ops(module) -> None:
    # Defined as FlexAttention is imported, not when a graph is compiled: a graph served from Inductor's caches
    # calls them without being compiled again.
    from interop.compile.flex_graph import define_ops

    define_ops()


def install() -> None:
    """Register the hybrid device with Dynamo, Inductor and Triton as each is imported (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    after_import("torch._dynamo.device_interface", _register_dynamo)
    after_import("torch._inductor.codegen.common", _register_inductor)
    after_import("torch._inductor.compile_fx", _patch_compile_fx)
    after_import("torch._decomp.decompositions_for_rng", _patch_random_decompositions)
    after_import("torch._dynamo.callback", _patch_compile_callbacks)
    after_import("torch.utils._triton", _patch_has_triton)
    after_import("triton.runtime.jit", _patch_jit)
    after_import("triton.runtime.interpreter", _patch_interpreter)
    after_import("triton.runtime.autotuner", _patch_autotuner)
    after_import("torch._higher_order_ops.triton_kernel_wrap", _patch_generate_ttir)
    after_import("torch._higher_order_ops.flex_attention", _define_flex_ops)


__all__ = ["COMPILED_PREFIXES", "INDUCTOR_PREFIX", "TRITON_PREFIX", "install"]
