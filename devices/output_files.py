"""Files written for the user (reports, JSON, traces, plots): checked before the long work that fills them,
and written whole or not at all.

:func:`check_writable` tries what the write will do (create a file beside the target, then rename it over
the target), so a missing folder, a path that is a folder, a read-only place or a pseudo file system
such as ``/proc`` is refused up front, naming the option. :func:`atomic_write` and :func:`atomic_path`
write to a temporary file in the target's folder and rename it into place: a write that fails (or a
signal in the middle) leaves the previous file, or nothing, never half a file. Both raise ValueError
naming what the file is for (the command turns that into its exit status 2).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from typing import Iterator


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def check_writable(path: str | os.PathLike, what: str) -> str:
    """``path`` as a string if a file can be written there (nothing is left behind); else ValueError naming
    ``what`` (the option or argument, e.g. ``"--json"``) and why."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a file path, got {type(path).__name__}")
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{what}: expected a file path, got an empty string")
    if os.path.isdir(path):
        raise ValueError(f"{what}: {path!r} is a directory; expected a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{what}: cannot write {path!r}: its folder {folder!r} does not exist")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".hybrid-probe-")
    except OSError as error:
        raise ValueError(f"{what}: cannot write {path!r}: {_reason(error)}") from None
    os.close(fd)
    os.unlink(probe)
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, what: str) -> Iterator[str]:
    """A temporary path beside ``path`` to write to (by a library that takes a file name: ``savefig``);
    renamed to ``path`` when the block ends without an exception, removed otherwise."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    stem, ext = os.path.splitext(os.path.basename(path))
    tmp = os.path.join(folder, f".{stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{ext}")
    try:  # created as open() would (0o666 less the umask), so the renamed file has the usual mode
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except OSError as error:
        raise ValueError(f"{what}: cannot write {path!r}: {_reason(error)}") from None
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as error:
        raise ValueError(f"{what}: cannot write {path!r}: {_reason(error)}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: str | os.PathLike, data: str | bytes, what: str) -> str:
    """Write ``data`` to ``path`` whole (a temporary file renamed into place); returns the path."""
    with atomic_path(path, what) as tmp:
        try:
            with open(tmp, "wb" if isinstance(data, bytes) else "w", encoding=None if isinstance(data, bytes)
                      else "utf-8") as f:
                f.write(data)
        except OSError as error:
            raise ValueError(f"{what}: cannot write {os.fspath(path)!r}: {_reason(error)}") from None
    return os.fspath(path)


__all__ = ["atomic_path", "atomic_write", "check_writable"]
