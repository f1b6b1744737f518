"""Installing the CUDA layer: every patch made once, at start, and undone by :func:`uninstall`.

What is patched (each patch records its use for the report):

- ``torch.cuda`` (and ``.memory``, ``.random``, ``.streams``, ``.nvtx``, ``.amp``) answered for the
  mapped slots (:mod:`interop.cuda.api`); the APIs the rack cannot serve raise, naming the call site and
  what to use instead; the legacy ``torch.cuda.FloatTensor``... types, each with its own dtype.
- Device arguments in every form (str, torch.device, int, dict) in every torch factory (every function
  whose ATen schema has a ``device`` argument, and torch's device constructors), ``Tensor.to``,
  ``Tensor.new_*``, ``Tensor.cuda``, ``Tensor.is_cuda``, ``Tensor.pin_memory``, ``UntypedStorage``,
  ``Module.to``/``to_empty``/``cuda``, ``torch.load(map_location=...)`` (and CUDA checkpoints loaded
  without one), ``torch.Generator``, ``torch.set_default_device`` and ``with torch.device("cuda")``.
- ``torch.autocast("cuda")``, ``torch.amp.GradScaler("cuda")``, the autocast state queries.
- ``torch.distributed``: ``init_process_group("nccl")`` and ``new_group(backend="nccl")`` create the
  project's ``hybrid`` backend on the rank's mapped slot, ``get_backend`` answers ``"nccl"`` for them,
  ``is_nccl_available()`` is True, DDP's ``device_ids``/``output_device``, FSDP's ``device_id``,
  ``init_device_mesh("cuda", ...)``, ``barrier(device_ids=...)`` and the object collectives' ``device``.
- ``torch.backends.cuda`` / ``torch.backends.cudnn`` flags and ``torch.set_float32_matmul_precision``:
  accepted and recorded, the ones that change numerics on a real GPU marked.

Triton, torch.compile and torch.jit are left as they are.  Nothing here sits on the per-op path: an op on
a hybrid tensor never reaches Python because of the layer.
"""

from __future__ import annotations

import functools
import sys
import types

import torch

from interop.cuda import api, mapping
from interop.cuda.usage import LOG, touch

# -- the patch ledger ---------------------------------------------------------------------------------------

_MISSING = object()


class Patches:
    """Every (object, attribute, original) the layer replaced, so :meth:`undo` restores them all."""

    def __init__(self) -> None:
        self.done: list[tuple[object, str, object]] = []

    def set(self, owner, name: str, value) -> None:
        original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        self.done.append((owner, name, original))
        setattr(owner, name, value)

    def undo(self) -> None:
        for owner, name, original in reversed(self.done):
            if original is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, original)
        self.done.clear()


PATCHES = Patches()
ORIGINAL: dict[str, object] = {}
"""Originals the layer itself calls (``"torch.load"``, ``"Tensor.to"``...)."""


def _keep(key: str, fn):
    ORIGINAL.setdefault(key, fn)
    return ORIGINAL[key]


# -- device arguments --------------------------------------------------------------------------------------

def _translate(value, ints: bool = True):
    if isinstance(value, dict):
        return {_translate_key(k): _translate(v, ints) for k, v in value.items()}
    return mapping.to_hybrid(value, ints=ints)


def _translate_key(key):
    return str(mapping.to_hybrid(key)) if mapping.is_cuda_like(key) else key


def _names_cuda(value) -> bool:
    return (mapping.is_cuda_like(value) or (isinstance(value, int) and not isinstance(value, bool))
            or isinstance(value, dict))


def device_kwarg(fn, api_name: str, *, kwarg: str = "device", ints: bool = True):
    """``fn`` with its ``kwarg`` translated (CUDA forms -> the mapped slot); records CUDA uses."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        value = kwargs.get(kwarg)
        if value is not None and _names_cuda(value):
            touch(api_name, "mapped", f"{kwarg}= names the mapped slot")
            kwargs[kwarg] = _translate(value, ints)
        return fn(*args, **kwargs)
    return wrapper


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

def _first_positional_device(args) -> bool:
    return bool(args) and (mapping.is_cuda_like(args[0]) or (isinstance(args[0], int)
                                                               and not isinstance(args[0], bool)))


def _tensor_to(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if _first_positional_device(args):
            touch("Tensor.to(cuda)", "mapped", "the mapped slot")
            args = (mapping.to_hybrid(args[0]),) + args[1:]
        else:
            device = kwargs.get("device")
            if device is not None and _names_cuda(device):
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
        return original(self) if device is None or _names_cuda(device) else original(self, device)
    return pin_memory


def _module_to(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if _first_positional_device(args):
            touch("Module.to(cuda)", "mapped", "parameters and buffers on the mapped slot")
            args = (mapping.to_hybrid(args[0]),) + args[1:]
        elif kwargs.get("device") is not None and _names_cuda(kwargs["device"]):
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
        if map_location is not None and _names_cuda(map_location):
            touch("torch.load(map_location=cuda)", "mapped", "CUDA locations load onto the mapped slot")
        return original(f, _map_location(map_location), *args, **kwargs)
    return load


# -- autocast and GradScaler -------------------------------------------------------------------------------

def _autocast_init(original):
    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            touch("torch.autocast(device_type='cuda')", "mapped",
                  "autocast on the hybrid slots with CUDA's policy (default dtype float16)")
            if dtype is None:
                dtype = ORIGINAL["get_autocast_dtype"]("cuda")
            device_type = "hybrid"
        original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    return __init__


def _device_type_arg(original, api_name: str):
    @functools.wraps(original)
    def fn(*args, **kwargs):
        if args and args[0] == "cuda":
            touch(api_name, "mapped", "the hybrid slots' autocast state")
            args = ("hybrid",) + args[1:]
        elif kwargs.get("device_type") == "cuda":
            touch(api_name, "mapped", "the hybrid slots' autocast state")
            kwargs["device_type"] = "hybrid"
        return original(*args, **kwargs)
    return fn


def _grad_scaler_init(original):
    @functools.wraps(original)
    def __init__(self, device="cuda", *args, **kwargs):
        if device == "cuda":
            touch("torch.amp.GradScaler('cuda')", "mapped", "loss scaling on the hybrid slots")
            device = "hybrid"
        original(self, device, *args, **kwargs)
    return __init__


# -- torch.cuda itself --------------------------------------------------------------------------------------

_KEEP = {"amp", "nvtx", "memory", "random", "streams", "graphs", "jiterator", "comm", "sparse", "tunable", "gds",
         "green_contexts", "profiler", "nccl", "OutOfMemoryError", "CudaError", "AcceleratorError",
         "DeferredCudaCallError", "Device", "classproperty", "check_error", "cudaStatus", "DEVICE_REQUIREMENT",
         "PYTORCH_RELEASES_CODE_CC", "has_half", "has_magma"}


def _patch_torch_cuda() -> None:
    cuda = torch.cuda
    submodules = [cuda] + [getattr(cuda, m) for m in ("memory", "random", "streams") if hasattr(cuda, m)]
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
    for api_name, instead in api.UNSUPPORTED.items():
        *owner_path, short = api_name.split(".")
        owner = torch
        for part in owner_path[1:]:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if owner is not None and hasattr(owner, short):
            PATCHES.set(owner, short, api.unsupported(api_name, instead, getattr(owner, short)))
    # Public functions of torch.cuda that nothing above answers: refused by name, never half-working.
    for name, value in list(vars(cuda).items()):
        if name.startswith("_") or name in _KEEP or f"torch.cuda.{name}" in api.SERVED:
            continue
        if getattr(value, "__hybrid_api__", None) is not None:
            continue
        if isinstance(value, types.FunctionType) and (value.__module__ or "").startswith("torch.cuda"):
            PATCHES.set(cuda, name, api.unsupported(f"torch.cuda.{name}", "no equivalent on the rack"))
    # torch internals reach these private helpers once CUDA looks available.
    PATCHES.set(cuda, "_lazy_init", lambda: None)
    PATCHES.set(cuda, "_is_in_bad_fork", lambda: False)
    PATCHES.set(cuda, "_initialized", True)
    PATCHES.set(cuda, "_get_device_index", _get_device_index)
    _patch_nvtx()
    _patch_amp_module()


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    if device is None:
        if optional:
            return api.current_device.__wrapped__()
        raise ValueError("Expected a torch.device with a specified index or an integer, but got: None")
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type == "cpu":
            if allow_cpu:
                return -1
            raise ValueError(f"Expected a cuda device, but got: {device}")
        if device.index is None:
            return api.current_device.__wrapped__() if optional else -1
        return device.index if device.type == "cuda" else mapping.cuda_index_of_slot(device.index)
    return int(device)


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


# -- torch.backends flags -----------------------------------------------------------------------------------

NUMERICS_FLAGS: dict[str, str] = {
    "torch.backends.cuda.matmul.allow_tf32": "float32 matmuls run on TF32 tensor cores (10-bit mantissa)",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": "fp16 GEMMs may reduce in fp16",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": "bf16 GEMMs may reduce in bf16",
    "torch.backends.cuda.matmul.allow_fp16_accumulation": "fp16 GEMMs accumulate in fp16",
    "torch.backends.cuda.matmul.fp32_precision": "float32 matmul precision (tf32 / ieee)",
    "torch.backends.cudnn.allow_tf32": "float32 convolutions run on TF32 tensor cores",
    "torch.backends.cudnn.benchmark": "cuDNN picks algorithms by timing: results may differ run to run",
    "torch.backends.cudnn.deterministic": "restricts cuDNN to deterministic algorithms",
    "torch.backends.cudnn.fp32_precision": "float32 convolution precision (tf32 / ieee)",
    "torch.set_float32_matmul_precision": "'high'/'medium' let float32 matmuls use TF32 / bf16 passes",
    "torch.backends.cuda.enable_flash_sdp": "selects the SDPA kernel (rounding differs between kernels)",
    "torch.backends.cuda.enable_mem_efficient_sdp": "selects the SDPA kernel (rounding differs between kernels)",
    "torch.backends.cuda.enable_math_sdp": "selects the SDPA kernel (rounding differs between kernels)",
    "torch.backends.cuda.enable_cudnn_sdp": "selects the SDPA kernel (rounding differs between kernels)",
}
"""Settings that change numerics (or determinism) on a real GPU; the emulated slots compute exactly as the
CPU whatever they say, so the report lists them."""


def _patch_flags() -> None:
    cublas_cls = type(torch.backends.cuda.matmul)
    original_cublas = cublas_cls.__setattr__

    def cublas_setattr(self, name, value):
        key = f"torch.backends.cuda.matmul.{name}"
        LOG.flag(key, value, key in NUMERICS_FLAGS, NUMERICS_FLAGS.get(key, "accepted"))
        return original_cublas(self, name, value)
    PATCHES.set(cublas_cls, "__setattr__", cublas_setattr)

    cudnn_cls = type(torch.backends.cudnn)
    original_cudnn = cudnn_cls.__setattr__

    def cudnn_setattr(self, name, value):
        key = f"torch.backends.cudnn.{name}"
        LOG.flag(key, value, key in NUMERICS_FLAGS, NUMERICS_FLAGS.get(key, "accepted"))
        return original_cudnn(self, name, value)
    PATCHES.set(cudnn_cls, "__setattr__", cudnn_setattr)

    def recorded(owner, name: str, key: str):
        original = getattr(owner, name)

        @functools.wraps(original)
        def fn(*args, **kwargs):
            value = args[0] if args else next(iter(kwargs.values()), None)
            LOG.flag(key, value, key in NUMERICS_FLAGS, NUMERICS_FLAGS.get(key, "accepted"))
            return original(*args, **kwargs)
        PATCHES.set(owner, name, fn)

    recorded(torch, "set_float32_matmul_precision", "torch.set_float32_matmul_precision")
    for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp",
                 "preferred_linalg_library", "preferred_blas_library"):
        if hasattr(torch.backends.cuda, name):
            recorded(torch.backends.cuda, name, f"torch.backends.cuda.{name}")


# -- torch.distributed --------------------------------------------------------------------------------------

_NCCL_GROUPS: set = set()
"""Process groups created for an "nccl" request (their get_backend() answers "nccl")."""


def _backend_for(backend):
    """"nccl" (and "cuda:nccl" in a per-device spec) -> "hybrid"; anything else unchanged."""
    if backend is None:
        return None, False
    text = str(backend)
    if text.lower() == "nccl":
        return "hybrid", True
    if ":" in text and "nccl" in text.lower():
        parts = []
        for item in text.split(","):
            dev, _, name = item.partition(":")
            dev = "hybrid" if dev.strip() == "cuda" else dev.strip()
            name = "hybrid" if name.strip().lower() == "nccl" else name.strip()
            parts.append(f"{dev}:{name}")
        return ",".join(parts), True
    return backend, False


def _rank_slot_options():
    import os

    import collectives.distributed as cd

    local = os.environ.get("LOCAL_RANK")
    if local is not None:
        return cd.Options(slot=mapping.current().slot(int(local)))
    from interop import _C

    return cd.Options(slot=_C._current_slot())


def _patch_distributed() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    original_init = dist.init_process_group

    @functools.wraps(original_init)
    def init_process_group(backend=None, *args, **kwargs):
        backend, was_nccl = _backend_for(backend if backend is not None else kwargs.pop("backend", None))
        if was_nccl:
            touch("torch.distributed.init_process_group('nccl')", "mapped",
                  "the project's 'hybrid' backend (Gloo moves the bytes, the rack models the time)")
            if kwargs.get("pg_options") is None:
                kwargs["pg_options"] = _rank_slot_options()
            kwargs.pop("device_id", None) if kwargs.get("device_id") is None else \
                kwargs.__setitem__("device_id", mapping.to_hybrid(kwargs["device_id"]))
        out = original_init(backend, *args, **kwargs)
        if was_nccl:
            _NCCL_GROUPS.add(dist.group.WORLD)
        return out
    PATCHES.set(dist, "init_process_group", init_process_group)
    import torch.distributed.distributed_c10d as c10d

    PATCHES.set(c10d, "init_process_group", init_process_group)

    original_new_group = dist.new_group

    @functools.wraps(original_new_group)
    def new_group(*args, **kwargs):
        backend, was_nccl = _backend_for(kwargs.get("backend"))
        if was_nccl:
            touch("torch.distributed.new_group(backend='nccl')", "mapped", "a 'hybrid' sub-group")
            kwargs["backend"] = backend
        group = original_new_group(*args, **kwargs)
        if was_nccl or (kwargs.get("backend") is None and dist.group.WORLD in _NCCL_GROUPS):
            _NCCL_GROUPS.add(group)
        return group
    PATCHES.set(dist, "new_group", new_group)
    PATCHES.set(c10d, "new_group", new_group)

    original_get_backend = dist.get_backend

    @functools.wraps(original_get_backend)
    def get_backend(group=None):
        name = original_get_backend(group)
        key = dist.group.WORLD if group is None else group
        if name == "hybrid" and key in _NCCL_GROUPS:
            touch("torch.distributed.get_backend", "same", "answers 'nccl' for groups created as 'nccl'")
            return dist.Backend.NCCL
        return name
    PATCHES.set(dist, "get_backend", get_backend)
    PATCHES.set(c10d, "get_backend", get_backend)

    def is_nccl_available() -> bool:
        touch("torch.distributed.is_nccl_available", "mapped", "True: 'nccl' requests get the hybrid backend")
        return True
    PATCHES.set(dist, "is_nccl_available", is_nccl_available)
    PATCHES.set(c10d, "is_nccl_available", is_nccl_available)

    original_barrier = dist.barrier

    @functools.wraps(original_barrier)
    def barrier(*args, **kwargs):
        if kwargs.get("device_ids") is not None:
            touch("torch.distributed.barrier(device_ids=...)", "mapped", "barrier on the hybrid group")
            kwargs.pop("device_ids")
        return original_barrier(*args, **kwargs)
    PATCHES.set(dist, "barrier", barrier)
    PATCHES.set(c10d, "barrier", barrier)

    for name in ("broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
                 "send_object_list", "recv_object_list"):
        if hasattr(dist, name):
            wrapped = device_kwarg(getattr(dist, name), f"torch.distributed.{name}(device=cuda)")
            PATCHES.set(dist, name, wrapped)

    from torch.nn.parallel import DistributedDataParallel as DDP

    original_ddp = DDP.__init__

    @functools.wraps(original_ddp)
    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if device_ids is not None:
            touch("DistributedDataParallel(device_ids=...)", "mapped", "the ranks' mapped slots")
            device_ids = [mapping.to_hybrid(d) for d in device_ids]
        if output_device is not None:
            output_device = mapping.to_hybrid(output_device)
        original_ddp(self, module, device_ids, output_device, *args, **kwargs)
    PATCHES.set(DDP, "__init__", ddp_init)

    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:
        FSDP = None
    if FSDP is not None:
        PATCHES.set(FSDP, "__init__", device_kwarg(FSDP.__init__, "FullyShardedDataParallel(device_id=...)",
                                                   kwarg="device_id"))
    try:
        import torch.distributed.device_mesh as dm
    except ImportError:
        dm = None
    if dm is not None:
        original_mesh = dm.init_device_mesh

        @functools.wraps(original_mesh)
        def init_device_mesh(device_type, *args, **kwargs):
            if device_type == "cuda":
                touch("init_device_mesh('cuda')", "mapped", "a mesh of hybrid slots")
                device_type = "hybrid"
            return original_mesh(device_type, *args, **kwargs)
        PATCHES.set(dm, "init_device_mesh", init_device_mesh)
        PATCHES.set(dist, "init_device_mesh", init_device_mesh) if hasattr(dist, "init_device_mesh") else None


# -- torch.accelerator ------------------------------------------------------------------------------------

def _outside_torch(depth: int = 2) -> bool:
    """True when the caller ``depth`` frames up is user or library code, not torch's or interop's own."""
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
        if _outside_torch() and device is not None and _names_cuda(device):
            device = mapping.slot_of(device)
        original["set_device_index"](device)

    def current_stream(device=None):
        if _outside_torch() and device is not None and _names_cuda(device):
            device = mapping.slot_of(device)
        return original["current_stream"](device)

    def synchronize(device=None) -> None:
        if device is not None and _names_cuda(device):
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


# -- the profiler --------------------------------------------------------------------------------------------

def _patch_profiler() -> None:
    from torch import profiler as _profiler  # noqa: F401  (loads torch.profiler)

    original = torch.profiler.profile.__init__

    @functools.wraps(original)
    def init(self, *args, activities=None, **kwargs):
        if activities is not None:
            activities = list(activities)
            if torch.profiler.ProfilerActivity.CUDA in activities:
                touch("torch.profiler.ProfilerActivity.CUDA", "modelled",
                      "device activity of the hybrid slots (modelled durations merged into the trace)")
                activities = [a for a in activities if a != torch.profiler.ProfilerActivity.CUDA]
                if torch.profiler.ProfilerActivity.PrivateUse1 not in activities:
                    activities.append(torch.profiler.ProfilerActivity.PrivateUse1)
        original(self, *args, activities=activities, **kwargs)
    PATCHES.set(torch.profiler.profile, "__init__", init)


# -- install ----------------------------------------------------------------------------------------------------

def install_patches() -> None:
    """Make every patch (once)."""
    if PATCHES.done:
        return
    _keep("Tensor.to", torch.Tensor.to)
    _keep("torch.load", torch.load)
    _keep("get_autocast_dtype", torch.get_autocast_dtype)

    _patch_torch_cuda()

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

    autocast_cls = torch.amp.autocast_mode.autocast
    PATCHES.set(autocast_cls, "__init__", _autocast_init(autocast_cls.__init__))
    for name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
        PATCHES.set(torch, name, _device_type_arg(getattr(torch, name), f"torch.{name}('cuda')"))
    from torch.amp import autocast_mode as am

    PATCHES.set(am, "is_autocast_available", _device_type_arg(am.is_autocast_available,
                                                              "torch.amp.is_autocast_available('cuda')"))
    scaler_cls = torch.amp.GradScaler
    PATCHES.set(scaler_cls, "__init__", _grad_scaler_init(scaler_cls.__init__))

    _patch_flags()
    _patch_accelerator()
    _patch_distributed()
    _patch_profiler()


def device_kwarg_positional(fn, api_name: str, index: int = 0):
    """``fn`` whose device is its positional argument ``index`` (or ``device=``), translated."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > index and _names_cuda(args[index]):
            touch(api_name, "mapped", "the mapped slot")
            args = args[:index] + (mapping.to_hybrid(args[index]),) + args[index + 1:]
        elif kwargs.get("device") is not None and _names_cuda(kwargs["device"]):
            touch(api_name, "mapped", "the mapped slot")
            kwargs["device"] = mapping.to_hybrid(kwargs["device"])
        return fn(*args, **kwargs)
    return wrapper


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
            if _names_cuda(device):
                touch("torch.Generator(device='cuda')", "same", "a generator of the mapped slot")
                device = mapping.to_hybrid(device)
            return base.__new__(base, device)

    Generator.__module__ = "torch"
    Generator.__qualname__ = "Generator"
    return Generator


def uninstall_patches() -> None:
    """Restore every patched attribute."""
    PATCHES.undo()
    _NCCL_GROUPS.clear()


__all__ = ["NUMERICS_FLAGS", "ORIGINAL", "PATCHES", "install_patches", "uninstall_patches"]
