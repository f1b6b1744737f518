"""Triton kernels launched with hybrid tensors.

``kernel[grid](...)`` reaches ``JITFunction.run`` (``InterpretedFunction.run``
under ``TRITON_INTERPRET=1``); both are wrapped so that a launch whose tensor
arguments are on a hybrid slot goes to the slot, and every other launch goes to
Triton unchanged (the wrapper only looks at the arguments' devices):

- **emulated slot**: Triton's interpreter runs the kernel on the slot's own
  memory. Its tensor arguments are handed over as host aliases of the slot's
  bytes, where the interpreter would copy every argument to the host and back.
  While it runs, the interpreter's loads, stores, atomics and ``tl.dot`` are
  counted (:mod:`.triton_counting`).
- **GPU-backed slot**: Triton compiles and launches as usual, on CUDA tensors
  aliasing the slot's memory, on the backing GPU.

Either way the launch runs inside ``_C._call_on_slot``, as a compiled graph
does: its tensors must belong to the current rack (a retired rack's are refused
with the runtime's rack error before anything runs), and its record lands on
that rack's timeline: one ``triton:<kernel>`` kernel record per launch, priced
by the cost model (modelled). Autotuning is in
:mod:`interop.compile.triton_autotune`.
"""

from __future__ import annotations

import threading
import torch

from devices.dtypes import dtype_label
from interop.compile.backing import cuda_backing
from interop.compile.records import TRITON_PREFIX
from interop.compile.triton_bounds import Bounds, IllegalMemoryAccess, allocations
from interop.compile.triton_counting import COUNTED_METHOD, Counting, LaunchCounter
from interop.hybrid._utils import DEVICE_TYPE
from interop.session import record_kernel
from interop.timelines import KernelLaunch

FOOTPRINT_METHOD = ("bytes: the tensor arguments' sizes (a launch on a real GPU is not counted); FLOPs: not counted "
                    "(unverified path: no GPU was available when it was written)")

def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    else:
        base = getattr(value, "base", None)  # triton.reinterpret's TensorWrapper, TensorDescriptor
        if isinstance(base, torch.Tensor):
            yield base


def launch_slot(args, kwargs) -> int | None:
    """The hybrid slot a launch's tensors are on; None when none is a hybrid tensor."""
    slot = None
    for value in (*args, *kwargs.values()):
        for t in _tensors(value):
            if t.device.type != DEVICE_TYPE:
                continue
            if slot is None:
                slot = t.device.index
            elif t.device.index != slot:
                raise ValueError(f"a Triton launch's tensors must be on one slot; got hybrid:{slot} and {t.device}")
    return slot


def _aliased(value, alias):
    """``value`` with each hybrid tensor (also inside tuples, wrappers and descriptors) replaced by ``alias(t)``."""
    if isinstance(value, torch.Tensor):
        return alias(value) if value.device.type == DEVICE_TYPE else value
    if isinstance(value, tuple):
        return type(value)(*(_aliased(v, alias) for v in value)) if hasattr(value, "_fields") else tuple(
            _aliased(v, alias) for v in value)
    if isinstance(value, list):
        return [_aliased(v, alias) for v in value]
    base = getattr(value, "base", None)
    if isinstance(base, torch.Tensor) and base.device.type == DEVICE_TYPE:
        import copy

        clone = copy.copy(value)
        clone.base = alias(base)
        return clone
    return value


# -- the interpreter on the slot's memory ------------------------------------------------


class _Interpreter:
    """Triton's interpreter machinery, imported on first use (it pulls in numpy and the interpreter builder)."""

    def __init__(self):
        from triton.runtime import interpreter
        from triton.runtime.jit import JITFunction

        self.module = interpreter
        self.jit_function = JITFunction

        class SlotMemoryExecutor(interpreter.GridExecutor):
            """The interpreter's grid loop over arguments that already are host memory: the slot's bytes,
            aliased, so nothing is copied to the host and back."""

            def _init_args_hst(self, args_dev, kwargs):
                return list(args_dev), dict(kwargs)

            def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
                pass

        self.executor = SlotMemoryExecutor
        self.functions: dict[int, object] = {}

    def interpreted(self, fn):
        """An InterpretedFunction for a JITFunction (or itself, when Triton runs interpreted already)."""
        if isinstance(fn, self.module.InterpretedFunction):
            return fn
        found = self.functions.get(id(fn))
        if found is None or found[0] is not fn:
            found = self.functions[id(fn)] = (fn, self.module.InterpretedFunction(fn.fn))
        return found[1]


_interpreter: _Interpreter | None = None
_state = threading.local()


def interpreter() -> _Interpreter:
    global _interpreter
    if _interpreter is None:
        _interpreter = _Interpreter()
    return _interpreter


class _NestedCalls:
    """Inside an interpreted launch, a call from the kernel to another ``@triton.jit`` function runs that
    function interpreted too (Triton's interpreter mode decorates every function as interpreted; here they
    are compiled-mode JITFunctions).

    The interpreter patches the ``triton.language`` modules a function's globals hold, for the launch, and
    restores them afterwards; an interpreted callee patches its own modules on every call. Within one launch
    each module is patched once (patching again only replaces the patches with equal ones), and a callee's
    patches are merged into the launch's own so that they are undone with it, in reverse order (undoing them
    separately would put back what the launch had patched).
    """

    def __init__(self, interp: _Interpreter):
        self.interp, self.launch_scope, self.patched = interp, None, set()
        self.previous_call = self.previous_patch = None

    def __enter__(self):
        interp, nested = self.interp, self
        module, cls = interp.module, interp.jit_function
        self.previous_call, self.previous_patch = cls.__dict__.get("__call__"), module._patch_lang
        patch_lang, languages = module._patch_lang, (module.tl, module.tl.core)

        def _patch_lang(fn):
            wanted = {id(v) for v in fn.__globals__.values() if any(v is lang for lang in languages)}
            if nested.launch_scope is not None and wanted <= nested.patched:
                return module._LangPatchScope()  # nothing new to patch: an empty scope to restore
            scope = patch_lang(fn)
            nested.patched |= wanted
            if nested.launch_scope is None:
                nested.launch_scope = scope
            else:
                nested.launch_scope._changes.extend(scope._changes)
                scope._changes = []
            return scope

        def __call__(jit_fn, *args, **kwargs):
            module._patch_lang(jit_fn.fn)
            return interp.interpreted(jit_fn).rewrite()(*args, **kwargs)

        module._patch_lang = _patch_lang
        cls.__call__ = __call__
        return self

    def __exit__(self, *exc):
        cls = self.interp.jit_function
        if self.previous_call is None:
            del cls.__call__
        else:
            cls.__call__ = self.previous_call
        self.interp.module._patch_lang = self.previous_patch
        return False


def run_interpreted(fn, host_args, host_kwargs, grid, slot: int = -1) -> LaunchCounter:
    """Run ``fn`` (a JITFunction or InterpretedFunction) over ``grid`` on host tensors (the aliases of the
    slot's memory); returns what it counted. An access outside the tensors' memory raises
    :class:`~interop.compile.triton_bounds.IllegalMemoryAccess` before it is made."""
    interp = interpreter()
    function = interp.interpreted(fn)
    counter = LaunchCounter()
    names = list(function.arg_names[:len(host_args)]) + list(host_kwargs)
    bounds = Bounds(kernel_name(fn).removeprefix(TRITON_PREFIX), slot,
                    allocations(names, [*host_args, *host_kwargs.values()]))
    # The launched function's own hooks (a JITFunction's add_pre_run_hook), as Triton runs them.
    executor = interp.executor(function.rewrite(), function.arg_names, grid, fn.pre_run_hooks)
    try:
        with _NestedCalls(interp), Counting(interp.module.interpreter_builder, counter, bounds):
            executor(*host_args, **host_kwargs)
    except Exception as error:  # the interpreter wraps what a kernel raises; a fault is raised as itself
        if isinstance(error.__cause__, IllegalMemoryAccess):
            raise error.__cause__.with_traceback(None) from None
        raise
    return counter


_warned_bfloat16: set[str] = set()


def _warn_bfloat16(fn, args, kwargs) -> None:
    """Triton's interpreter keeps bfloat16 values as their raw 16 bits and, in 3.9, computes arithmetic,
    reductions and tl.dot on the bits (triton-lang/triton#10919, #11584); loads, stores and conversions to
    and from float32 are exact. Said once per kernel, since a kernel that converts first is unaffected."""
    name = kernel_name(fn)
    if name in _warned_bfloat16:
        return
    if any(t.dtype == torch.bfloat16 for value in (*args, *kwargs.values()) for t in _tensors(value)):
        _warned_bfloat16.add(name)
        import warnings

        warnings.warn(f"{name} on an emulated slot gets bfloat16 tensors: Triton's interpreter computes bfloat16 "
                      "arithmetic, reductions and tl.dot on the raw bits (triton-lang/triton#10919, #11584), so "
                      "convert loaded values with .to(tl.float32) before computing on them; loads, stores and "
                      "conversions are exact.", stacklevel=4)


def kernel_name(fn) -> str:
    base = fn
    while not callable(getattr(base, "__code__", None)) and hasattr(base, "fn"):
        base = base.fn
    return TRITON_PREFIX + getattr(base, "__name__", "kernel")


def launch(fn, slot: int, args, kwargs, grid, warmup, original_run):
    """A launch on slot ``slot`` of the current rack: interpreted on an emulated slot, compiled on a GPU-backed
    one, on aliases of the slot's memory (``_C._call_on_slot``)."""
    from interop import _C

    tensors = [t for value in (*args, *kwargs.values()) for t in _tensors(value) if t.device.type == DEVICE_TYPE]

    def on_slot(aliases):
        by_id = {id(t): alias for t, alias in zip(tensors, aliases)}
        host_args = [_aliased(a, lambda t: by_id[id(t)]) for a in args]
        host_kwargs = {k: _aliased(v, lambda t: by_id[id(t)]) for k, v in kwargs.items()}
        ordinal = cuda_backing(slot)
        if ordinal is not None:
            return [_launch_backed(fn, slot, ordinal, args, kwargs, host_args, host_kwargs, grid, warmup,
                                   original_run)]
        if not warmup:  # the interpreter has nothing to compile ahead of time
            _launch_interpreted(fn, slot, args, kwargs, host_args, host_kwargs, grid)
        return [None]

    what = f"the Triton kernel {kernel_name(fn).removeprefix(TRITON_PREFIX)}"
    return _C._call_on_slot(slot, on_slot, list(tensors), [], what)[0]  # the list is cleared


def _launch_interpreted(fn, slot, args, kwargs, host_args, host_kwargs, grid) -> None:
    _warn_bfloat16(fn, args, kwargs)
    counter = run_interpreted(fn, host_args, host_kwargs, grid, slot)
    launch_record = KernelLaunch(kernel_name(fn), counter.dtype, counter.bytes, 0.0, counter.dot_flops,
                                 counter.dot_outputs, counter.grid, COUNTED_METHOD)
    modelling = getattr(_state, "modelling", None)
    if modelling is not None:
        modelling.append((slot, launch_record))
    else:
        record_kernel(slot, launch_record)


def _launch_backed(fn, slot, ordinal, args, kwargs, cuda_args, cuda_kwargs, grid, warmup, original_run):
    with torch.cuda.device(ordinal):
        result = original_run(fn, *cuda_args, grid=grid, warmup=warmup, **cuda_kwargs)
    if not warmup:
        seen, footprint, dtype = set(), 0, "float32"
        for value in (*args, *kwargs.values()):
            for t in _tensors(value):
                key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
                if key not in seen:
                    seen.add(key)
                    footprint += t.numel() * t.element_size()
                    dtype = dtype_label(t.dtype)
        shown = tuple(grid) if isinstance(grid, tuple) else ()
        record_kernel(slot, KernelLaunch(kernel_name(fn), dtype, float(footprint), 0.0, 0.0, 0.0, shown,
                                         FOOTPRINT_METHOD))
    return result


class modelled_launches:
    """Inside this context, interpreted launches are not recorded; ``self.launches`` collects them
    (slot, KernelLaunch) for pricing instead (the modelled autotuner's benchmark)."""

    def __enter__(self):
        self.previous = getattr(_state, "modelling", None)
        self.launches = _state.modelling = []
        return self

    def __exit__(self, *exc):
        _state.modelling = self.previous
        return False


def _wrap_run(original_run):
    def run(self, *args, grid, warmup, **kwargs):
        slot = launch_slot(args, kwargs)
        if slot is None:
            return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        return launch(self, slot, args, kwargs, grid, warmup, original_run)

    run._hybrid_original = original_run
    run.__doc__ = original_run.__doc__
    return run


def patch_jit(jit_module) -> None:
    """Route launches with hybrid tensors (``triton.runtime.jit`` has just been imported)."""
    cls = jit_module.JITFunction
    if not hasattr(cls.run, "_hybrid_original"):
        cls.run = _wrap_run(cls.run)


def patch_interpreter(interpreter_module) -> None:
    """The same under ``TRITON_INTERPRET=1``, where kernels are InterpretedFunctions."""
    cls = interpreter_module.InterpretedFunction
    if not hasattr(cls.run, "_hybrid_original"):
        cls.run = _wrap_run(cls.run)
