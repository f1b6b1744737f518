"""CUDA's Python namespace under the layer, all of it.

Every public name of ``torch.cuda`` and its submodules, ``torch.backends.cuda``,
``torch.backends.cudnn`` and ``torch.version`` is one of

- **served**: a replacement answers for the mapped slots and records its use
  (:data:`interop.cuda_layer.api.SERVED`);
- **answered**: the name answers in CUDA's terms as it is (an exception class, a
  type, a flag torch keeps) or with a CUDA value the layer sets
  (:data:`ANSWERED`, :data:`CUDA_STACK`);
- **refused**: calling it raises :class:`UnsupportedCudaAPI` naming it, its call
  site and what to use instead (:data:`interop.cuda_layer.refusals.UNSUPPORTED`).

:func:`rows` classifies each name; ``python -m interop.cuda_layer.namespace_doc``
prints the table that docs/cuda_namespace.md holds (a test keeps the two equal).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import types

import torch

from interop.cuda_layer import api, mapping
from interop.cuda_layer.patch_ledger import PATCHES
from interop.cuda_layer.refusals import UNSUPPORTED
from interop.cuda_layer.usage import touch

NAMESPACES = ("torch.cuda", "torch.cuda.amp", "torch.cuda.nccl", "torch.cuda.tunable", "torch.cuda.memory",
              "torch.cuda.graphs", "torch.cuda.jiterator", "torch.cuda.nvtx", "torch.cuda.comm", "torch.cuda.streams",
              "torch.cuda.random", "torch.cuda.sparse", "torch.cuda.gds", "torch.cuda.green_contexts",
              "torch.cuda.profiler", "torch.backends.cuda", "torch.backends.cudnn", "torch.version")
"""The namespaces walked (the issue's list, and every other public submodule of torch.cuda)."""

CUDA_STACK = {
    "cuda": "12.8",
    "cudnn": 91002,
    "nccl": (2, 27, 3),
}
"""The CUDA software the layer reports (``torch.version.cuda``, ``torch.backends.cudnn.version()``,
``torch.cuda.nccl.version()``). Nothing of it runs: a slot computes with the CPU's kernels (or a backed GPU's
own stack). Status: assumption. CUDA 12.8 with cuDNN 9.10.2.21 is PyTorch's stable CUDA build of the newest
row read of PyTorch's RELEASE.md compatibility matrix (2.10); NCCL 2.27.3 is the nvidia-nccl-cu12 version
PyTorch's CUDA 12.8 wheels required as of 2.8 (from memory, not re-read: labelled assumption)."""

_TYPES_AS_THEY_ARE = "torch's own class: right as it is under the layer"
_FLAG = "a setting torch keeps; accepted and recorded in the report (torch.backends flags)"
_WALKED = "a namespace: its names are walked below"

ANSWERED: dict[str, str] = {
    # torch.cuda
    "torch.cuda.AcceleratorError": _TYPES_AS_THEY_ARE,
    "torch.cuda.CudaError": _TYPES_AS_THEY_ARE,
    "torch.cuda.OutOfMemoryError": "torch.OutOfMemoryError: what a slot's allocator raises over its capacity",
    "torch.cuda.DeferredCudaCallError": _TYPES_AS_THEY_ARE,
    "torch.cuda.Device": "the type alias of a device argument",
    "torch.cuda.cudaStatus": "CUDA's status codes (SUCCESS, ERROR_NOT_READY)",
    "torch.cuda.check_error": "raises CudaError for a non-zero status, as in CUDA (the layer never has one)",
    "torch.cuda.classproperty": "a helper decorator",
    "torch.cuda.DEVICE_REQUIREMENT": "torch's table of compute capabilities per CUDA version",
    "torch.cuda.PYTORCH_RELEASES_CODE_CC": "torch's table of compute capabilities per release",
    "torch.cuda.has_half": "True, as in CUDA",
    "torch.cuda.has_magma": "True, as a CUDA build with MAGMA answers (linear algebra on a slot runs the CPU's LAPACK)",
    "torch.cuda.amp.amp_definitely_not_available": "False under the layer (CUDA looks available)",
    "torch.cuda.amp.custom_fwd": "torch.amp.custom_fwd(device_type='cuda'): autocast state of the mapped slots",
    "torch.cuda.amp.custom_bwd": "torch.amp.custom_bwd(device_type='cuda'): autocast state of the mapped slots",
    "torch.cuda.nccl.SUM": "ncclSum (0), as in NCCL",
    "torch.cuda.green_contexts.SUPPORTED": "False: green contexts (SM partitions) are not modelled",
    "torch.cuda.profiler.DEFAULT_FLAGS": "nvprof's flags, as a constant",
    "torch.cuda.profiler.check_error": "raises CudaError for a non-zero status, as in CUDA (the layer never has one)",
    # torch.backends.cuda
    "torch.backends.cuda.SDPAParams": _TYPES_AS_THEY_ARE,
    "torch.backends.cuda.SDPBackend": _TYPES_AS_THEY_ARE,
    "torch.backends.cuda.cuBLASModule": _TYPES_AS_THEY_ARE,
    "torch.backends.cuda.cuFFTPlanCache": _TYPES_AS_THEY_ARE,
    "torch.backends.cuda.cuFFTPlanCacheAttrContextProp": _TYPES_AS_THEY_ARE,
    "torch.backends.cuda.cuFFTPlanCacheManager": _TYPES_AS_THEY_ARE,
    "torch.backends.cuda.matmul": _FLAG + " (allow_tf32, reduced-precision reductions...)",
    "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp": _FLAG,
    "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed": _FLAG,
    "torch.backends.cuda.enable_cudnn_sdp": _FLAG + "; a slot's SDPA choice is the CPU's",
    "torch.backends.cuda.enable_flash_sdp": _FLAG + "; a slot's SDPA choice is the CPU's",
    "torch.backends.cuda.enable_math_sdp": _FLAG + "; a slot's SDPA choice is the CPU's",
    "torch.backends.cuda.enable_mem_efficient_sdp": _FLAG + "; a slot's SDPA choice is the CPU's",
    "torch.backends.cuda.cudnn_sdp_enabled": _FLAG,
    "torch.backends.cuda.flash_sdp_enabled": _FLAG,
    "torch.backends.cuda.math_sdp_enabled": _FLAG,
    "torch.backends.cuda.mem_efficient_sdp_enabled": _FLAG,
    "torch.backends.cuda.sdp_kernel": _FLAG + " (the deprecated context manager)",
    "torch.backends.cuda.preferred_blas_library": _FLAG,
    "torch.backends.cuda.preferred_linalg_library": _FLAG,
    "torch.backends.cuda.preferred_rocm_fa_library": _FLAG,
    # torch.backends.cudnn
    "torch.backends.cudnn.enabled": _FLAG,
    "torch.backends.cudnn.benchmark": _FLAG,
    "torch.backends.cudnn.benchmark_limit": _FLAG,
    "torch.backends.cudnn.deterministic": _FLAG,
    "torch.backends.cudnn.allow_tf32": _FLAG,
    "torch.backends.cudnn.fp32_precision": _FLAG,
    "torch.backends.cudnn.conv": _FLAG,
    "torch.backends.cudnn.rnn": _FLAG,
    "torch.backends.cudnn.depthwise_kernel": _FLAG,
    "torch.backends.cudnn.flags": _FLAG + " (the context manager)",
    "torch.backends.cudnn.set_flags": _FLAG,
    "torch.backends.cudnn.CUDNN_TENSOR_DTYPES": "the dtypes cuDNN takes",
    "torch.backends.cudnn.ContextProp": _TYPES_AS_THEY_ARE,
    "torch.backends.cudnn.CudnnModule": _TYPES_AS_THEY_ARE,
    "torch.backends.cudnn.PropModule": _TYPES_AS_THEY_ARE,
    # torch.version
    "torch.version.cuda": f"{CUDA_STACK['cuda']!r} under the layer (see CUDA_STACK: an assumption)",
    "torch.version.hip": "None, as in a CUDA build",
    "torch.version.rocm": "None, as in a CUDA build",
    "torch.version.xpu": "None, as in a CUDA build",
    "torch.version.debug": "torch's own build flag",
    "torch.version.git_version": "torch's own commit",
    "torch.version.__version__": "torch's own version",
}
"""Names answered in CUDA's terms as they are (or with a value the layer sets), with why."""

_SUBMODULES = frozenset(NAMESPACES[1:])

_SKIP_VALUES = frozenset({"TYPE_CHECKING", "annotations"})


def _module(name: str):
    module = importlib.import_module(name)
    return module


def public_names(namespace: str) -> list[str]:
    """The public names of one namespace: its ``__all__`` and every function, class or constant it defines
    (imported helpers such as ``os`` or ``typing.Any`` are not its names)."""
    module = _module(namespace)
    if namespace == "torch.backends.cudnn":  # a PropModule over the real module: flags plus the module's names
        inner = module.m
        names = {n for n in dir(type(module)) if not n.startswith("_")}
        names |= {n for n in dir(inner) if not n.startswith("_") and _defined_in(getattr(inner, n), namespace)}
        return sorted(names)
    names = set(getattr(module, "__all__", ()) or ())
    for name in dir(module):
        if name.startswith("_") or name in _SKIP_VALUES:
            continue
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            if value.__name__ in _SUBMODULES and value.__name__.rsplit(".", 1)[0] == namespace:
                names.add(name)
            continue
        if _defined_in(value, namespace):
            names.add(name)
    return sorted(names)


def _defined_in(value, namespace: str) -> bool:
    if isinstance(value, types.ModuleType):
        return False
    module = getattr(value, "__module__", None)
    if callable(value) or isinstance(value, type):
        if getattr(value, "__hybrid_api__", None) is not None or getattr(value, "__wrapped__", None) is not None:
            return True  # the layer's replacement of one of the namespace's own names
        return isinstance(module, str) and (module == namespace or module.startswith(namespace + ".")
                                            or module.startswith("torch.cuda") or module.startswith("torch.backends"))
    # A constant: typing's special forms are not values of the namespace.
    return not (isinstance(module, str) and module in ("typing", "typing_extensions", "collections.abc"))


def classify(namespace: str, name: str) -> tuple[str, str]:
    """(``"served"`` | ``"answered"`` | ``"refused"`` | ``"unclassified"``, note) for one public name."""
    qualified = f"{namespace}.{name}"
    if f"{namespace}.{name}" in _SUBMODULES:
        return "answered", _WALKED
    if qualified in ANSWERED:
        return "answered", ANSWERED[qualified]
    value = getattr(_module(namespace), name, None)
    refused = getattr(value, "__hybrid_refused__", None)
    if refused is not None:
        return "refused", refused
    if qualified in UNSUPPORTED:
        return "refused", UNSUPPORTED[qualified]
    api_name = getattr(value, "__hybrid_api__", None) or qualified
    for key in (qualified, api_name, f"torch.cuda.{name}" if namespace.startswith("torch.cuda") else qualified):
        if key in api.SERVED:
            how, note = api.SERVED[key]
            return "served", f"{how}: {note}"
    return "unclassified", ""


def rows() -> list[tuple[str, str, str]]:
    """(qualified name, how, note) for every public name of :data:`NAMESPACES`."""
    out = []
    for namespace in NAMESPACES:
        for name in public_names(namespace):
            how, note = classify(namespace, name)
            out.append((f"{namespace}.{name}", how, note))
    return out


def markdown() -> str:
    """The table of docs/cuda_namespace.md."""
    lines = ["# CUDA's namespace on the rack", "",
             "Every public name of `torch.cuda` (and its submodules), `torch.backends.cuda`, `torch.backends.cudnn`",
             "and `torch.version` under the CUDA layer: **served** (answers for the mapped slots), **answered** in",
             "CUDA's terms, or **refused** (`UnsupportedCudaAPI` naming it, the call site and what to use).",
             "Generated by `python -m interop.cuda_layer.namespace_doc` (tests/interop/cuda_layer/test_cuda_namespace.py",
             f"keeps it current); torch {torch.__version__.split('+')[0]}.", "",
             "| name | how | what it does on the rack / what to use instead |", "|---|---|---|"]
    for qualified, how, note in rows():
        lines.append(f"| `{qualified}` | {how} | {note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


# -- the replacements -------------------------------------------------------------------------------------------------

def _serve(qualified: str, how: str, note: str):
    return api.served(how, note, qualified=qualified)


_REEXPORTS: dict[str, set[str]] = {}
"""Per submodule, the names whose object torch.cuda re-exports (found before the layer replaces any)."""


def _mirror_top_level(namespace: str) -> None:
    """A submodule's own binding of a name torch.cuda re-exports gets the top level's replacement (a name that
    merely coincides, such as torch.cuda.nccl.is_available, keeps its own)."""
    module = _module(namespace)
    top = vars(torch.cuda)
    for name in _REEXPORTS.get(namespace, ()):
        value = top.get(name)
        if value is None or getattr(value, "__hybrid_api__", None) is None:
            continue
        if getattr(module, name, None) is not value:
            PATCHES.set(module, name, value)


# torch.cuda.nccl: one-process collectives over tensors on several slots, on the rack's fabric.

_NCCL_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}


def _nccl_op(op) -> str:
    try:
        return _NCCL_OPS[int(op)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"torch.cuda.nccl: op must be an ncclRedOp_t (0 sum, 1 prod, 2 max, 3 min, 4 avg), "
                         f"got {op!r}") from None


def _sequence(what: str, tensors) -> list:
    if isinstance(tensors, torch.Tensor) or not hasattr(tensors, "__iter__"):
        raise TypeError(f"torch.cuda.nccl.{what}: inputs should be a collection of tensors")
    return list(tensors)


def _nccl() -> None:
    import collectives

    nccl = _module("torch.cuda.nccl")
    note = "collectives over the mapped slots' tensors on the rack's fabric (modelled time)"

    @_serve("torch.cuda.nccl.version", "same", "the NCCL version the layer reports (CUDA_STACK; no NCCL runs)")
    def version():
        return CUDA_STACK["nccl"]

    @_serve("torch.cuda.nccl.is_available", "mapped", "True for contiguous tensors on distinct mapped slots")
    def is_available(tensors):
        slots = set()
        for t in tensors:
            if t.is_sparse or not t.is_contiguous() or not t.is_cuda or t.get_device() in slots:
                return False
            slots.add(t.get_device())
        return True

    @_serve("torch.cuda.nccl.all_reduce", "modelled", note)
    def all_reduce(inputs, outputs=None, op=0, streams=None, comms=None):
        inputs = _sequence("all_reduce", inputs)
        collectives.all_reduce(inputs, _nccl_op(op), outputs=None if outputs is None else _sequence("all_reduce",
                                                                                                      outputs))

    @_serve("torch.cuda.nccl.reduce", "modelled", note)
    def reduce(inputs, output=None, root=0, op=0, streams=None, comms=None, *, outputs=None):
        inputs = _sequence("reduce", inputs)
        target = outputs[root] if outputs is not None else (
            output[root] if output is not None and not isinstance(output, torch.Tensor) else output)
        work = [t.clone() for t in inputs] if target is not None else inputs
        collectives.reduce(work, root, _nccl_op(op))
        if target is not None:
            target.copy_(work[root])

    @_serve("torch.cuda.nccl.broadcast", "modelled", note)
    def broadcast(inputs, root=0, streams=None, comms=None):
        collectives.broadcast(_sequence("broadcast", inputs), root)

    @_serve("torch.cuda.nccl.all_gather", "modelled", note)
    def all_gather(inputs, outputs, streams=None, comms=None):
        collectives.all_gather(_sequence("all_gather", inputs), _sequence("all_gather", outputs))

    @_serve("torch.cuda.nccl.reduce_scatter", "modelled", note)
    def reduce_scatter(inputs, outputs, op=0, streams=None, comms=None):
        collectives.reduce_scatter(_sequence("reduce_scatter", inputs), _sequence("reduce_scatter", outputs),
                                   _nccl_op(op))

    for fn in (version, is_available, all_reduce, reduce, broadcast, all_gather, reduce_scatter):
        PATCHES.set(nccl, fn.__name__, fn)


# torch.cuda.tunable: TunableOp's settings, kept and answered; there is nothing to tune on a slot.

class _Tunable:
    """TunableOp's settings as torch keeps them (defaults from its PYTORCH_TUNABLEOP_* variables, read when the
    layer is installed)."""

    def __init__(self, env=os.environ) -> None:
        def flag(name, default):
            return env.get(name, default) not in ("0", "", "false", "False")

        def number(name, default):
            try:
                return int(env.get(name, default))
            except ValueError:
                return int(default)

        self.enabled = flag("PYTORCH_TUNABLEOP_ENABLED", "0")
        self.tuning = flag("PYTORCH_TUNABLEOP_TUNING", "1")
        self.record_untuned = flag("PYTORCH_TUNABLEOP_RECORD_UNTUNED", "0")
        self.max_duration_ms = number("PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS", "30")
        self.max_iterations = number("PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS", "100")
        self.filename = env.get("PYTORCH_TUNABLEOP_FILENAME", "tunableop_results.csv")
        self.rotating_buffer_mb = number("PYTORCH_TUNABLEOP_ROTATING_BUFFER_SIZE", "-1")
        self.numerical_check = (False, 1e-5, 1e-5)


def _tunable() -> None:
    tunable = _module("torch.cuda.tunable")
    state = _Tunable()
    kept = "kept and answered; a slot's GEMMs are priced by the cost model, so nothing is tuned"

    def setting(name, fn):
        fn.__name__ = fn.__qualname__ = name
        PATCHES.set(tunable, name, _serve(f"torch.cuda.tunable.{name}", "same", kept)(fn))

    def get(attr):
        return lambda: getattr(state, attr)

    def non_negative(what: str, value) -> int:
        if int(value) < 0:
            raise ValueError(f"torch.cuda.tunable: {what} must be non-negative, got {value}")
        return int(value)

    # torch's own parameter names (a script may pass them by keyword).
    def enable(val: bool = True) -> None:
        state.enabled = bool(val)

    def tuning_enable(val: bool = True) -> None:
        state.tuning = bool(val)

    def record_untuned_enable(val: bool = True) -> None:
        state.record_untuned = bool(val)

    def set_max_tuning_duration(duration: int) -> None:
        state.max_duration_ms = non_negative("duration", duration)

    def set_max_tuning_iterations(iterations: int) -> None:
        state.max_iterations = non_negative("iterations", iterations)

    for fn in (enable, tuning_enable, record_untuned_enable, set_max_tuning_duration, set_max_tuning_iterations):
        setting(fn.__name__, fn)
    setting("is_enabled", get("enabled"))
    setting("tuning_is_enabled", get("tuning"))
    setting("record_untuned_is_enabled", get("record_untuned"))
    setting("get_max_tuning_duration", get("max_duration_ms"))
    setting("get_max_tuning_iterations", get("max_iterations"))

    def set_filename(filename: str, insert_device_ordinal: bool = False) -> None:
        if insert_device_ordinal:
            stem, ext = os.path.splitext(str(filename))
            filename = f"{stem}{api.current_device.__wrapped__()}{ext}"
        state.filename = str(filename)
    setting("set_filename", set_filename)
    setting("get_filename", get("filename"))
    setting("get_results", lambda: ())
    setting("get_validators", lambda: ())

    def read_file(filename: str | None = None) -> bool:
        return False  # nothing tuned is used on a slot: no results are read
    setting("read_file", read_file)

    def set_rotating_buffer_size(buffer_size: int) -> None:
        state.rotating_buffer_mb = int(buffer_size)
    setting("set_rotating_buffer_size", set_rotating_buffer_size)
    setting("get_rotating_buffer_size", lambda: max(state.rotating_buffer_mb, 0) * 1024)

    def set_numerical_check_tolerances(enable: bool, atol: float = 1e-5, rtol: float = 1e-5) -> None:
        state.numerical_check = (bool(enable), float(atol), float(rtol))
    setting("set_numerical_check_tolerances", set_numerical_check_tolerances)


# torch.cuda.comm: DataParallel's communication, with CUDA indices.

def _comm() -> None:
    from interop import data_parallel

    comm = _module("torch.cuda.comm")
    note = "copies and sums between the mapped slots (modelled copies on the rack's fabric)"

    def slot(device):
        return device if isinstance(device, torch.Tensor) or device in (-1, "cpu") else mapping.to_hybrid(device)

    def slots(devices):
        return None if devices is None else [slot(d) for d in devices]

    def served_comm(name, fn):
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = getattr(data_parallel, name).__doc__
        PATCHES.set(comm, name, _serve(f"torch.cuda.comm.{name}", "mapped", note)(fn))

    served_comm("broadcast", lambda tensor, devices=None, *, out=None: data_parallel.broadcast(
        tensor, slots(devices), out=out))
    served_comm("broadcast_coalesced", lambda tensors, devices, buffer_size=10485760:
                data_parallel.broadcast_coalesced(tensors, slots(devices), buffer_size))
    served_comm("reduce_add", lambda inputs, destination=None: data_parallel.reduce_add(
        inputs, None if destination is None else slot(destination)))
    served_comm("reduce_add_coalesced", lambda inputs, destination=None, buffer_size=10485760:
                data_parallel.reduce_add_coalesced(inputs, None if destination is None else slot(destination),
                                                   buffer_size))
    served_comm("scatter", lambda tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None:
                data_parallel.scatter(tensor, slots(devices), chunk_sizes, dim, streams, out=out))
    served_comm("gather", lambda tensors, dim=0, destination=None, *, out=None: data_parallel.gather(
        tensors, dim, None if destination is None else slot(destination), out=out))


# torch.cuda.profiler: nvprof/nsys capture ranges; there is no CUDA profiler behind a slot.

def _cuda_profiler() -> None:
    profiler = _module("torch.cuda.profiler")
    note = "accepted: no CUDA profiler runs behind a slot (torch.profiler records the slots' ops, modelled)"

    @_serve("torch.cuda.profiler.start", "same", note)
    def start():
        return None

    @_serve("torch.cuda.profiler.stop", "same", note)
    def stop():
        return None

    @_serve("torch.cuda.profiler.profile", "same", note)
    @contextlib.contextmanager
    def profile():
        yield

    for fn in (start, stop, profile):
        PATCHES.set(profiler, fn.__name__, fn)


# torch.cuda itself: the names the layer serves here rather than in api.py.

def _cuda_extras() -> None:
    cuda = torch.cuda

    @_serve("torch.cuda.caching_allocator_enable", "same", "accepted: the slot allocator caches nothing")
    def caching_allocator_enable(value: bool = True) -> None:
        return None

    @_serve("torch.cuda.caching_allocator_disabled", "same", "accepted: the slot allocator caches nothing")
    @contextlib.contextmanager
    def caching_allocator_disabled():
        yield

    @_serve("torch.cuda.get_gencode_flags", "mapped", "the -gencode flags of the mapped kinds' architectures")
    def get_gencode_flags() -> str:
        arches = api.get_arch_list.__wrapped__()
        return " ".join(f"-gencode compute=compute_{a[3:]},code={a}" for a in arches)

    for fn in (caching_allocator_enable, caching_allocator_disabled, get_gencode_flags):
        PATCHES.set(cuda, fn.__name__, fn)
    PATCHES.set(cuda, "has_magma", True)


# torch.backends.cuda and torch.backends.cudnn: what CUDA's build answers.

class _PlanCache:
    """One device's cuFFT plan cache, as torch.backends.cuda.cufft_plan_cache[i] answers: FFTs on a slot run
    the CPU's kernels, so no plan is ever cached (size 0); max_size is kept."""

    def __init__(self) -> None:
        self.max_size = 4096  # cuFFT's plan cache default (CUDA 10+), as torch documents

    @property
    def size(self) -> int:
        return 0

    def clear(self) -> None:
        return None


class _PlanCacheManager:
    """``torch.backends.cuda.cufft_plan_cache``: indexable by CUDA device; attributes are the current device's."""

    def __init__(self) -> None:
        self._caches: dict[int, _PlanCache] = {}

    def __getitem__(self, device) -> _PlanCache:
        touch("torch.backends.cuda.cufft_plan_cache", "same", "no cuFFT plans are cached on a slot")
        index = api.current_device.__wrapped__() if device is None else mapping.cuda_index_of_slot(
            mapping.slot_of(device))
        return self._caches.setdefault(index, _PlanCache())

    def __getattr__(self, name: str):
        return getattr(self[None], name)

    def __setattr__(self, name: str, value) -> None:
        if name == "_caches":
            object.__setattr__(self, name, value)
        else:
            setattr(self[None], name, value)


def _backends() -> None:
    cuda_backend = torch.backends.cuda
    cudnn_module = torch.backends.cudnn.m  # the module behind cudnn's PropModule (its setattr records flags)

    @_serve("torch.backends.cuda.is_built", "same", "True: CUDA code sees a CUDA build")
    def is_built() -> bool:
        return True

    @_serve("torch.backends.cuda.is_flash_attention_available", "mapped",
            "True: SDPA on a slot runs (the CPU's kernel choice); a CUDA build answers True")
    def is_flash_attention_available() -> bool:
        return True

    @_serve("torch.backends.cuda.is_ck_sdpa_available", "same", "False: Composable Kernel is ROCm's")
    def is_ck_sdpa_available() -> bool:
        return False

    def can_use(name):
        @_serve(f"torch.backends.cuda.{name}", "mapped",
                "False: a slot never runs CUDA's fused attention kernels (its SDPA choice is the CPU's)")
        def fn(params, debug: bool = False) -> bool:
            return False
        fn.__name__ = fn.__qualname__ = name
        return fn

    for fn in (is_built, is_flash_attention_available, is_ck_sdpa_available, can_use("can_use_flash_attention"),
               can_use("can_use_efficient_attention"), can_use("can_use_cudnn_attention")):
        PATCHES.set(cuda_backend, fn.__name__, fn)
    PATCHES.set(cuda_backend, "cufft_plan_cache", _PlanCacheManager())
    api.SERVED["torch.backends.cuda.cufft_plan_cache"] = ("same", "no cuFFT plans are cached on a slot: size 0, "
                                                                   "max_size kept, clear() accepted")

    @_serve("torch.backends.cudnn.is_available", "same", "True: CUDA code sees cuDNN (nothing of it runs)")
    def is_available() -> bool:
        return True

    @_serve("torch.backends.cudnn.version", "same", "the cuDNN version the layer reports (CUDA_STACK)")
    def version() -> int:
        return CUDA_STACK["cudnn"]

    @_serve("torch.backends.cudnn.is_acceptable", "mapped",
            "cuDNN's answer for a tensor on a mapped slot: enabled and a cuDNN dtype")
    def is_acceptable(tensor) -> bool:
        return (bool(torch._C._get_cudnn_enabled()) and bool(getattr(tensor, "is_cuda", False))
                and tensor.dtype in cudnn_module.CUDNN_TENSOR_DTYPES)

    for fn in (is_available, version, is_acceptable):
        PATCHES.set(cudnn_module, fn.__name__, fn)
    PATCHES.set(torch.version, "cuda", CUDA_STACK["cuda"])


_REFUSED_HERE = {
    "torch.cuda.GreenContext": "nothing: green contexts (SM partitions) are not modelled; use the whole slot",
    "torch.cuda.green_contexts.GreenContext": "nothing: green contexts (SM partitions) are not modelled",
    "torch.cuda.nccl.unique_id": "torch.distributed.init_process_group('nccl') (the hybrid backend)",
    "torch.cuda.nccl.init_rank": "torch.distributed.init_process_group('nccl') (the hybrid backend)",
    "torch.cuda.tunable.tune_gemm_in_file": "nothing to tune: a slot's GEMMs are priced by the cost model "
                                            "(tune on the real GPU)",
    "torch.cuda.tunable.mgpu_tune_gemm_in_file": "nothing to tune: a slot's GEMMs are priced by the cost model "
                                                 "(tune on the real GPU)",
    "torch.cuda.gds.GdsFile": "read the file on the host (torch.load, torch.from_file), then .to('cuda')",
    "torch.cuda.gds.gds_register_buffer": "read the file on the host, then .to('cuda') (no GPUDirect Storage)",
    "torch.cuda.gds.gds_deregister_buffer": "read the file on the host, then .to('cuda') (no GPUDirect Storage)",
    "torch.cuda.host_memory_stats_as_nested_dict": "torch.cuda.memory_stats() (pinned host memory is not counted "
                                                   "per slot)",
    "torch.cuda.reset_accumulated_host_memory_stats": "torch.cuda.reset_accumulated_memory_stats()",
    "torch.cuda.reset_peak_host_memory_stats": "torch.cuda.reset_peak_memory_stats()",
    "torch.backends.cuda.cublas_workspace_size": "nothing to size: a slot has no cuBLAS workspace",
    "torch.backends.cuda.cublaslt_workspace_size": "nothing to size: a slot has no cuBLASLt workspace",
    "torch.backends.cuda.blas_workspace_size": "nothing to size: a slot has no BLAS workspace",
}
for _name in ("BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double", "Float", "Half", "Int",
              "Long", "Short"):
    _REFUSED_HERE[f"torch.cuda.{_name}Storage"] = (f"torch.empty(n, dtype=..., device='cuda').untyped_storage() "
                                                   "(typed storages are legacy)")
    _REFUSED_HERE[f"torch.cuda.sparse.{_name}Tensor"] = ("torch.sparse_coo_tensor(indices, values, size, "
                                                         "device='cuda') (typed constructors are legacy)")
UNSUPPORTED.update(_REFUSED_HERE)  # refused with the others by interop.cuda_layer.cuda_module


def import_all() -> None:
    """Import every namespace walked (torch loads some of torch.cuda's submodules only on first use), so that
    every refusal and replacement reaches its module."""
    for namespace in NAMESPACES:
        module = _module(namespace)
        if namespace.startswith("torch.cuda.") and namespace not in _REEXPORTS:
            _REEXPORTS[namespace] = {name for name in public_names(namespace)
                                     if getattr(module, name, None) is getattr(torch.cuda, name, object())}


def install() -> None:
    """Serve, answer or refuse every name of :data:`NAMESPACES` not already handled by
    :mod:`interop.cuda_layer.cuda_module` (which handles torch.cuda's top level)."""
    _cuda_extras()
    _nccl()
    _tunable()
    _cuda_profiler()
    _comm()
    _backends()
    for namespace in NAMESPACES[1:]:
        if namespace.startswith("torch.cuda."):
            _mirror_top_level(namespace)


__all__ = ["ANSWERED", "CUDA_STACK", "NAMESPACES", "classify", "install", "markdown", "public_names", "rows"]
