"""Tensors set aside in a temporary file until a check reads them back, so that they take no host memory meanwhile.

``hybrid plan --run`` trains the plan, then the same model on one slot, and compares the two. What it compares of
the first training (its first step's gradients, its parameters after the last step) waits here while the second
trains, rather than in the host's memory beside it: the host holds one training at a time, which is what lets
the README's flagship run on a laptop's memory. The file is an anonymous one in the system's temporary directory
(removed when closed, or by the system if the process dies); the bytes read back are the bytes written.
"""

from __future__ import annotations

import ctypes
import tempfile

import torch


class Spill:
    """Named CPU tensors kept in a temporary file: :meth:`put` writes, :meth:`get` reads back a copy. A context
    manager (or :meth:`close`) removes the file."""

    def __init__(self, directory: str | None = None):
        """``directory``: where the file lives (default: the system's temporary directory)."""
        self._file = tempfile.TemporaryFile(dir=directory)
        self._where: dict[str, tuple[int, tuple[int, ...], torch.dtype]] = {}
        self._end = 0

    def put(self, name: str, tensor: torch.Tensor) -> None:
        """Write ``tensor``'s values (any device: copied to the CPU first) under ``name``."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"Spill.put: {name!r} must be a tensor, got {type(tensor).__name__}")
        t = tensor.detach().cpu().contiguous()
        self._file.seek(self._end)
        self._file.write(_bytes(t))
        self._where[name] = (self._end, tuple(t.shape), t.dtype)
        self._end += t.numel() * t.element_size()

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
        view = _bytes(t)
        self._file.seek(offset)
        done = 0
        while done < len(view):
            n = self._file.readinto(view[done:])
            if not n:
                raise OSError(f"Spill.get: the file ended {len(view) - done} byte(s) short of {name!r}")
            done += n
        return t

    def __contains__(self, name: str) -> bool:
        return name in self._where

    @property
    def nbytes(self) -> int:
        """Bytes written so far."""
        return self._end

    def close(self) -> None:
        """Remove the file (what was written can no longer be read)."""
        self._file.close()
        self._where.clear()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _bytes(t: torch.Tensor) -> memoryview:
    """A writable view of a contiguous CPU tensor's bytes (through ctypes: a tensor seen by numpy is marked
    not resizable, and a model's storages set aside are resized)."""
    n = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B") if n else memoryview(b"")


__all__ = ["Spill"]
