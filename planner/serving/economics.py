"""Price and power of a chip kind for serving's $/M tokens and J/token: the one place this package reads them.

:func:`chip_economics` returns the catalogue's per-chip price (USD/h) and board power (W)
as :class:`devices.Figure`, or None with the reason where the catalogue has none
(never invented). Everything in :mod:`planner.serving` that prices or powers chips
goes through it, so that a richer source (prices with a basis, power for every kind)
replaces this one function.
"""

from __future__ import annotations

from dataclasses import dataclass

import devices
from devices.figure import Figure


@dataclass(frozen=True, slots=True)
class ChipEconomics:
    """A kind's price and power, each a sourced figure or None with the reason."""

    kind: str
    price_per_hour: Figure | None
    """USD per chip-hour."""
    power: Figure | None
    """Board power, W."""
    price_missing: str = ""
    power_missing: str = ""


def chip_economics(kind: str) -> ChipEconomics:
    """The catalogue's price and board power of ``kind`` (None with the reason where there is none)."""
    chip = devices.chip(kind)
    price, power = chip.price_per_hour, chip.power
    return ChipEconomics(
        chip.kind, price, power,
        "" if price is not None else f"no price for {chip.kind} in the catalogue (devices/chips/{chip.kind}.py)",
        "" if power is not None else f"no board power for {chip.kind} in the catalogue (devices/chips/{chip.kind}.py)")


def fleet_rates(chips: dict[str, int]) -> tuple[float | None, float | None, str, str, tuple[Figure, ...]]:
    """(USD/h, W, why no price, why no power, figures used) of ``chips`` (kind -> count): None where any
    kind lacks the figure."""
    usd, watts = 0.0, 0.0
    no_price, no_power = [], []
    figures: list[Figure] = []
    for kind, n in chips.items():
        e = chip_economics(kind)
        if e.price_per_hour is None:
            no_price.append(e.price_missing)
        else:
            usd += n * e.price_per_hour.value
            figures.append(e.price_per_hour)
        if e.power is None:
            no_power.append(e.power_missing)
        else:
            watts += n * e.power.value
            figures.append(e.power)
    return (None if no_price else usd, None if no_power else watts, "; ".join(no_price), "; ".join(no_power),
            tuple(figures))


__all__ = ["ChipEconomics", "chip_economics", "fleet_rates"]
