"""What an engine iteration's time is spent on: the parts a priced piece is split into."""

from __future__ import annotations

PARTS = ("compute", "memory", "communication", "overhead")
"""What an iteration's time is spent on (the bound of each kernel, collectives, per-iteration overhead)."""


def add(parts: dict, piece: dict, share: float) -> None:
    """Add ``piece`` times ``share`` into ``parts``, part by part."""
    for key in PARTS:
        parts[key] += piece[key] * share


def bound(parts: dict[str, float]) -> str:
    """The part an iteration spends most on: ``compute``, ``memory``, ``communication`` or ``overhead``."""
    return max(parts, key=parts.get)


__all__ = ["PARTS", "add", "bound"]
