"""Device-argument handling shared by the torch.hybrid functions."""

from __future__ import annotations

import torch

DEVICE_TYPE = "hybrid"


def slot_index(device=None, *, optional: bool = True) -> int:
    """The slot a torch.cuda-style ``device`` argument names.

    Accepts None (the current slot), an int, ``"hybrid:i"``, ``"hybrid"`` or a
    torch.device of type hybrid. Anything else, or an index outside the rack,
    raises ValueError.
    """
    from interop import _C

    if device is None:
        if not optional:
            raise ValueError("a hybrid device is required here")
        return _C._current_slot()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"expected a hybrid device, got {device}")
        index = _C._current_slot() if device.index is None else device.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise ValueError(f"expected a hybrid device (int, 'hybrid:i' or torch.device), got {device!r}")
    count = _C._slot_count()
    if not 0 <= index < count:
        raise ValueError(
            f"hybrid:{index} is not a slot of the current rack ({count} slots: valid indices are 0..{count - 1})"
        )
    return index
