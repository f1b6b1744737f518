"""What the collective layer needs from the device layer, injected by it.

Dependencies run interop -> collectives -> devices, so this package never
imports interop. ``import interop`` registers these hooks; until then, the
in-process collectives refuse with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class DeviceHooks:
    """The device layer's side of the collective layer."""

    alias: Callable
    """alias(tensor) -> a tensor on the slot's execution device over the same bytes (no copy)."""
    rack: Callable
    """rack() -> the current interop.Rack (its ``spec`` is a devices.RackSpec)."""
    place: Callable
    """place(name, slots, seconds, nbytes, algorithm, sources, link) -> puts a collective on the timeline."""


_hooks: DeviceHooks | None = None


def register(hooks: DeviceHooks) -> None:
    """Called once by ``import interop``."""
    global _hooks
    _hooks = hooks


def hooks() -> DeviceHooks:
    if _hooks is None:
        raise RuntimeError("collectives over hybrid tensors need the hybrid device: `import interop` first")
    return _hooks
