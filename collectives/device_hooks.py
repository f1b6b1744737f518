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
    """place(name, slots, seconds, nbytes, algorithm, sources, link, ready_ps=0) -> puts a collective on the
    timeline, on every listed slot's current stream, starting no earlier than ``ready_ps`` (the latest clock
    of the participants other processes run)."""
    clock: Callable | None = None
    """clock(slot) -> int: the modelled clock (picoseconds) of the slot's current stream."""
    place_transfer: Callable | None = None
    """place_transfer(name, src, dst, start_ps, seconds, nbytes, algorithm, sources, link, wait=None) -> puts a
    point-to-point transfer between two processes' slots on the timeline at the agreed start; ``wait``: the
    slot whose current stream waits for its arrival (the receiver)."""
    fused_program: Callable | None = None
    """fused_program(steps, depth, sources, dests) -> the runtime's handle of a compiled schedule
    (``collectives.fused.Program``; see ``collectives.executor``)."""
    run_fused: Callable | None = None
    """run_fused(program, sources, dests, reduce, post, factor, ifactor, divisor, widened) -> runs a compiled
    schedule over host tensors in one pass per chunk (the runtime's C++ kernel)."""


_hooks: DeviceHooks | None = None


def register(hooks: DeviceHooks) -> None:
    """Called once by ``import interop``."""
    global _hooks
    _hooks = hooks


def registered() -> DeviceHooks | None:
    """The hooks, or None before ``import interop`` (for callers that have a way without them)."""
    return _hooks


def hooks() -> DeviceHooks:
    if _hooks is None:
        raise RuntimeError("collectives over hybrid tensors need the hybrid device: `import interop` first")
    return _hooks
