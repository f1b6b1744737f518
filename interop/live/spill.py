"""Tensors set aside in a temporary file until a check reads them back, so that they take no host memory meanwhile.

``hybrid plan --run`` trains the plan, then the same model on one slot, and compares the two. What it compares of
the first training (its first step's gradients, its parameters after the last step) waits here while the second
trains, rather than in the host's memory beside it: the host holds one training at a time, which is what lets
the README's flagship run on a laptop's memory. The file is an anonymous one in the system's temporary directory
(removed when closed, or by the system if the process dies); the bytes read back are the bytes written.

Where the file system allows it (Linux, a disk-backed directory), the file is written and read with ``O_DIRECT``
through one small aligned buffer: the bytes go to the disk without passing through the page cache, which would
otherwise hold a copy of everything spilled in the host's memory until the kernel writes it back (and, on a
virtual machine whose host reclaims freed memory, pay a first touch for every page of it). A tmpfs ``/tmp`` or
another system refuses ``O_DIRECT``: the file is then an ordinary buffered one.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import tempfile

import torch

_ALIGN = 4096
"""Offsets and lengths of direct I/O are multiples of this (the largest logical block size of common disks)."""
_STAGE = 8 << 20
"""The aligned buffer direct I/O goes through, in bytes (a multiple of :data:`_ALIGN`)."""


class Spill:
    """Named CPU tensors kept in a temporary file: :meth:`put` writes, :meth:`get` reads back a copy. A context
    manager (or :meth:`close`) removes the file."""

    def __init__(self, directory: str | None = None):
        """``directory``: where the file lives (default: the system's temporary directory)."""
        self._io = _DirectFile.open(directory) or _BufferedFile(directory)
        self._where: dict[str, tuple[int, tuple[int, ...], torch.dtype]] = {}
        self._end = 0
        self._bytes = 0

    @property
    def direct(self) -> bool:
        """Whether the file bypasses the page cache (``O_DIRECT``; see the module doc)."""
        return isinstance(self._io, _DirectFile)

    def put(self, name: str, tensor: torch.Tensor) -> None:
        """Write ``tensor``'s values (any device: copied to the CPU first) under ``name``."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"Spill.put: {name!r} must be a tensor, got {type(tensor).__name__}")
        t = tensor.detach().cpu().contiguous()
        nbytes = t.numel() * t.element_size()
        self._io.write(self._end, _bytes(t))
        self._where[name] = (self._end, tuple(t.shape), t.dtype)
        self._end += -(-nbytes // _ALIGN) * _ALIGN
        self._bytes += nbytes

    def put_all(self, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
        """:meth:`put` every tensor of ``tensors`` as ``prefix/name``; one tensor under several names (a tied
        parameter) is written once."""
        written: dict[int, str] = {}
        for name, t in tensors.items():
            key = f"{prefix}/{name}"
            if id(t) in written:
                self._where[key] = self._where[written[id(t)]]
                continue
            self.put(key, t)
            written[id(t)] = key

    def get(self, name: str) -> torch.Tensor:
        """A new CPU tensor with the values written under ``name`` (KeyError if none were)."""
        if name not in self._where:
            raise KeyError(f"Spill.get: nothing was written under {name!r}")
        offset, shape, dtype = self._where[name]
        t = torch.empty(shape, dtype=dtype)
        self._io.read(offset, _bytes(t), name)
        return t

    def __contains__(self, name: str) -> bool:
        return name in self._where

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors written so far."""
        return self._bytes

    def close(self) -> None:
        """Remove the file (what was written can no longer be read)."""
        self._io.close()
        self._where.clear()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _BufferedFile:
    """An anonymous temporary file written and read through the page cache."""

    def __init__(self, directory: str | None):
        self._file = tempfile.TemporaryFile(dir=directory)

    def write(self, offset: int, data: memoryview) -> None:
        self._file.seek(offset)
        self._file.write(data)

    def read(self, offset: int, into: memoryview, name: str) -> None:
        self._file.seek(offset)
        done = 0
        while done < len(into):
            n = self._file.readinto(into[done:])
            if not n:
                raise OSError(f"Spill.get: the file ended {len(into) - done} byte(s) short of {name!r}")
            done += n

    def close(self) -> None:
        self._file.close()


class _DirectFile:
    """An unlinked temporary file opened with ``O_DIRECT``, every transfer staged through one aligned buffer."""

    def __init__(self, fd: int):
        self._fd = fd
        self._stage = mmap.mmap(-1, _STAGE)  # page-aligned, as O_DIRECT wants the memory it transfers

    @classmethod
    def open(cls, directory: str | None) -> _DirectFile | None:
        """The file, or None where the platform or the file system refuses ``O_DIRECT``."""
        flag = getattr(os, "O_DIRECT", None)
        if flag is None:
            return None
        fd, path = tempfile.mkstemp(dir=directory)
        try:
            direct = os.open(path, os.O_RDWR | flag)
        except OSError:
            return None
        finally:
            os.close(fd)
            os.unlink(path)
        file = cls(direct)
        try:  # some file systems open with O_DIRECT and refuse the transfers
            file.write(0, memoryview(b"\0"))
        except OSError as e:
            file.close()
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return None
            raise
        return file

    def write(self, offset: int, data: memoryview) -> None:
        with memoryview(self._stage) as stage:  # released even on an error: the buffer can then be unmapped
            for start in range(0, len(data), _STAGE):
                part = data[start:start + _STAGE]
                stage[:len(part)] = part
                padded = -(-len(part) // _ALIGN) * _ALIGN
                stage[len(part):padded] = bytes(padded - len(part))
                done = 0
                while done < padded:
                    with stage[done:padded] as chunk:
                        done += os.pwrite(self._fd, chunk, offset + start + done)

    def read(self, offset: int, into: memoryview, name: str) -> None:
        with memoryview(self._stage) as stage:
            for start in range(0, len(into), _STAGE):
                n = min(_STAGE, len(into) - start)
                padded = -(-n // _ALIGN) * _ALIGN
                done = 0
                while done < n:
                    with stage[done:padded] as chunk:
                        got = os.preadv(self._fd, [chunk], offset + start + done)
                    if not got:
                        raise OSError(f"Spill.get: the file ended {n - done} byte(s) short of {name!r}")
                    done += got
                into[start:start + n] = stage[:n]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._stage.close()


def _bytes(t: torch.Tensor) -> memoryview:
    """A writable view of a contiguous CPU tensor's bytes (through ctypes: a tensor seen by numpy is marked
    not resizable, and a model's storages set aside are resized)."""
    n = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B") if n else memoryview(b"")


__all__ = ["Spill"]
