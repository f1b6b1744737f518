"""The ``hybrid`` device as Dynamo and Inductor see it (``torch._dynamo.device_interface``).

A slot is one of two things to a compiler. An emulated slot's memory is host
memory and its kernels are the CPU's, so it answers like the CPU (host core
count, no compute capability, no streams to hand a kernel). A slot backed by a
real GPU answers with that GPU's properties, so Inductor and Triton generate
and tune exactly what they would for ``cuda:N``.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass

import torch
from torch._dynamo.device_interface import DeviceInterface

from interop.compile.backing import cuda_backing, raw_stream
from interop.hybrid._utils import DEVICE_TYPE, slot_index


@dataclass(frozen=True)
class EmulatedSlotProperties:
    """What an emulated slot reports to Inductor: its kernels run on the host's cores."""

    multi_processor_count: int
    name: str


def _index(device) -> int:
    return slot_index(device)


class HybridInterface(DeviceInterface):
    """Dynamo's and Inductor's view of the rack's slots."""

    device = torch.hybrid.device
    Event = torch.hybrid.Event
    Stream = torch.hybrid.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.hybrid.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.hybrid.current_device()

        @staticmethod
        def get_device_properties(device=None):
            index = _index(device)
            ordinal = cuda_backing(index)
            if ordinal is not None:
                return torch.cuda.get_device_properties(ordinal)
            return EmulatedSlotProperties(multiprocessing.cpu_count(), torch.hybrid.get_device_name(index))

    @staticmethod
    def current_device() -> int:
        return torch.hybrid.current_device()

    @staticmethod
    def set_device(device) -> None:
        torch.hybrid.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.hybrid.current_device()
        if device >= 0 and device != previous:
            torch.hybrid.set_device(device)
        return previous

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = torch.hybrid.current_device()
        if device != previous:
            torch.hybrid.set_device(device)
        return previous

    @staticmethod
    def device_count() -> int:
        return torch.hybrid.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.hybrid.is_available()

    @staticmethod
    def stream(stream):
        return torch.hybrid.stream(stream)

    @staticmethod
    def current_stream():
        return torch.hybrid.current_stream()

    @staticmethod
    def set_stream(stream) -> None:
        torch.hybrid.set_stream(stream)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        from interop import _C

        _C._set_stream(device_index, stream_id)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return raw_stream(device_idx)

    @staticmethod
    def synchronize(device=None) -> None:
        torch.hybrid.synchronize(device)

    @staticmethod
    def get_compute_capability(device=None):
        ordinal = cuda_backing(_index(device))
        if ordinal is None:
            return ""  # as the CPU: Inductor keys its caches on this
        major, minor = torch.cuda.get_device_capability(ordinal)
        return major * 10 + minor

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.hybrid.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        """Emulated slots run Triton kernels in Triton's interpreter; backed slots on their GPU (sm70+)."""
        ordinal = cuda_backing(_index(device))
        return ordinal is None or torch.cuda.get_device_capability(ordinal) >= (7, 0)

    @classmethod
    def raise_if_triton_unavailable(cls, device=None) -> None:
        if not cls.is_triton_capable(device):
            raise RuntimeError(f"{torch.device(DEVICE_TYPE, _index(device))} is backed by a GPU older than sm70, "
                               "which Triton does not support")


def register(device_interface_module) -> None:
    """Register the interface with Dynamo (called once ``torch._dynamo.device_interface`` is imported)."""
    device_interface_module.register_interface_for_device(DEVICE_TYPE, HybridInterface)
