"""Parsing and printing of sizes, bandwidths and durations in rack specs.

Sizes are always bytes: decimal prefixes (KB, MB, GB, TB) are powers of 1000
and binary ones (KiB, MiB, GiB, TiB) powers of 1024, as on datasheets (an
H100's "80 GB" is 80e9 bytes; a Trainium2's "96 GiB" is 96 * 2**30 bytes).
"""

from __future__ import annotations

import math
import re

SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
"""Accepted size suffixes and their byte multipliers (matched case-insensitively)."""

BANDWIDTH_UNITS: dict[str, float] = {
    "B/s": 1.0,
    "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
    "KiB/s": 2.0**10, "MiB/s": 2.0**20, "GiB/s": 2.0**30, "TiB/s": 2.0**40,
    # Network line rates are quoted in bits; b (bit) vs B (byte) is case-sensitive.
    "Mbps": 1e6 / 8, "Gbps": 1e9 / 8, "Tbps": 1e12 / 8,
    "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8,
}
"""Accepted bandwidth suffixes and their bytes/s multipliers (case-sensitive: Gb is bits)."""

DURATION_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
"""Accepted duration suffixes and their multipliers to seconds."""

_NUMBER_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*$")
_SIZE_LOOKUP = {k.lower(): v for k, v in SIZE_UNITS.items()}


def _split(text: str, what: str, accepted: str) -> tuple[str, str]:
    match = _NUMBER_UNIT.match(text)
    if not match:
        raise ValueError(f"{what}: cannot read {text!r}; expected a number with a unit, one of: {accepted}")
    return match.group(1), match.group(2)


def parse_size(value: int | str, field: str = "size") -> int:
    """Bytes from ``"2GiB"``, ``"80GB"``, ``"1.5 GiB"``, ``"4096"`` or an integer.

    Units: B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers
    of 1024), case-insensitive; a bare number is bytes.  The result must be a
    whole, non-negative number of bytes.  ``field`` names the spec field in
    the ValueError raised for anything else.
    """
    accepted = ", ".join(SIZE_UNITS)
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a size such as '2GiB' or an integer of bytes, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{field}: a size cannot be negative, got {value}")
        return value
    if isinstance(value, float):
        if value.is_integer() and value >= 0:
            return int(value)
        raise ValueError(f"{field}: expected a whole non-negative number of bytes, got {value!r}")
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a size such as '2GiB' or an integer of bytes, got {value!r}")
    number, unit = _split(value, field, accepted)
    scale = _SIZE_LOOKUP.get((unit or "B").lower())
    if scale is None:
        raise ValueError(f"{field}: unknown size unit {unit!r} in {value!r}; accepted units: {accepted}")
    # Exact arithmetic for the common "2GiB" case; decimals go through float
    # and must still land on a whole byte.
    if re.fullmatch(r"[0-9]+", number):
        return int(number) * scale
    result = float(number) * scale
    if not math.isfinite(result) or abs(result - round(result)) > max(1e-9, 1e-12 * result):
        raise ValueError(f"{field}: {value!r} is not a whole number of bytes")
    return int(round(result))


def _quantity(value: float | int | str, field: str, units: dict, kind: str, example: str, plain: str) -> float:
    """A number with an optional unit of ``units`` (a bare number is already in base units)."""
    accepted = ", ".join(units)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{field}: expected a {kind} such as '{example}' or a number of {plain}, got {value!r}")
    if not isinstance(value, str):
        return float(value)
    number, unit = _split(value, field, accepted)
    if not unit:
        return float(number)
    if unit in units:
        return float(number) * units[unit]
    raise ValueError(f"{field}: unknown {kind} unit {unit!r} in {value!r}; accepted units: {accepted}")


def parse_bandwidth(value: float | int | str, field: str = "bandwidth") -> float:
    """Bytes per second from ``"450GB/s"``, ``"3200Gbps"`` (bits), or a number (already bytes/s)."""
    result = _quantity(value, field, BANDWIDTH_UNITS, "bandwidth", "450GB/s", "bytes/s")
    if not math.isfinite(result) or result <= 0:
        raise ValueError(f"{field}: a bandwidth must be a positive finite number, got {value!r}")
    return result


def parse_duration(value: float | int | str, field: str = "latency") -> float:
    """Seconds from ``"0.6us"``, ``"2.7 us"``, ``"1ms"`` or a number (already seconds)."""
    result = _quantity(value, field, DURATION_UNITS, "duration", "2.7us", "seconds")
    if not math.isfinite(result) or result < 0:
        raise ValueError(f"{field}: a duration must be a finite non-negative number, got {value!r}")
    return result


_SI_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def format_value(value: float | None, unit: str) -> str:
    """Human-readable value with an SI prefix: ``989e12, "FLOP/s"`` -> ``"989 TFLOP/s"``.

    Byte counts that are whole GiB print in GiB (``96 GiB``), because that is
    how their vendors quote them; ``None`` prints as ``"-"``.
    """
    if value is None:
        return "-"
    if unit == "B" and value >= 2**30 and float(value) % 2**30 == 0:
        return f"{int(value) // 2**30} GiB"
    if unit == "USD/h":
        return f"${value:,.4g}/h"
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
            if value >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value:.3g} s"
    for scale, prefix in _SI_PREFIXES:
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}".rstrip()
    return f"{value:.4g} {unit}".rstrip()


def format_bytes(n: float) -> str:
    """Binary units, two decimals: ``1.50 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"
