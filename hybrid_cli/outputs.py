"""The files a ``hybrid`` command writes: every path is checked before the long work (a path that cannot
be written is exit status 2 before anything runs), data is written before pictures and whole
(:mod:`devices.output_files`), and a picture that cannot be drawn (no plotting package) is reported without
losing what was already written: the command then exits 1."""

from __future__ import annotations

import sys
from typing import Callable

from devices.output_files import atomic_write, check_writable


def check_outputs(paths: dict[str, object]) -> None:
    """Each given path (``{"--json": args.json, ...}``, None: not asked for) can be written; else ValueError
    naming its option."""
    for option, path in paths.items():
        if path is not None:
            check_writable(path, option)


def write_data(option: str, path: str, text: str) -> str:
    """Write a data file whole (a temporary file renamed into place); returns the path."""
    return atomic_write(path, text, option)


def draw(command: str, option: str, draw_fn: Callable[[], str]) -> str | None:
    """Draw a picture; its path, or None when it could not be drawn (said on stderr, nothing raised)."""
    try:
        return draw_fn()
    except ImportError as error:
        missing = error.name or str(error)
        print(f"hybrid {command}: error: {option}: not drawn: {missing} is not installed (pip install "
              f"matplotlib); everything else was written", file=sys.stderr)
    except (OSError, ValueError) as error:
        print(f"hybrid {command}: error: {option}: not drawn: {error}", file=sys.stderr)
    return None


__all__ = ["check_outputs", "draw", "write_data"]
