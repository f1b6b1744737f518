"""A slot's numerics mode: ``exact`` (what the CPU computes; the default) or ``device``
(rounded the way the slot's kind rounds), set per rack file, per slot, or with
:func:`set_numerics`.

In ``exact`` mode nothing of this module is on the per-op path. While any slot
of the current rack is in ``device`` mode, a :class:`torch.utils._python_dispatch.TorchDispatchMode`
(:mod:`interop.numerics.slots.device_ops`) sees each op: on device-mode slots whose kind
rounds op results stochastically (Trainium, when the rack enables it) it rounds
the op's low-precision floating-point results from their float32 values with
stochastic rounding; with ``strict`` it refuses dtypes the kind does not
compute in. The mode shows in :func:`interop.report` and the Chrome trace.
The settings themselves are :mod:`.settings`.
"""

from __future__ import annotations

from dataclasses import replace

import devices
import torch
from devices.rack.numerics import SEED_LIMIT

from interop import session
from interop.numerics.slots.settings import SlotCounters, SlotNumerics, state

MODES = devices.NUMERICS_MODES
"""Accepted numerics modes: ``exact``, ``device``."""


def numerics(slot: int | None = None):
    """The :class:`SlotNumerics` of ``slot``, or of every slot of the current rack (a list)."""
    current = state()
    if slot is None:
        return list(current.slots)
    return current.slots[_check_slot(slot, len(current.slots))]


def _check_slot(slot, count: int) -> int:
    if isinstance(slot, torch.device):
        slot = slot.index
    if isinstance(slot, str) and slot.startswith("hybrid:"):
        slot = int(slot.split(":", 1)[1])
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < count:
        raise ValueError(f"slots: {slot!r} is not a slot of the current rack (0-{count - 1})")
    return slot


class NumericsSettings:
    """What :func:`set_numerics` returns: the new settings, and a context manager that restores the old."""

    def __init__(self, rack, previous: list[SlotNumerics]):
        self._rack, self._previous = rack, previous

    @property
    def slots(self) -> list[SlotNumerics]:
        return list(state(self._rack).slots)

    def __enter__(self) -> NumericsSettings:
        return self

    def __exit__(self, *exc) -> None:
        state(self._rack).slots = list(self._previous)
        sync(self._rack)

    def __repr__(self) -> str:
        return "NumericsSettings(" + ", ".join(f"hybrid:{s.slot}={s.label}" for s in self.slots) + ")"


def set_numerics(mode: str, slots=None, *, stochastic_rounding: bool | None = None, strict: bool | None = None,
                 seed: int | None = None) -> NumericsSettings:
    """Set the numerics mode of ``slots`` (default: every slot) of the current rack.

    Args:
        mode: ``"exact"`` (compute what the CPU computes) or ``"device"`` (round the way the slot's kind does).
        slots: a slot index, ``"hybrid:i"``, a torch.device, or an iterable of them.
        stochastic_rounding: round op results stochastically where the kind does so when enabled
            (Trainium; ``NEURON_RT_STOCHASTIC_ROUNDING_EN=1``). Unchanged when None.
        strict: in device mode, raise ValueError for an op in a dtype the kind does not compute in
            (its capability table's ``unsupported``); with ``stochastic_rounding=True``, refuse kinds that
            cannot round op results stochastically. Unchanged when None.
        seed: seed of the stochastic-rounding generators (Neuron's default seed is 0).

    Returns a :class:`NumericsSettings`; ``with interop.set_numerics("device"): ...`` restores the
    previous settings on exit.
    """
    from interop.session import current as current_rack

    if mode not in MODES:
        raise ValueError(f"mode: unknown numerics mode {mode!r}; accepted: {', '.join(MODES)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT):
        raise ValueError(f"seed: expected an integer from 0 to 2**64 - 1 (a generator seed), got {seed!r}")
    rack = current_rack()
    current = state(rack)
    count = len(current.slots)
    if slots is None:
        chosen = range(count)
    elif isinstance(slots, (int, str, torch.device)):
        chosen = [_check_slot(slots, count)]
    else:
        chosen = [_check_slot(s, count) for s in slots]
    updated = list(current.slots)
    for index in chosen:
        new = replace(updated[index], mode=mode)
        if stochastic_rounding is not None:
            new = replace(new, stochastic_requested=bool(stochastic_rounding))
        if strict is not None:
            new = replace(new, strict=bool(strict))
        if seed is not None:
            new = replace(new, seed=int(seed))
        if new.strict and new.mode == "device" and new.stochastic_requested and not new.stochastic_dtypes:
            rounding = new.rounding
            raise ValueError(
                f"stochastic_rounding: {new.kind} (hybrid:{index}) does not round op results stochastically "
                f"({rounding.stochastic_scope.replace('_', ' ')}; {rounding.switch or 'no switch'}); kinds that do: "
                f"{', '.join(k for k in devices.capability_kinds() if devices.capabilities(k).rounding.stochastic_scope == 'op_outputs')}")
        updated[index] = new
    previous = current.slots
    current.slots = updated
    if seed is not None:
        current.generators.clear()
    sync(rack)
    return NumericsSettings(rack, previous)


def counters(slot: int) -> SlotCounters:
    """What device mode did on ``slot`` (rounded ops and elements, overflow and underflow counts)."""
    current = state()
    return current.counters.setdefault(_check_slot(slot, len(current.slots)), SlotCounters())


def reset_counters() -> None:
    state().counters.clear()


def sync(rack=None) -> None:
    """Install the dispatch mode while the current rack has a device-mode slot; remove it otherwise."""
    from interop.numerics.slots import device_ops
    from interop.session import current as current_rack

    active = current_rack()
    device_ops.install(active is not None and state(active).any_device)


def on_rack_change(rack) -> None:
    """Called when the current rack changes: its device-mode slots (from its rack file) take effect."""
    sync(rack)


session.on_rack_change(lambda rack, previous_slot: on_rack_change(rack))  # a rack file's device modes apply


__all__ = ["MODES", "NumericsSettings", "counters", "numerics", "reset_counters", "set_numerics", "sync"]
