"""Memory nobody wrote (csrc/aten/native/Memory.cpp): under torch.use_deterministic_algorithms(True) with
torch.utils.deterministic.fill_uninitialized_memory (on by default) a slot's fresh memory is filled as torch
fills the CPU's and CUDA's (NaN for floating and complex, the largest value for integers), so reads of it show;
otherwise nothing is written. The reference is the CPU's own fill, byte for byte."""

from __future__ import annotations

import pytest
import torch

import interop

SLOT = "hybrid:6"

EMPTIES = {
    "empty": lambda dtype, device: torch.empty(2, 3, dtype=dtype, device=device),
    "empty_channels_last": lambda dtype, device: torch.empty(1, 2, 2, 2, dtype=dtype, device=device,
                                                             memory_format=torch.channels_last),
    "empty_strided": lambda dtype, device: torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=device),
    "empty_like": lambda dtype, device: torch.empty_like(torch.zeros(5, dtype=dtype, device=device)),
    "new_empty": lambda dtype, device: torch.zeros(1, dtype=dtype, device=device).new_empty(4),
    "resize_": lambda dtype, device: torch.zeros(2, dtype=dtype, device=device).resize_(7),  # keeps the 2 zeros
}

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.complex64, torch.float8_e4m3fn,
          torch.int32, torch.int64, torch.uint8, torch.int8, torch.uint16, torch.bool]


@pytest.fixture
def deterministic():
    previous = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous[0])
    torch.utils.deterministic.fill_uninitialized_memory = previous[1]


def _bytes(t: torch.Tensor) -> list[int]:
    return t.detach().cpu().contiguous().view(-1).view(torch.uint8).tolist()


@pytest.mark.parametrize("op", sorted(EMPTIES))
def test_each_empty_op_fills_as_the_cpu_does(op, deterministic):
    make = EMPTIES[op]
    for dtype in DTYPES:
        reference, got = make(dtype, "cpu"), make(dtype, SLOT)
        assert got.device == torch.device(SLOT) and got.stride() == reference.stride()
        assert _bytes(got) == _bytes(reference), dtype
    assert torch.isnan(make(torch.float32, SLOT).cpu()[-3:]).all()  # a floating tensor reads NaN


def _fills(make) -> list[str]:
    interop.reset_timeline()
    make()
    return [r.op for r in interop.timeline() if r.kind == "op" and "fill" in r.op]


def test_nothing_is_written_unless_both_settings_are_on(deterministic, fresh_timeline):
    grown = torch.zeros(2, device=SLOT)
    assert _fills(lambda: torch.empty(64, device=SLOT)) == ["aten::fill_.Scalar"]  # one fill, on the slot
    assert _fills(lambda: grown.resize_(3)) == ["aten::fill_.Scalar"]
    assert _fills(lambda: grown.resize_(2)) == []  # shrinking leaves nothing unwritten
    assert _fills(lambda: torch.empty(0, device=SLOT)) == []
    torch.utils.deterministic.fill_uninitialized_memory = False
    assert _fills(lambda: torch.empty(64, device=SLOT)) == []
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.use_deterministic_algorithms(False)  # the default
    assert _fills(lambda: torch.empty(64, device=SLOT)) == []
    assert _fills(lambda: torch.zeros(2, device=SLOT).resize_(50)) == []
