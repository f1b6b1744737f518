"""A slot's numerics mode: ``exact`` (what the CPU computes; the default) or ``device``
(rounded the way the slot's kind rounds), set per rack file, per slot, or with
:func:`set_numerics`.

In ``exact`` mode nothing of this module is on the per-op path. While any slot
of the current rack is in ``device`` mode, a :class:`torch.utils._python_dispatch.TorchDispatchMode`
(:mod:`interop.numerics.device_ops`) sees each op: on device-mode slots whose kind
rounds op results stochastically (Trainium, when the rack enables it) it rounds
the op's low-precision floating-point results from their float32 values with
stochastic rounding; with ``strict`` it refuses dtypes the kind does not
compute in. The mode shows in :func:`interop.report` and the Chrome trace.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace

import devices
from devices.rack.numerics import SEED_LIMIT
import torch

from interop import session

MODES = devices.NUMERICS_MODES
"""Accepted numerics modes: ``exact``, ``device``."""


@dataclass(frozen=True, slots=True)
class SlotNumerics:
    """One slot's numerics: its mode and what rounding it does."""

    slot: int
    kind: str
    mode: str
    """``exact`` or ``device``."""
    stochastic_requested: bool
    """The rack (or :func:`set_numerics`) asked for stochastic rounding."""
    strict: bool
    """Refuse dtypes the kind does not compute in (device mode only)."""
    seed: int
    """Seed of the slot's stochastic-rounding generator."""

    @property
    def rounding(self):
        """The kind's rounding record (``devices.capabilities(kind).rounding``)."""
        return devices.capabilities(self.kind).rounding

    @property
    def stochastic_dtypes(self) -> tuple[str, ...]:
        """Result dtypes this slot rounds stochastically: non-empty only in device mode, when requested
        and the kind rounds op outputs stochastically."""
        rounding = self.rounding
        if self.mode != "device" or not self.stochastic_requested or rounding.stochastic_scope != "op_outputs":
            return ()
        return rounding.stochastic_dtypes

    @property
    def label(self) -> str:
        """``exact``, or what device mode does on this slot (shown in reports and traces)."""
        if self.mode == "exact":
            return "exact"
        strict = ", strict" if self.strict else ""
        if self.stochastic_dtypes:
            return f"device: stochastic rounding of {'/'.join(_SHORT.get(d, d) for d in self.stochastic_dtypes)}{strict}"
        if self.stochastic_requested:
            return f"device: nearest ({self.kind} rounds op outputs to nearest; stochastic rounding not applied){strict}"
        return f"device: nearest{strict}"


_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2"}


@dataclass
class SlotCounters:
    """What device mode did on a slot since the last reset."""

    rounded_ops: int = 0
    """Ops whose low-precision results were rounded stochastically."""
    rounded_elements: int = 0
    overflow: int = 0
    """Finite float32 results that became infinite when rounded."""
    underflow: int = 0
    """Non-zero float32 results that became zero when rounded."""


@dataclass
class RackNumerics:
    """The live numerics settings of one rack."""

    slots: list[SlotNumerics]
    counters: dict[int, SlotCounters] = field(default_factory=dict)
    generators: dict[tuple[int, str], torch.Generator] = field(default_factory=dict)

    @property
    def any_device(self) -> bool:
        return any(s.mode == "device" for s in self.slots)

    def generator(self, slot: int, device: torch.device) -> torch.Generator:
        """The slot's stochastic-rounding generator on ``device`` (seeded: runs repeat)."""
        key = (slot, str(device))
        gen = self.generators.get(key)
        if gen is None:
            gen = self.generators[key] = torch.Generator(device=device)
            gen.manual_seed((self.slots[slot].seed * 1_000_003 + slot) % SEED_LIMIT)  # 64 bits, as torch takes
        return gen


_states: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _initial(rack) -> RackNumerics:
    spec = rack.spec.numerics or devices.NumericsSpec()
    width = rack.spec.slots_per_replica
    return RackNumerics([SlotNumerics(d.index, d.kind, spec.mode_of(d.index % width), spec.stochastic_rounding,
                                      False, spec.seed) for d in rack.devices])


def state(rack=None) -> RackNumerics:
    """The numerics settings of ``rack`` (default: the current rack)."""
    from interop.session import current as current_rack

    rack = current_rack() if rack is None else rack
    if rack is None:
        raise RuntimeError("numerics: no rack is current")
    found = _states.get(rack)
    if found is None:
        found = _states[rack] = _initial(rack)
    return found


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
    from interop.numerics import device_ops
    from interop.session import current as current_rack

    active = current_rack()
    device_ops.install(active is not None and state(active).any_device)


def on_rack_change(rack) -> None:
    """Called when the current rack changes: its device-mode slots (from its rack file) take effect."""
    sync(rack)


session.on_rack_change(lambda rack, previous_slot: on_rack_change(rack))  # a rack file's device modes apply


def slot_label(rack, slot: int) -> str:
    """The numerics label of a slot of ``rack`` (``exact`` unless set)."""
    found = _states.get(rack)
    if found is None:
        spec = rack.spec.numerics
        if spec is None or not spec.any_device:
            return "exact"
        found = state(rack)
    return found.slots[slot].label


def device_scale_rule(x: torch.Tensor, fmt: str) -> str | None:
    """The scale rule of ``x``'s slot's kind for block format ``fmt`` when that slot is in device mode
    (``trn3`` on Trainium3, ``rceil`` on Blackwell), else None (the format's default). A strict slot whose
    kind has no such format refuses it."""
    if x.device.type != "hybrid":
        return None
    found = _states.get(_current_rack())
    if found is None or x.device.index >= len(found.slots):
        return None
    settings = found.slots[x.device.index]
    if settings.mode != "device":
        return None
    caps = devices.capabilities(settings.kind)
    entry = caps.block_format(fmt)
    if entry is None and settings.strict:
        have = ", ".join(b.format for b in caps.block_formats) or "none"
        raise ValueError(f"fmt: {settings.kind} (hybrid:{settings.slot}, device mode, strict) does not compute in "
                         f"{fmt}; its block formats: {have}")
    return None if entry is None else entry.scale_rule


def _current_rack():
    from interop.session import current as current_rack

    return current_rack()
