"""Device arguments in every form torch takes them, parsed in one place.

A device argument is None (the current device), an int (an index whose device
type the API decides: a slot for ``torch.hybrid``, a CUDA index for ``torch.cuda``),
a string (``"hybrid:3"``, ``"cuda"``, ``"cpu"``) or a ``torch.device``, with or
without an index. :func:`parse_device` reads any of them into a
:class:`DeviceArg` (type and index, each None when not given); what a form
means is the caller's policy: :func:`interop.hybrid._utils.slot_index` (the
``torch.hybrid`` functions), :mod:`interop.cuda_layer.mapping` (CUDA devices ->
slots) and the CUDA layer's ``torch.cuda._get_device_index``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

ACCEPTED = "None, an int, a device string ('hybrid:1', 'cuda') or a torch.device"


@dataclass(frozen=True, slots=True)
class DeviceArg:
    """A parsed device argument."""

    type: str | None
    """The device type named (``"hybrid"``, ``"cuda"``, ``"cpu"``...); None for None and for a bare int."""
    index: int | None
    """The index given; None when none was (the current device of that type)."""

    @property
    def bare(self) -> bool:
        """True for a bare int (its device type is the caller's to decide)."""
        return self.type is None and self.index is not None

    @property
    def current(self) -> bool:
        """True for None (the caller's current device)."""
        return self.type is None and self.index is None


def parse_device(device, *, what: str = "device") -> DeviceArg:
    """``device`` as a :class:`DeviceArg`; ValueError naming ``what`` and the accepted forms for anything else (a
    bool, a float, a string torch cannot read as a device)."""
    if device is None:
        return DeviceArg(None, None)
    if isinstance(device, torch.device):
        return DeviceArg(device.type, device.index)
    if isinstance(device, str):
        try:
            parsed = torch.device(device)
        except RuntimeError:
            raise ValueError(f"{what}: {device!r} is not a device; expected {ACCEPTED}") from None
        return DeviceArg(parsed.type, parsed.index)
    if not isinstance(device, bool):  # True == 1 as an int: refused
        try:
            return DeviceArg(None, operator.index(device))
        except TypeError:
            pass
    raise ValueError(f"{what}: expected {ACCEPTED}, got {device!r}")


__all__ = ["ACCEPTED", "DeviceArg", "parse_device"]
