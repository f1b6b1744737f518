"""Which slots are backed by a real GPU (no compiler imported here)."""

from __future__ import annotations

import torch


def cuda_backing(index: int) -> int | None:
    """The CUDA ordinal behind slot ``index``, or None for an emulated slot."""
    from interop.session import current as current_rack

    rack = current_rack()
    if rack is None or not 0 <= index < len(rack.devices):
        raise ValueError(f"hybrid:{index} is not a slot of the current rack")
    return rack.devices[index].backing.cuda_index  # the parsed backing (devices.Backing) carries it


def raw_stream(index: int) -> int:
    """The stream handle a generated kernel launches on: the backing GPU's current CUDA stream, or 0
    on an emulated slot (its kernels run on the host, in order)."""
    ordinal = cuda_backing(index)
    if ordinal is None:
        return 0
    return torch.cuda.current_stream(ordinal).cuda_stream
