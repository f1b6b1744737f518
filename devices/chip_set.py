"""A set of chips as a whole: its peak, board power, price per hour on one basis, MFU, and cost and energy per token.

The one place that sums catalogue figures over chips (the what-if, the planner's cost objective, the run report
and the serving model all ask it), so a figure missing for one kind makes the whole set's figure missing, with
the reason, instead of a silently smaller sum::

    chips = ChipSet.of({"trn1": 512})
    chips.price("reserved-effective").value     # 262.3 USD/h (8.197 per instance-hour / 16 x 512)
    chips.power().reason                         # "trn1: AWS publishes no Trainium (Trn1) board power ..."
    chips.economics(seconds=21.4, tokens=1024 * 8192, basis="on-demand").usd_per_million_tokens

Prices are per chip-hour on a basis (:data:`devices.chip.PRICE_BASES`): one basis per comparison, named
wherever a cost is printed; a set whose kinds do not all have a price on it has none. Power is board power
(every chip of the set for the whole interval): energy is modelled, never measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from devices.chip import PRICE_BASES, chip
from devices.figure import Figure

DEFAULT_BASIS = "on-demand"
"""The price basis a comparison uses unless told otherwise."""


def check_basis(basis: str) -> str:
    """``basis`` if it is one of :data:`~devices.chip.PRICE_BASES`, else ValueError naming them."""
    if basis not in PRICE_BASES:
        raise ValueError(f"price_basis: unknown basis {basis!r}; accepted: {', '.join(PRICE_BASES)}")
    return basis


@dataclass(frozen=True, slots=True)
class Rate:
    """A rate of a whole set of chips (USD/h or W), or None with the reasons it is missing."""

    value: float | None
    """The sum over the set's chips; None when any kind lacks the figure."""
    unit: str
    """``"USD/h"`` or ``"W"``."""
    figures: tuple[Figure, ...]
    """The catalogue figures summed, one per kind that has one."""
    missing: tuple[str, ...] = ()
    """Why the value is None: ``"<kind>: <reason>"`` per kind without the figure."""
    basis: str | None = None
    """The price basis (prices only)."""

    @property
    def reason(self) -> str:
        """Why :attr:`value` is None (empty when it is set)."""
        return "; ".join(self.missing)

    @property
    def statuses(self) -> tuple[str, ...]:
        """The statuses of the figures summed (published, secondary, estimated...), without repeats."""
        return tuple(dict.fromkeys(f.status for f in self.figures))


@dataclass(frozen=True, slots=True)
class Economics:
    """What an interval of a set of chips costs in money and energy, per step and per token (modelled)."""

    seconds: float
    tokens: float
    basis: str
    price: Rate
    """USD/h of the set on :attr:`basis`."""
    power: Rate
    """W of the set."""

    @property
    def usd(self) -> float | None:
        """USD of the interval (chip-hours at the basis' rates), None without a price."""
        return None if self.price.value is None else self.price.value * self.seconds / 3600.0

    @property
    def usd_per_million_tokens(self) -> float | None:
        """USD per million tokens of the interval, None without a price or without tokens."""
        usd = self.usd
        return None if usd is None or not self.tokens else usd / self.tokens * 1e6

    @property
    def joules(self) -> float | None:
        """Board power x the interval, None without a power figure for every kind."""
        return None if self.power.value is None else self.power.value * self.seconds

    @property
    def joules_per_token(self) -> float | None:
        """Joules per token of the interval (board power), None without power figures or without tokens."""
        joules = self.joules
        return None if joules is None or not self.tokens else joules / self.tokens

    def cost_text(self, per: str = "step") -> str:
        """``$1.234 per step, $0.567 per M tokens (on-demand; published, secondary)`` or why there is none."""
        if self.usd is None:
            return f"unset on {self.basis}: {self.price.reason}"
        return (f"${self.usd:,.4g} per {per}, ${self.usd_per_million_tokens:,.4g} per M tokens "
                f"({self.basis}; {', '.join(self.price.statuses)})")

    def energy_text(self, per: str = "step") -> str:
        """``12,345 J per step, 0.123 J/token (board power; estimated)`` or why there is none."""
        if self.joules is None:
            return f"unset: {self.power.reason}"
        return (f"{self.joules:,.4g} J per {per}, {self.joules_per_token:,.4g} J/token "
                f"(board power; {', '.join(self.power.statuses)})")


@dataclass(frozen=True, slots=True)
class ChipSet:
    """Chips by kind (``{"trn1": 512}``): the figures of all of them together."""

    counts: Mapping[str, int]
    """Chip kind -> how many (kinds normalised through the catalogue)."""

    def __post_init__(self) -> None:
        counts: dict[str, int] = {}
        for kind, n in dict(self.counts).items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"counts: expected a non-negative chip count for {kind!r}, got {n!r}")
            key = chip(kind).kind
            counts[key] = counts.get(key, 0) + n
        object.__setattr__(self, "counts", MappingProxyType({k: n for k, n in counts.items() if n}))

    @classmethod
    def of(cls, chips: Mapping[str, int] | Iterable[tuple[str, int]] | object) -> ChipSet:
        """From ``{kind: count}``, ``(kind, count)`` pairs, or anything with ``counts()`` (a RackSpec)."""
        if isinstance(chips, ChipSet):
            return chips
        if hasattr(chips, "counts") and callable(chips.counts):
            chips = chips.counts()
        if isinstance(chips, Mapping):
            return cls(dict(chips))
        merged: dict[str, int] = {}
        for kind, n in chips:  # type: ignore[union-attr]
            merged[kind] = merged.get(kind, 0) + n
        return cls(merged)

    @property
    def chips(self) -> int:
        """How many chips in all."""
        return sum(self.counts.values())

    @property
    def projected(self) -> bool:
        """True when a kind of the set is projected (Trainium4)."""
        return any(chip(k).projected for k in self.counts)

    def peak(self, dtype: object = "bfloat16") -> float:
        """Dense peak FLOP/s of every chip in ``dtype`` (a catalogue dtype, see :meth:`devices.Chip.peak_for`)."""
        return sum(n * chip(k).peak_for(dtype).value for k, n in self.counts.items())

    def mfu(self, flops: float, seconds: float, dtype: object = "bfloat16") -> float:
        """Model FLOPs utilisation: ``flops`` done in ``seconds`` over the set's :meth:`peak` (0 without time)."""
        peak = self.peak(dtype)
        return flops / (seconds * peak) if seconds > 0 and peak > 0 else 0.0

    def power(self) -> Rate:
        """Board power of every chip (W = joules per second), or None and why."""
        figures, missing, total = [], [], 0.0
        for kind, n in self.counts.items():
            fig = chip(kind).power
            if fig is None:
                missing.append(f"{kind}: {chip(kind).missing('power')}")
            else:
                figures.append(fig)
                total += n * fig.value
        return Rate(None if missing else total, "W", tuple(figures), tuple(missing))

    def price(self, basis: str = DEFAULT_BASIS) -> Rate:
        """USD per hour of every chip on ``basis``, or None and why (one kind without a price on it is enough)."""
        check_basis(basis)
        figures, missing, total = [], [], 0.0
        for kind, n in self.counts.items():
            fig = chip(kind).prices.get(basis)
            if fig is None:
                others = ", ".join(chip(kind).prices) or "none"
                missing.append(f"{kind}: {chip(kind).missing('price.' + basis)} (bases with a price: {others})")
            else:
                figures.append(fig)
                total += n * fig.value
        return Rate(None if missing else total, "USD/h", tuple(figures), tuple(missing), basis)

    def bases(self) -> tuple[str, ...]:
        """The price bases on which every kind of the set has a price."""
        return tuple(b for b in PRICE_BASES if all(b in chip(k).prices for k in self.counts))

    def economics(self, seconds: float, tokens: float, basis: str = DEFAULT_BASIS) -> Economics:
        """Cost and energy of ``seconds`` of the whole set producing ``tokens`` tokens."""
        if not seconds >= 0:
            raise ValueError(f"seconds: expected a non-negative duration, got {seconds!r}")
        return Economics(seconds, tokens, basis, self.price(basis), self.power())


__all__ = ["DEFAULT_BASIS", "ChipSet", "Economics", "Rate", "check_basis"]
