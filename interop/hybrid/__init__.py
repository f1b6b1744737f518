"""``torch.hybrid``: the hybrid device's module, mirroring ``torch.cuda``.

Device indices are the slots of the current rack (see :class:`interop.Rack`).
Functions take a device as None (the current slot), an int, ``"hybrid:i"`` or a
``torch.device``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interop.hybrid._utils import DEVICE_TYPE, slot_index
from interop.hybrid.memory import (
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from interop.hybrid.random import (
    default_generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from interop.hybrid import nvtx  # noqa: F401  (torch.hybrid.nvtx, as torch.cuda.nvtx)
from interop.hybrid.streams import Event, Stream, current_stream, default_stream, set_stream, stream


def is_available() -> bool:
    """True when the runtime is loaded and the current rack has at least one slot."""
    try:
        from interop import _C
    except ImportError:  # the extension was not built
        return False
    return _C._slot_count() > 0


_initialized = True
"""torch.cuda's flag, read by torch.utils.checkpoint before it stashes a device's generator state for the
recomputation (a slot's dropout masks would otherwise be drawn anew in backward). There is no lazy init."""


def is_initialized() -> bool:
    """Always True once ``interop`` is imported (there is no lazy init)."""
    return is_available()


def init() -> None:
    """Present for torch.cuda parity; the runtime initialises at import."""


def device_count() -> int:
    """Slots in the current rack."""
    from interop import _C

    return _C._slot_count()


def current_device() -> int:
    """The current slot index of this thread."""
    from interop import _C

    return _C._current_slot()


def set_device(device) -> None:
    """Make ``device`` the current slot of this thread."""
    from interop import _C

    _C._set_current_slot(slot_index(device, optional=False))


class device:
    """Context manager that changes the current slot, like ``torch.cuda.device``."""

    def __init__(self, device):
        self.idx = -1 if device is None else slot_index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0:
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the slot of ``obj`` (a tensor) current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == DEVICE_TYPE else None)


def synchronize(device=None) -> None:
    """Wait for the slot's work. Emulated work is synchronous; a cuda-backed slot
    synchronizes its real device. Either way the modelled timeline is brought
    up to date (everything recorded so far is costed and placed)."""
    from interop import session

    index = slot_index(device)
    session.drain()
    backing = _device_row(index).backing
    if backing.is_cuda:
        from interop import native_cuda  # torch's own: the CUDA layer answers torch.cuda for slots

        native_cuda.synchronize(backing.cuda_index)


@dataclass(frozen=True)
class HybridDeviceProperties:
    """What ``get_device_properties`` returns: the slot and its catalogue entry."""

    name: str
    kind: str
    backing: str
    total_memory: int
    capacity: int
    domain: str
    projected: bool
    spec_source: str
    peak_flops: dict
    hbm_bandwidth: float
    chip: object

    def __repr__(self) -> str:
        return (
            f"HybridDeviceProperties(name={self.name!r}, kind={self.kind!r}, backing={self.backing!r}, "
            f"total_memory={self.total_memory >> 20}MB, projected={self.projected})"
        )


def _device_row(index: int):
    from interop import session

    rack = session.current()
    if rack is None:
        raise RuntimeError("no rack is installed; call interop.set_rack(...) first")
    return rack.devices[index]


def get_device_name(device=None) -> str:
    """The chip's name, e.g. ``"NVIDIA H100 SXM5 [emulated]"``; projected specs say so."""
    return _device_row(slot_index(device)).name


def get_device_properties(device=None) -> HybridDeviceProperties:
    """Kind, backing, capacity and the sourced catalogue figures of a slot."""
    row = _device_row(slot_index(device))
    chip = row.spec
    return HybridDeviceProperties(
        name=row.name,
        kind=row.kind,
        backing=row.backing,
        total_memory=int(row.capacity),
        capacity=int(row.capacity),
        domain=row.domain,
        projected=bool(chip.projected),
        spec_source=chip.hbm_capacity.source,
        peak_flops={dtype: fig.value for dtype, fig in chip.peak.items()},
        hbm_bandwidth=chip.hbm_bandwidth.value,
        chip=chip,
    )


def get_device_capability(device=None) -> tuple[int, int]:
    """(0, 0): modelled slots have no CUDA compute capability."""
    slot_index(device)
    return (0, 0)


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes ``torch.autocast("hybrid", dtype=...)`` accepts."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


__all__ = [
    "Event", "HybridDeviceProperties", "Stream", "current_device", "current_stream", "default_generator",
    "default_stream", "device", "device_count", "device_of", "empty_cache", "get_amp_supported_dtype",
    "get_device_capability", "get_device_name", "get_device_properties", "get_per_process_memory_fraction",
    "get_rng_state", "get_rng_state_all",
    "init", "initial_seed", "is_available", "is_bf16_supported", "is_initialized", "manual_seed",
    "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_stats", "memory_summary", "nvtx", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_peak_memory_stats", "seed", "seed_all", "set_device",
    "set_per_process_memory_fraction", "set_rng_state",
    "set_rng_state_all", "set_stream", "stream", "synchronize",
]

