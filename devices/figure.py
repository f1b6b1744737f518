"""A number with its provenance: the unit every catalogue figure carries.

Every figure the catalogue and the rack specs hand to the cost model is a
:class:`Figure`, so a modelled time can always say which published (or
projected) number it came from.  Values are plain SI: FLOP/s, bytes, bytes/s,
watts, seconds, US dollars per hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STATUSES: tuple[str, ...] = ("published", "secondary", "estimated", "projected", "calibrated")
"""Accepted values of :attr:`Figure.status`.

``published``: from the vendor's own documentation; ``secondary``: from a third
party (press, resellers, aggregators, reproductions of a datasheet) or a vendor
figure we could only read through one; ``estimated``: a figure of a shipping
part that no vendor states, estimated by a third party or inferred from a
vendor's remark (Trainium2's ~500 W, Trainium3's ~1 kW); ``projected``: derived
from announcements or an assumption, not a shipping part; ``calibrated``: fitted
to a measurement.
"""

UNITS: tuple[str, ...] = ("FLOP/s", "exp/s", "B", "B/s", "W", "s", "USD/h", "")
"""Accepted values of :attr:`Figure.unit` ("" is dimensionless)."""


@dataclass(frozen=True, slots=True)
class Figure:
    """One sourced number in SI units."""

    value: float
    """The number, in SI units (989e12 FLOP/s, 80e9 B, 96 * 2**30 B, 450e9 B/s)."""
    unit: str
    """One of :data:`UNITS`."""
    source: str
    """Human citation, with a URL when known."""
    status: str
    """One of :data:`STATUSES`."""
    note: str = ""
    """How the value was read or derived (dense vs sparse, halving, multipliers...)."""

    def __post_init__(self) -> None:
        # Validate here so a typo in a chip file fails at import, not in a
        # cost estimate hours later.
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise ValueError(f"Figure.value: expected a number, got {self.value!r}")
        if not math.isfinite(self.value) or self.value < 0:
            raise ValueError(f"Figure.value: expected a finite non-negative number, got {self.value!r}")
        if self.unit not in UNITS:
            raise ValueError(f"Figure.unit: unknown unit {self.unit!r}; accepted: {', '.join(repr(u) for u in UNITS)}")
        if self.status not in STATUSES:
            raise ValueError(f"Figure.status: unknown status {self.status!r}; accepted: {', '.join(STATUSES)}")
        if not self.source.strip():
            raise ValueError("Figure.source: every figure needs a source")

    @property
    def projected(self) -> bool:
        """True when the figure is a projection rather than a shipping part's number."""
        return self.status == "projected"

    def derive(self, factor: float, note: str, *, status: str = "projected", source: str | None = None) -> Figure:
        """A new figure ``factor * value`` citing ``source`` (if given) and this figure's source as its base."""
        base = f"base figure: {self.source}"
        return Figure(
            value=self.value * factor,
            unit=self.unit,
            source=base if source is None else f"{source}; {base}",
            status=status,
            note=note,
        )

    def with_note(self, extra: str) -> Figure:
        """The same figure with ``extra`` appended to its note (used to record fallback rules)."""
        note = f"{self.note}; {extra}" if self.note else extra
        return Figure(self.value, self.unit, self.source, self.status, note)
