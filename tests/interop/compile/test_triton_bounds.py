"""Triton kernels that access memory out of bounds on an emulated slot (issue 17): a missing mask, a wrong one,
a negative offset, an atomic past the end. On a GPU each is CUDA's recoverable "illegal memory access"; Triton's
interpreter would corrupt the host or kill the process. Here the access is refused before it is made, with
the error CUDA gives, naming the kernel, the argument and the offset, and the process and the slot carry on.

The overruns here stay within a few dozen bytes of their allocation: a slot's allocations are at least a
64-byte block header apart, so those bytes belong to no allocation whatever the allocator's placement."""

from __future__ import annotations

import pytest
import torch

import interop

triton = pytest.importorskip("triton", reason="Triton is not installed")
import triton.language as tl  # noqa: E402

from interop.compile.triton_bounds import IllegalMemoryAccess  # noqa: E402
from tests.support import triton_kernels as K  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_timeline")

SLOT = "hybrid:1"


@triton.jit
def copy_no_mask(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets))


@triton.jit
def copy_masked(src_ptr, dst_ptr, n, BLOCK: tl.constexpr, OFF_BY: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n + OFF_BY  # OFF_BY=1: the classic <= n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=offsets < n), mask=mask)


@triton.jit
def shift_right(ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    values = tl.load(ptr + offsets - 1, mask=mask)  # element -1 for lane 0
    tl.store(ptr + offsets, values, mask=mask)


@triton.jit
def count_into(counts_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.atomic_add(counts_ptr + offsets, 1)


def test_an_access_past_the_end_is_refused_before_it_is_made():
    n, block = 124, 64
    src = torch.arange(n, dtype=torch.float32, device=SLOT)
    dst = torch.zeros(n, device=SLOT)
    with pytest.raises(torch.AcceleratorError) as error:
        copy_no_mask[(2,)](src, dst, BLOCK=block)
    message = str(error.value)
    assert isinstance(error.value, IllegalMemoryAccess)
    assert message.startswith("CUDA error: an illegal memory access was encountered (emulated on hybrid:1")
    assert "copy_no_mask" in message
    # The load of program 1 is the first access to leave src: 4 of its 64 lanes are past element 123.
    assert "loads from byte offset 496 (element 124) of argument 'src_ptr'" in message
    assert "holds 496 bytes (124 float32 elements)" in message and "4 of 64 active lanes" in message
    # Program 0 ran whole; program 1 wrote nothing.
    assert torch.equal(dst[:block].cpu(), torch.arange(block, dtype=torch.float32))
    assert torch.equal(dst[block:].cpu(), torch.zeros(n - block))


def test_a_mask_off_by_one_is_refused_at_the_element_past_the_end():
    n, block = 100, 128
    src, dst = torch.ones(n, device=SLOT), torch.zeros(n, device=SLOT)
    with pytest.raises(IllegalMemoryAccess, match=r"stores to byte offset 400 \(element 100\) of argument "
                                                  r"'dst_ptr'.*1 of 101 active lanes"):
        copy_masked[(1,)](src, dst, n, BLOCK=block, OFF_BY=1)
    assert torch.equal(dst.cpu(), torch.zeros(n))  # the store was refused whole
    copy_masked[(1,)](src, dst, n, BLOCK=block, OFF_BY=0)  # the right mask: runs
    assert torch.equal(dst.cpu(), torch.ones(n))


def test_a_negative_offset_is_refused():
    data = torch.arange(16, dtype=torch.float32, device=SLOT)
    with pytest.raises(IllegalMemoryAccess, match=r"loads from byte offset -4 \(element -1\) of argument 'ptr'"):
        shift_right[(1,)](data, 16, BLOCK=16)
    assert torch.equal(data.cpu(), torch.arange(16, dtype=torch.float32))


def test_an_atomic_past_the_end_is_refused():
    counts = torch.zeros(10, dtype=torch.int32, device=SLOT)
    with pytest.raises(IllegalMemoryAccess, match=r"atomically updates byte offset 40 \(element 10\) of argument "
                                                  r"'counts_ptr'"):
        count_into[(1,)](counts, BLOCK=16)
    assert torch.equal(counts.cpu(), torch.zeros(10, dtype=torch.int32))


def test_the_slot_carries_on_after_a_fault():
    src, dst = torch.ones(8, device=SLOT), torch.zeros(8, device=SLOT)
    with pytest.raises(IllegalMemoryAccess):
        copy_no_mask[(1,)](src, dst, BLOCK=64)
    interop.reset_timeline()
    x, y = torch.randn(1000, device=SLOT), torch.randn(1000, device=SLOT)
    torch.testing.assert_close(K.add(x, y).cpu(), x.cpu() + y.cpu(), rtol=0, atol=0)
    assert [r.op for r in interop.timeline() if r.kind == "kernel"] == ["triton:add_kernel"]


def test_a_faulting_launch_is_not_placed_on_the_timeline():
    src, dst = torch.ones(8, device=SLOT), torch.zeros(8, device=SLOT)
    interop.reset_timeline()
    with pytest.raises(IllegalMemoryAccess):
        copy_no_mask[(1,)](src, dst, BLOCK=64)
    assert [r for r in interop.timeline() if r.kind == "kernel"] == []


def test_in_bounds_kernels_over_views_and_offsets_still_run():
    # A view's kernel may reach anywhere in its storage (a CUDA allocation is the unit): no fault.
    base = torch.arange(256, dtype=torch.float32, device=SLOT)
    view = base[64:128]
    out = torch.empty(64, device=SLOT)
    copy_masked[(1,)](view, out, 64, BLOCK=64, OFF_BY=0)
    assert torch.equal(out.cpu(), torch.arange(64, 128, dtype=torch.float32))
    shift_right[(1,)](view, 64, BLOCK=64)  # element -1 of the view is element 63 of its storage: inside
    assert view[0].item() == 63.0
