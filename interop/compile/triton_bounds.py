"""Every load, store and atomic of an interpreted Triton launch checked against the memory the launch was
given, before it happens.

On a GPU a kernel that reads or writes outside its allocations (a missing mask, a wrong one, a negative
offset) faults: CUDA reports "an illegal memory access was encountered" and the process carries on to
handle it. Triton's interpreter dereferences the addresses as they are, so on an emulated slot the same
kernel corrupts host memory or kills the process (SIGSEGV, SIGABRT). Here each access's active lanes are
compared with the byte ranges of the launch's tensor arguments (each an allocation on the slot) and an
access outside all of them raises :class:`IllegalMemoryAccess` (a ``torch.AcceleratorError``, as a CUDA
fault is in torch) naming the kernel, the argument nearest the address and the offset, before a byte of
that access is read or written. The check is two vector reductions per access (min and max of the active
addresses) when the access stays inside one allocation, which is the common case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from devices import dtype_label


class IllegalMemoryAccess(torch.AcceleratorError):
    """A Triton kernel on an emulated slot accessed memory outside the allocations it was given (CUDA's
    ``cudaErrorIllegalAddress``); raised before the access, so nothing of it was read or written."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """One tensor argument's memory: its storage's byte range and where the tensor starts in it."""

    name: str
    start: int
    """First byte of the storage."""
    stop: int
    """One past its last byte."""
    data: int
    """The tensor's data pointer (what the kernel's pointer arithmetic starts from)."""
    element: int
    dtype: str


def allocations(names, values) -> list[Allocation]:
    """The allocations of a launch's tensor arguments (``names`` beside ``values``; tuples and wrappers are
    looked into, a tuple's items named ``name[i]``)."""
    out = []

    def visit(name, value):
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            start = storage.data_ptr()
            out.append(Allocation(name, start, start + storage.nbytes(), value.data_ptr(), value.element_size(),
                                  dtype_label(value.dtype)))
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                visit(f"{name}[{i}]", item)
        else:
            base = getattr(value, "base", None)  # triton.reinterpret's TensorWrapper, TensorDescriptor
            if isinstance(base, torch.Tensor):
                visit(name, base)

    for name, value in zip(names, values):
        visit(name, value)
    return out


class Bounds:
    """The checker of one launch: :meth:`check` is called with each access's pointers and mask."""

    def __init__(self, kernel: str, slot: int, allocs: list[Allocation]):
        self.kernel, self.slot, self.allocs = kernel, slot, allocs
        self._ranges = sorted((a.start, a.stop) for a in allocs)

    def check(self, what: str, ptrs, mask, element: int) -> None:
        """Raise :class:`IllegalMemoryAccess` unless every active lane of ``ptrs`` (uint64 addresses) lies with
        its ``element`` bytes inside one allocation."""
        addresses = np.asarray(ptrs)
        if mask is not None:
            active = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
            if not active.all():
                addresses = addresses[active]
        if addresses.size == 0:
            return
        lo, hi = int(addresses.min()), int(addresses.max()) + element
        for start, stop in self._ranges:
            if start <= lo and hi <= stop:
                return  # the whole access inside one allocation
        flat = addresses.reshape(-1).astype(np.uint64)
        inside = np.zeros(flat.shape, dtype=bool)
        for start, stop in self._ranges:
            inside |= (flat >= start) & (flat + np.uint64(element) <= stop)
        if inside.all():
            return  # lanes spread over several allocations, each inside one
        bad = int(flat[~inside][0])
        raise IllegalMemoryAccess(self._message(what, bad, element, int((~inside).sum()), flat.size))

    def _nearest(self, address: int) -> Allocation | None:
        def distance(a: Allocation) -> int:
            return a.start - address if address < a.start else max(0, address - a.stop + 1)

        return min(self.allocs, key=distance, default=None)

    def _message(self, what: str, address: int, element: int, bad: int, lanes: int) -> str:
        head = (f"CUDA error: an illegal memory access was encountered (emulated on hybrid:{self.slot}: the Triton "
                f"kernel {self.kernel} {what}")
        near = self._nearest(address)
        if near is None:
            return f"{head} address 0x{address:x}, and it was given no tensor; nothing was read or written)"
        offset = address - near.data
        size = near.stop - near.data
        return (f"{head} byte offset {offset} (element {offset // near.element}) of argument {near.name!r}, whose "
                f"memory holds {size} bytes ({size // near.element} {near.dtype} elements) from its data pointer; "
                f"{bad} of {lanes} active lanes out of bounds; this access read or wrote nothing: check the "
                f"kernel's mask and offsets)")


__all__ = ["Allocation", "Bounds", "IllegalMemoryAccess", "allocations"]
