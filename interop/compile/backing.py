"""Which slots are backed by a real GPU, and what a compiler targets for them (no compiler imported here)."""

from __future__ import annotations

import torch

from interop.hybrid._utils import DEVICE_TYPE, slot_index


def cuda_backing(index: int) -> int | None:
    """The CUDA ordinal behind slot ``index``, or None for an emulated slot."""
    from interop.rack import current_rack

    rack = current_rack()
    if rack is None or not 0 <= index < len(rack.devices):
        raise ValueError(f"hybrid:{index} is not a slot of the current rack")
    backing = rack.devices[index].backing
    return int(backing.split(":", 1)[1]) if backing.startswith("cuda:") else None


def raw_stream(index: int) -> int:
    """The stream handle a generated kernel launches on: the backing GPU's current CUDA stream, or 0
    on an emulated slot (its kernels run on the host, in order)."""
    ordinal = cuda_backing(index)
    if ordinal is None:
        return 0
    return torch.cuda.current_stream(ordinal).cuda_stream


def patch_device_properties(hints_module) -> None:
    """A GPU-backed slot compiles as its GPU: Inductor's Triton runtime reads the target (``cuda``, the
    compute capability, the index it sets before a launch) from ``DeviceProperties``, so a backed slot's
    properties are its GPU's (``torch._inductor.runtime.hints`` has just been imported)."""
    cls = hints_module.DeviceProperties
    if getattr(cls.create, "_hybrid", False):
        return
    original = cls.create  # a bound, cached classmethod

    def create(device):
        if isinstance(device, torch.device) and device.type == DEVICE_TYPE:
            ordinal = cuda_backing(slot_index(device))
            if ordinal is not None:
                return original(torch.device("cuda", ordinal))
        return original(device)

    create._hybrid = True
    cls.create = staticmethod(create)
