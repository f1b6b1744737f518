"""quantize at the edges (issue 17): empty tensors in every format, and the amax and generator arguments
refused by name (an infinite amax used to dequantize to all NaN, a wrong one to fail deep inside)."""

from __future__ import annotations

import math

import pytest
import torch

from interop.numerics import FORMATS, quantize

BLOCK_FORMATS = [name for name, f in FORMATS.items() if f.scaled_blocks]


def test_there_are_seven_block_formats():
    assert sorted(BLOCK_FORMATS) == ["mxfp4_e2m1", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8",
                                     "nvfp4"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 32), (2, 0, 16)])
def test_an_empty_tensor_quantizes_to_empty_codes_and_scales(fmt, shape):
    x = torch.empty(shape)
    q = quantize(x, fmt)
    assert q.shape == x.shape and q.codes.numel() == 0
    if q.block is not None:
        assert tuple(q.scales.shape) == (*shape[:-1], math.ceil(shape[-1] / q.block))
    back = q.dequantize()
    assert back.shape == x.shape and back.dtype == x.dtype


def test_an_empty_tensor_with_a_tensor_scale_rule():
    q = quantize(torch.empty(0, 8), "float8_e4m3fn", scale_rule="tensor")
    assert q.dequantize().shape == (0, 8)


@pytest.mark.parametrize("amax", [float("inf"), float("nan"), -1.0, torch.tensor(float("inf"))])
@pytest.mark.parametrize("fmt, rule", [("float8_e4m3fn", "tensor"), ("nvfp4", "nvfp4")])
def test_a_non_finite_or_negative_amax_is_refused(fmt, rule, amax):
    with pytest.raises(ValueError, match="amax: expected a finite magnitude >= 0"):
        quantize(torch.randn(4, 32), fmt, scale_rule=rule, amax=amax)


@pytest.mark.parametrize("amax, error, message", [
    ("big", TypeError, "amax: expected a number or a one-element tensor, got str"),
    ([1.0], TypeError, "amax: expected a number or a one-element tensor, got list"),
    (torch.ones(3), ValueError, "amax: expected a number or a one-element tensor (the tensor's largest magnitude), "
                                "got a tensor of shape (3,)"),
    (torch.tensor(True), TypeError, "amax: expected a real number, got a torch.bool tensor"),
])
def test_a_wrong_amax_names_itself(amax, error, message):
    with pytest.raises(error) as raised:
        quantize(torch.randn(4, 32), "float8_e4m3fn", scale_rule="tensor", amax=amax)
    assert message in str(raised.value)


def test_an_amax_in_a_one_element_tensor_equals_the_number():
    x = torch.randn(4, 32)
    a = quantize(x, "float8_e4m3fn", scale_rule="tensor", amax=torch.tensor([[2.0]]))
    b = quantize(x, "float8_e4m3fn", scale_rule="tensor", amax=2.0)
    assert torch.equal(a.codes.view(torch.uint8), b.codes.view(torch.uint8))
    assert torch.equal(a.dequantize(), b.dequantize())


@pytest.mark.parametrize("generator", [5, "seed", torch.tensor(1)])
def test_a_generator_that_is_not_one_names_itself(generator):
    with pytest.raises(TypeError, match=r"generator: expected a torch.Generator \(on cpu\) or None, got"):
        quantize(torch.randn(64), "mxfp8_e4m3", rounding="stochastic", generator=generator)
