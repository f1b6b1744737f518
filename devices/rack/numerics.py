"""A rack's numerics settings as a rack file states them: each slot's mode and stochastic rounding.

``exact`` (the default): a slot computes exactly what the CPU computes. ``device``:
it rounds the way its kind does (see the ``rounding`` / ``block_formats`` /
``accumulation`` fields of ``devices.capabilities(kind)``); stochastic rounding of
op results happens where the kind rounds op outputs stochastically and the rack
enables it, as ``NEURON_RT_STOCHASTIC_ROUNDING_EN=1`` does on Trainium. Pure data:
interop.numerics applies it to a live rack.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devices.rack.intervals import last_wins, value_at

NUMERICS_MODES: tuple[str, ...] = ("exact", "device")
"""Accepted values of a slot's numerics mode."""

SEED_LIMIT = 2**64
"""Seeds are below this: a torch.Generator takes 64-bit seeds."""


def check_mode(value: object, where: str = "numerics") -> str:
    """``value`` if it is a numerics mode, else ValueError naming ``where`` and the accepted modes."""
    if isinstance(value, str) and value.strip().lower() in NUMERICS_MODES:
        return value.strip().lower()
    raise ValueError(f"{where}: unknown numerics mode {value!r}; accepted: {', '.join(NUMERICS_MODES)}")


@dataclass(frozen=True, slots=True)
class NumericsSpec:
    """Numerics of a rack: a default mode, per-slot ranges that override it, stochastic rounding."""

    default: str = "exact"
    """Mode of every slot no range names (one of :data:`NUMERICS_MODES`)."""
    ranges: tuple[tuple[int, int, str], ...] = ()
    """``(first, count, mode)`` over one replica's slot indices, applied in order (a later range wins)."""
    stochastic_rounding: bool = False
    """Round op results stochastically on device-mode slots whose kind does so when enabled (Trainium)."""
    seed: int = 0
    """Seed of the stochastic-rounding generators (Neuron's NEURON_RT_STOCHASTIC_ROUNDING_SEED defaults to 0)."""
    _pieces: tuple = field(default=(), init=False, repr=False, compare=False)
    _starts: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_mode(self.default, "numerics")
        for first, count, mode in self.ranges:
            check_mode(mode, "numerics")
            if first < 0 or count <= 0:
                raise ValueError(f"numerics: slot range ({first}, {count}) must start at 0 or later and be non-empty")
        if not isinstance(self.stochastic_rounding, bool):
            raise ValueError(f"stochastic_rounding: expected true or false, got {self.stochastic_rounding!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(f"stochastic_rounding_seed: expected an integer from 0 to 2**64 - 1 (a generator "
                             f"seed), got {self.seed!r}")
        pieces = tuple(last_wins([(first, first + count, mode) for first, count, mode in self.ranges]))
        object.__setattr__(self, "_pieces", pieces)
        object.__setattr__(self, "_starts", tuple(p[0] for p in pieces))

    def mode_of(self, local_index: int) -> str:
        """The mode of slot ``local_index`` (its index within one replica)."""
        return value_at(self._pieces, self._starts, local_index, self.default)

    @property
    def any_device(self) -> bool:
        """True when some slot is in ``device`` mode."""
        return self.default == "device" or any(mode == "device" for _, _, mode in self.ranges)
