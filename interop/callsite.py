"""The user's line that caused something: the innermost Python frame outside torch, interop and the
standard library's wrappers, as ``file:line`` (relative to the working directory when under it)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys

import torch

_INTEROP_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_DIRS = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _INTEROP_DIR + os.sep)
_SKIP_FILES = tuple(os.path.abspath(m.__file__) for m in (contextlib, functools)) + ("<frozen", "<string>")


def _skipped(filename: str) -> bool:
    return filename.startswith(_SKIP_DIRS) or filename.startswith(_SKIP_FILES)


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def call_site(depth: int = 2) -> str:
    """``file:line`` of the first frame, from ``depth`` frames up, outside torch and interop.

    Falls back to the innermost frame when the whole stack is inside them.
    """
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return "<unknown>"
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _skipped(filename):
            return f"{_relative(filename)}:{frame.f_lineno}"
        if fallback is None:
            fallback = f"{_relative(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return fallback or "<unknown>"


def stacklevel(depth: int = 2) -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the caller of this function that points at the frame
    ``call_site(depth)`` names (so the warning and the recorded call site agree)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return 1
    level = 2  # stacklevel 1 is the function calling warnings.warn: the frame above this one
    while frame is not None:
        if not _skipped(frame.f_code.co_filename):
            return level
        frame = frame.f_back
        level += 1
    return 2
