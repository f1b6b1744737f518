"""The user's line that caused something, as ``file:line`` (relative to the working directory when under it).

The user's code is every frame outside torch, interop, the standard library and installed packages
(site-packages): a CUDA call made inside transformers or ``typing_extensions`` on behalf of the script is
charged to the script's line that called into them. When no frame of the stack is the user's (a library's
own thread), the innermost frame outside torch and interop is named instead, then the innermost frame.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig

import torch

_INTEROP_DIR = os.path.dirname(os.path.abspath(__file__))
_OURS = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _INTEROP_DIR + os.sep)
_SYNTHETIC = ("<frozen", "<string>")


def _library_dirs() -> tuple[str, ...]:
    """The standard library's and installed packages' directories (each ending in a separator)."""
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(key)}
    try:
        found.update(site.getsitepackages())
    except AttributeError:  # some virtualenv builds lack it
        pass
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if user:
        found.add(user)
    dirs = set()
    for path in found:
        dirs.add(os.path.abspath(path) + os.sep)
        dirs.add(os.path.realpath(path) + os.sep)
    return tuple(sorted(dirs))


_LIBRARIES = _library_dirs()


def _internal(filename: str) -> bool:
    return filename.startswith(_OURS) or filename.startswith(_SYNTHETIC)


def is_user_file(filename: str) -> bool:
    """True for a file of the user's code: not torch, interop, the standard library or an installed package."""
    return not (_internal(filename) or filename.startswith(_LIBRARIES))


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def format_site(filename: str, lineno: int) -> str:
    """``file:line``, the file relative to the working directory when under it."""
    return f"{_relative(filename)}:{lineno}"


def _site(frame) -> str:
    return format_site(frame.f_code.co_filename, frame.f_lineno)


def call_site(depth: int = 2) -> str:
    """``file:line`` of the first frame of the user's code, from ``depth`` frames up (see the module doc)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return "<unknown>"
    innermost = outside_ours = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if innermost is None:
            innermost = frame
        if not _internal(filename):
            if not filename.startswith(_LIBRARIES):
                return _site(frame)
            if outside_ours is None:
                outside_ours = frame
        frame = frame.f_back
    chosen = outside_ours or innermost
    return _site(chosen) if chosen is not None else "<unknown>"


def stacklevel(depth: int = 2) -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the caller of this function that points at the frame
    ``call_site(depth)`` names (so the warning and the recorded call site agree)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return 1
    level = 2  # stacklevel 1 is the function calling warnings.warn: the frame above this one
    first_outside_ours = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _internal(filename):
            if not filename.startswith(_LIBRARIES):
                return level
            if first_outside_ours is None:
                first_outside_ours = level
        frame = frame.f_back
        level += 1
    return first_outside_ours or 2
