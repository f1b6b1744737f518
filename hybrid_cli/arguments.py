"""Argument types the ``hybrid`` commands share: a value argparse refuses names its option and what is
accepted (exit status 2), so that 0 or a word never reads as "not given" or reaches a traceback."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1 (``--gbs``, ``--batch``, ``--seq``, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def count(text: str) -> int:
    """An integer >= 0 (``--run STEPS``: 0 is "do not run")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def slot_list(text: str) -> list[int]:
    """Comma-separated slot indices (``--slots 0,1,4``)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        slots = [int(item) for item in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated slot indices such as 0,1,4, got {text!r}") from None
    if not slots or any(s < 0 for s in slots):
        raise argparse.ArgumentTypeError(f"expected comma-separated slot indices (>= 0) such as 0,1,4, got {text!r}")
    return slots


__all__ = ["count", "positive_int", "slot_list"]
