"""The torch.hybrid functions' policy for device arguments: which slot one names."""

from __future__ import annotations

from interop.device_arg import parse_device

DEVICE_TYPE = "hybrid"


def slot_index(device=None, *, optional: bool = True) -> int:
    """The slot a torch.cuda-style ``device`` argument names.

    Accepts None (the current slot), an int, ``"hybrid:i"``, ``"hybrid"`` or a
    torch.device of type hybrid (read by :func:`interop.device_arg.parse_device`).
    Anything else, or an index outside the rack, raises ValueError.
    """
    from interop import _C

    arg = parse_device(device)
    if arg.current:
        if not optional:
            raise ValueError("a hybrid device is required here")
        return _C._current_slot()
    if arg.type not in (None, DEVICE_TYPE):
        raise ValueError(f"expected a hybrid device (an int, 'hybrid:i' or torch.device('hybrid', i)), got {device!r}")
    index = _C._current_slot() if arg.index is None else arg.index
    count = _C._slot_count()
    if not 0 <= index < count:
        raise ValueError(
            f"hybrid:{index} is not a slot of the current rack ({count} slots: valid indices are 0..{count - 1})"
        )
    return index
