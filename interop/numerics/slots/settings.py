"""The numerics settings of a rack's slots, kept per rack: each slot's :class:`SlotNumerics` (its mode, its
rounding), what device mode did on it (:class:`SlotCounters`), and its stochastic-rounding generators.

:mod:`.mode` changes them (:func:`~.mode.set_numerics`) and :mod:`.device_ops` reads them op by op; both import
this module and neither imports the other's state. A block format's scale rule on a device-mode slot
(:func:`device_scale_rule`) is offered to :func:`interop.numerics.quantize` through its hook.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import devices
import torch
from devices.rack.numerics import SEED_LIMIT

from interop.numerics.maths import quantize as _quantize

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


_quantize.register_device_scale_rule(device_scale_rule)  # quantize(scale_rule=None) on a device-mode slot


__all__ = ["RackNumerics", "SlotCounters", "SlotNumerics", "device_scale_rule", "slot_label", "state"]
