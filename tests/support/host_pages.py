"""Whether host memory is held: how many pages of an address range are resident (Linux ``mincore``).

The tests of memory given back to the host (a freed slot block unmapped, a replica's reduced gradients released)
read residency rather than the process's RSS, which other allocations move.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys

import pytest

PAGE = mmap.PAGESIZE
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore/madvise semantics are Linux's")


def resident_pages(address: int, length: int) -> int | None:
    """Resident pages among those wholly inside ``[address, address + length)``; None when the range is not
    mapped (an unmapped block)."""
    libc = ctypes.CDLL(None, use_errno=True)
    first = -(-address // PAGE) * PAGE
    last = (address + length) // PAGE * PAGE
    if last <= first:
        return 0
    count = (last - first) // PAGE
    vec = (ctypes.c_ubyte * count)()
    if libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(last - first), vec) != 0:
        if ctypes.get_errno() == errno.ENOMEM:
            return None
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in vec)


def whole_pages(length: int) -> int:
    """How many whole pages a range of ``length`` bytes at least spans."""
    return length // PAGE - 1
