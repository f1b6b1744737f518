"""``torch.cuda`` answered for the mapped slots, in CUDA's terms.

Device arguments are CUDA's (an index, ``"cuda:N"``, ``torch.device("cuda", N)``;
a hybrid device is accepted too); answers are CUDA's (``current_device()`` is a
CUDA index, ``get_device_name`` the mapped chip's name,
``get_device_capability`` its compute capability, or Trainium's documented
answer).  Each function records its use (:mod:`interop.cuda_layer.usage`) with how it
was served.  ``SERVED`` lists every API this module answers;
:data:`interop.cuda_layer.refusals.UNSUPPORTED` the ones the layer refuses, with what to use instead.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict

import torch

from interop.cuda_layer import mapping
from interop.cuda_layer.usage import touch

SERVED: dict[str, tuple[str, str]] = {}
"""``"torch.cuda.name"`` -> (how served, note), for every API below."""


def served(how: str, note: str = "", name: str | None = None, *, qualified: str | None = None):
    """Register a torch.cuda replacement and count its calls. ``qualified`` names an API outside torch.cuda's top
    level (``"torch.cuda.tunable.enable"``)."""
    def deco(fn):
        api = qualified or f"torch.cuda.{name or fn.__name__}"
        SERVED[api] = (how, note)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            touch(api, how, note)
            return fn(*args, **kwargs)

        wrapper.__hybrid_api__ = api
        return wrapper
    return deco


def _hybrid():
    return torch.hybrid  # registered by `import interop`


def _row(slot: int):
    from interop.rack import current_rack

    return current_rack().devices[slot]


# -- devices ----------------------------------------------------------------------------------------------

@served("mapped", "True while the rack has mapped slots")
def is_available() -> bool:
    return len(mapping.current()) > 0


@served("same", "the runtime initialises at import")
def is_initialized() -> bool:
    return True


@served("same", "nothing to initialise")
def init() -> None:
    return None


@served("mapped", "the number of mapped slots")
def device_count() -> int:
    return len(mapping.current())


@served("mapped", "the CUDA index of the current slot")
def current_device() -> int:
    from interop import _C

    return mapping.cuda_index_of_slot(_C._current_slot())


@served("mapped", "makes the mapped slot current")
def set_device(device) -> None:
    if device is None or (isinstance(device, int) and device < 0):
        return
    _hybrid().set_device(mapping.slot_of(device))


class device:
    """``torch.cuda.device(i)``: makes the mapped slot of ``cuda:i`` current inside the block."""

    def __init__(self, device):
        touch("torch.cuda.device", "mapped", "context manager over the mapped slot")
        self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else mapping.slot_of(device)
        self.prev_idx = -1

    def __enter__(self):
        from interop import _C

        self.prev_idx = _C._current_slot()
        if self.idx >= 0:
            _hybrid().set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            _hybrid().set_device(self.prev_idx)
        return False


SERVED["torch.cuda.device"] = ("mapped", "context manager over the mapped slot")


class device_of(device):
    """``torch.cuda.device_of(tensor)``: the tensor's slot, current inside the block."""

    def __init__(self, obj):
        super().__init__(obj.device if obj.device.type in ("hybrid", "cuda") else None)


SERVED["torch.cuda.device_of"] = ("mapped", "context manager over the tensor's slot")


@served("mapped", "the mapped chip's catalogue name")
def get_device_name(device=None) -> str:
    return _row(mapping.slot_of(device)).spec.name


@served("mapped", "GPU kinds: the real compute capability; Trainium: the documented answer of its capability table")
def get_device_capability(device=None) -> tuple[int, int]:
    ident = _identity(mapping.slot_of(device))
    return ident.major, ident.minor


@served("mapped", "the mapped chip: name, compute capability, modelled HBM capacity, SM (NeuronCore) count")
def get_device_properties(device=None) -> "CudaDeviceProperties":
    return CudaDeviceProperties.of_slot(mapping.slot_of(device))


@served("mapped", "the sm_XY of every mapped kind")
def get_arch_list() -> list[str]:
    slots = mapping.current().slots
    return sorted({f"sm_{_identity(s).major}{_identity(s).minor}" for s in slots})


@served("mapped", "every catalogued kind computes in bfloat16")
def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


@served("mapped", "TF32 tensor cores from compute capability 8.0 (Trainium: TF32 is a NeuronCore type)")
def is_tf32_supported() -> bool:
    return all(_identity(s).major >= 8 for s in mapping.current().slots)


@served("same", "synchronizes the mapped slot and brings the modelled timeline up to date")
def synchronize(device=None) -> None:
    _hybrid().synchronize(mapping.slot_of(device))


@served("same", "no inter-process handles to collect")
def ipc_collect() -> None:
    return None


@served("same", "accepted; emulated slots never synchronize implicitly")
def set_sync_debug_mode(debug_mode) -> None:
    return None


@served("same", "0: synchronizing operations are not reported")
def get_sync_debug_mode() -> int:
    return 0


@served("mapped", "slot peers share the rack's fabric")
def can_device_access_peer(device, peer_device) -> bool:
    mapping.slot_of(device), mapping.slot_of(peer_device)
    return True


def _identity(slot: int):
    import devices

    return devices.capabilities(_row(slot).kind).cuda


class CudaDeviceProperties:
    """What ``torch.cuda.get_device_properties`` returns for a mapped slot (torch's field names)."""

    __slots__ = ("name", "major", "minor", "total_memory", "multi_processor_count", "L2_cache_size",
                 "is_integrated", "is_multi_gpu_board", "max_threads_per_multi_processor", "warp_size",
                 "regs_per_multiprocessor", "uuid", "gcnArchName", "pci_bus_id", "pci_device_id",
                 "pci_domain_id", "slot", "kind", "backing", "source")

    @classmethod
    def of_slot(cls, slot: int) -> CudaDeviceProperties:
        row = _row(slot)
        ident = _identity(slot)
        p = cls.__new__(cls)
        p.name = row.spec.name
        p.major, p.minor = ident.major, ident.minor
        p.total_memory = int(row.capacity)
        p.multi_processor_count = ident.multi_processor_count
        p.L2_cache_size = 0 if ident.l2_cache_size is None else ident.l2_cache_size
        p.is_integrated = 0
        p.is_multi_gpu_board = 0
        p.max_threads_per_multi_processor = 2048
        p.warp_size = 32
        p.regs_per_multiprocessor = 65536
        p.uuid = f"hybrid-{row.kind}-slot{slot}"
        p.gcnArchName = ""
        p.pci_bus_id = p.pci_device_id = p.pci_domain_id = slot
        p.slot, p.kind, p.backing = slot, row.kind, row.backing
        p.source = f"capability ({ident.major}, {ident.minor}) [{ident.status}: {ident.source}]; total_memory: the " \
                   f"slot's modelled capacity ({row.spec.hbm_capacity.source})"
        return p

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory >> 20}MB, multi_processor_count={self.multi_processor_count}, "
                f"uuid={self.uuid}, L2_cache_size={self.L2_cache_size >> 20}MB, slot=hybrid:{self.slot})")


# -- memory -----------------------------------------------------------------------------------------------

def _memory(name: str, note: str = "the slot's allocator (capacity: the modelled HBM)"):
    def fn(device=None):
        return getattr(_hybrid(), name)(mapping.slot_of(device))
    fn.__name__ = name
    fn.__doc__ = f"torch.cuda.{name} of the mapped slot."
    return served("modelled" if name == "mem_get_info" else "mapped", note)(fn)


memory_allocated = _memory("memory_allocated")
max_memory_allocated = _memory("max_memory_allocated")
memory_reserved = _memory("memory_reserved", "equal to allocated: the slot allocator keeps no cache")
max_memory_reserved = _memory("max_memory_reserved", "equal to max allocated: no cache")
reset_peak_memory_stats = _memory("reset_peak_memory_stats")
reset_max_memory_allocated = _memory("reset_max_memory_allocated")
reset_accumulated_memory_stats = _memory("reset_accumulated_memory_stats")
mem_get_info = _memory("mem_get_info", "(free, total) of the slot's modelled HBM capacity")


@served("mapped", "torch.cuda.memory_stats keys from the slot's allocator")
def memory_stats(device=None) -> OrderedDict:
    return OrderedDict(_hybrid().memory_stats(mapping.slot_of(device)))


@served("mapped", "nested form of memory_stats")
def memory_stats_as_nested_dict(device=None) -> dict:
    nested: dict = {}
    for key, value in _hybrid().memory_stats(mapping.slot_of(device)).items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


@served("mapped", "the slot's counters as text")
def memory_summary(device=None, abbreviated: bool = False) -> str:
    return _hybrid().memory_summary(mapping.slot_of(device), abbreviated)


@served("mapped", "deprecated alias of memory_reserved")
def memory_cached(device=None) -> int:
    return _hybrid().memory_reserved(mapping.slot_of(device))


@served("mapped", "deprecated alias of max_memory_reserved")
def max_memory_cached(device=None) -> int:
    return _hybrid().max_memory_reserved(mapping.slot_of(device))


@served("mapped", "deprecated alias of reset_peak_memory_stats")
def reset_max_memory_cached(device=None) -> None:
    _hybrid().reset_peak_memory_stats(mapping.slot_of(device))


@served("same", "the slot allocator caches nothing, so there is nothing to release")
def empty_cache() -> None:
    _hybrid().empty_cache()


@served("modelled", "bytes in use on the slot (the modelled HBM)")
def device_memory_used(device=None) -> int:
    return _hybrid().memory_allocated(mapping.slot_of(device))


@served("mapped", "enforced: the mapped slot's allocator admits fraction x its capacity (the modelled HBM) "
                  "for this process; past it, torch.OutOfMemoryError")
def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    _hybrid().set_per_process_memory_fraction(fraction, mapping.slot_of(device))


@served("mapped", "the fraction of the mapped slot's capacity this process may hold")
def get_per_process_memory_fraction(device=None) -> float:
    return _hybrid().get_per_process_memory_fraction(mapping.slot_of(device))


@served("same", "the slot allocator")
def get_allocator_backend() -> str:
    return "native"


@served("mapped", "this process on each mapped slot")
def list_gpu_processes(device=None) -> str:
    import os

    slot = mapping.slot_of(device)
    used = _hybrid().memory_allocated(slot)
    return f"GPU:{mapping.cuda_index_of_slot(slot)} (hybrid:{slot})\nprocess {os.getpid():>10d} uses " \
           f"{used / 2**20:12.3f} MB GPU memory"


# -- random -----------------------------------------------------------------------------------------------

@served("same", "seeds the current slot's generator (the CPU's numbers for the same seed)")
def manual_seed(seed: int) -> None:
    _hybrid().manual_seed(seed)


@served("same", "seeds every mapped slot's generator")
def manual_seed_all(seed: int) -> None:
    for slot in mapping.current().slots:
        torch.hybrid.default_generator(slot).manual_seed(int(seed))


@served("same", "a non-deterministic seed for the current slot")
def seed() -> None:
    _hybrid().seed()


@served("same", "one non-deterministic seed for every mapped slot")
def seed_all() -> None:
    value = torch.Generator().seed()
    for slot in mapping.current().slots:
        torch.hybrid.default_generator(slot).manual_seed(value)


@served("same", "the current slot's seed")
def initial_seed() -> int:
    return _hybrid().initial_seed()


@served("same", "the mapped slot's generator state")
def get_rng_state(device="cuda") -> torch.Tensor:
    return _hybrid().get_rng_state(mapping.slot_of(device))


@served("same", "every mapped slot's generator state")
def get_rng_state_all() -> list[torch.Tensor]:
    return [_hybrid().get_rng_state(s) for s in mapping.current().slots]


@served("same", "restores the mapped slot's generator state")
def set_rng_state(new_state: torch.Tensor, device="cuda") -> None:
    _hybrid().set_rng_state(new_state, mapping.slot_of(device))


@served("same", "restores every mapped slot's generator state")
def set_rng_state_all(new_states) -> None:
    for slot, state in zip(mapping.current().slots, new_states):
        _hybrid().set_rng_state(state, slot)


class _DefaultGenerators:
    """``torch.cuda.default_generators``: the mapped slots' generators, indexable by CUDA index."""

    def __getitem__(self, index: int) -> torch.Generator:
        touch("torch.cuda.default_generators", "same", "the mapped slots' generators")
        return torch.hybrid.default_generator(mapping.current().slot(index))

    def __len__(self) -> int:
        return len(mapping.current())

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()
SERVED["torch.cuda.default_generators"] = ("same", "the mapped slots' generators")


# -- streams and events ------------------------------------------------------------------------------------

class Stream(torch.hybrid.Stream):
    """``torch.cuda.Stream``: a stream on the mapped slot; it orders the modelled timeline."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        touch("torch.cuda.Stream", "modelled", "a stream of the mapped slot: orders modelled time")
        return super().__new__(cls, device=torch.device("hybrid", mapping.slot_of(device)), priority=priority,
                               **kwargs)


SERVED["torch.cuda.Stream"] = ("modelled", "a stream of the mapped slot: orders modelled time")


class Event(torch.hybrid.Event):
    """``torch.cuda.Event``: elapsed_time answers modelled milliseconds on emulated slots."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                **kwargs):
        touch("torch.cuda.Event", "modelled", "events on the mapped slot's modelled clock")
        return super().__new__(cls, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def elapsed_time(self, end_event) -> float:
        touch("torch.cuda.Event.elapsed_time", "modelled",
              "modelled milliseconds between the events (measured on cuda-backed slots)")
        return super().elapsed_time(end_event)


SERVED["torch.cuda.Event"] = ("modelled", "events on the mapped slot's modelled clock")
SERVED["torch.cuda.Event.elapsed_time"] = ("modelled", "modelled milliseconds between the events")


@served("mapped", "the mapped slot's current stream")
def current_stream(device=None) -> torch.Stream:
    return _hybrid().current_stream(mapping.slot_of(device))


@served("mapped", "the mapped slot's default stream")
def default_stream(device=None) -> torch.Stream:
    return _hybrid().default_stream(mapping.slot_of(device))


@served("mapped", "makes the stream current on its slot")
def set_stream(stream) -> None:
    if stream is not None:
        _hybrid().set_stream(stream)


@served("mapped", "the stream current on its slot inside the block")
def stream(stream):
    return _hybrid().stream(stream)


class StreamContext(contextlib.AbstractContextManager):
    """``torch.cuda.StreamContext(stream)``."""

    def __init__(self, stream):
        touch("torch.cuda.StreamContext", "mapped", "the stream current on its slot inside the block")
        self._cm = _hybrid().stream(stream)

    def __enter__(self):
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


SERVED["torch.cuda.StreamContext"] = ("mapped", "the stream current on its slot inside the block")


# -- CUDA graphs (interop.cuda_layer.graphs) --------------------------------------------------------------------

from interop.cuda_layer import graphs as _graphs  # noqa: E402  (after `served`, which it does not use)

CUDAGraph = _graphs.CUDAGraph
graph = _graphs.graph
SERVED["torch.cuda.CUDAGraph"] = ("modelled", "capture records the ops on slot tensors, replay reruns them")
SERVED["torch.cuda.graph"] = ("modelled", "captures the block into the CUDAGraph")
SERVED["torch.cuda.make_graphed_callables"] = ("modelled", "torch's own, over the rack's CUDA graphs")


@served("same", "True inside a CUDA graph capture")
def is_current_stream_capturing() -> bool:
    return _graphs.is_current_stream_capturing()


@served("modelled", "a handle for capture_begin's pool (slots have one pool)")
def graph_pool_handle():
    return _graphs.graph_pool_handle()


# -- legacy tensor types -------------------------------------------------------------------------------------

class _LegacyTensorType(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and bool(getattr(obj, "is_cuda", False))

    def __call__(cls, *args, **kwargs):
        touch(f"torch.cuda.{cls.__name__}", "mapped", f"a {cls.dtype} tensor on the current mapped slot")
        device = torch.device("hybrid", mapping.slot_of(None))
        if len(args) == 1 and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=cls.dtype, device=device)
        return torch.empty(*args, dtype=cls.dtype, device=device, **kwargs)


def _legacy(name: str, dtype: torch.dtype):
    cls = _LegacyTensorType(name, (), {"dtype": dtype, "__doc__": f"torch.cuda.{name}: {dtype} on the mapped slot "
                                                                   "(never silently another dtype)"})
    SERVED[f"torch.cuda.{name}"] = ("mapped", f"a {dtype} tensor on the current mapped slot")
    return cls


LEGACY_TENSOR_TYPES = {
    name: _legacy(name, dtype) for name, dtype in (
        ("FloatTensor", torch.float32), ("DoubleTensor", torch.float64), ("HalfTensor", torch.float16),
        ("BFloat16Tensor", torch.bfloat16), ("LongTensor", torch.int64), ("IntTensor", torch.int32),
        ("ShortTensor", torch.int16), ("CharTensor", torch.int8), ("ByteTensor", torch.uint8),
        ("BoolTensor", torch.bool))
}
