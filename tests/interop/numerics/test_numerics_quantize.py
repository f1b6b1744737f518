"""interop.numerics.quantize against independent references: torch's casts (plain formats),
torchao 0.18's MX and NVFP4 reference (bit for bit, random and edge-case tensors), a
float64 numpy model of OCP's sample algorithm (MXINT8, which torchao lacks), and the
deliberate differences, each named and checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interop.numerics import FORMATS, bits_per_element, quantize

mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor",
                         reason="torchao 0.18 (requirements-dev.txt) is the MX/NVFP4 reference")
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.kernels import pack_uint4, unpack_uint4  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale  # noqa: E402

MX_ELEMENTS = {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2, "mxfp6_e3m2": "fp6_e3m2",
               "mxfp6_e2m3": "fp6_e2m3", "mxfp4_e2m1": torch.float4_e2m1fn_x2}
RULES = {"ocp": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def _torchao_mx(x, fmt, rule):
    scales, data = mx.to_mx(x, MX_ELEMENTS[fmt], 32, RULES[rule])
    if MX_ELEMENTS[fmt] == torch.float4_e2m1fn_x2:
        data = unpack_uint4(data.view(torch.uint8))
    return _bits(scales), _bits(data)


def _edge_cases() -> torch.Tensor:
    """Blocks built to hit rounding and range corners once scaled: exact powers of two,
    the largest normals, midpoints between element values, subnormal elements, negative
    zeros, all-zero blocks, one outlier beside tiny values, values just under a binade."""
    g = torch.Generator().manual_seed(11)
    rows = [
        torch.zeros(32), -torch.zeros(32), torch.full((32,), 448.0), torch.full((32,), 6.0),
        2.0 ** torch.arange(-16, 16, dtype=torch.float32),
        torch.linspace(-1, 1, 32), torch.linspace(0.5, 1.0, 32) * (1 + 2.0 ** -23),
        torch.cat([torch.tensor([1e30]), torch.full((31,), 1e-10)]),
        torch.cat([torch.tensor([3.0e38]), torch.randn(31, generator=g)]),
        torch.cat([torch.tensor([2.0 ** -100]), torch.full((31,), 2.0 ** -110)]),
        (torch.arange(32, dtype=torch.float32) + 0.5) / 16,  # element midpoints for E2M1/E2M3
        torch.nextafter(2.0 ** torch.arange(-8, 24, dtype=torch.float32), torch.tensor(0.0)),
        torch.randint(-8, 8, (32,), generator=g).float() * 0.25,
    ]
    return torch.stack(rows)


def _random(seed: int, shape=(48, 256)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * torch.logspace(-30, 30, shape[-1])[torch.randperm(shape[-1], generator=g)]


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("fmt", list(MX_ELEMENTS))
def test_mx_equals_torchao_bit_for_bit(fmt, rule):
    for x in (_random(0), _random(1).bfloat16(), _edge_cases()):
        q = quantize(x, fmt, scale_rule=rule)
        scales, data = _torchao_mx(x, fmt, rule)
        assert torch.equal(_bits(q.scales), scales)
        assert torch.equal(_bits(q.codes), data)
        assert q.codes.shape == x.shape and q.scales.shape == (*x.shape[:-1], x.shape[-1] // 32)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4_e2m1"])
def test_mx_dequantize_equals_torchao(fmt):
    x = _random(2)
    q = quantize(x, fmt)
    theirs = mx.to_dtype(*_packed_for_torchao(q), MX_ELEMENTS[fmt], 32, torch.float32)
    assert torch.equal(q.dequantize(), theirs)


def _packed_for_torchao(q):
    data = q.codes if q.codes.dtype != torch.uint8 else pack_uint4(q.codes)
    return data, q.scales


def test_nvfp4_equals_torchao_bit_for_bit():
    for x in (_random(3, (32, 128)), _random(4, (16, 64)).bfloat16(), _edge_cases()):
        q = quantize(x, "nvfp4")
        tensor_scale = per_tensor_amax_to_scale(x.float().abs().amax())
        scales, data = nvfp4_quantize(x.contiguous(), 16, tensor_scale)
        assert torch.equal(q.tensor_scale, tensor_scale)
        assert torch.equal(_bits(q.scales), _bits(scales))
        assert torch.equal(q.codes, unpack_uint4(data))
        assert torch.equal(q.packed().view(torch.uint8), data)


def test_nvfp4_given_amax_is_delayed_scaling():
    x = _random(5, (8, 64))
    q = quantize(x, "nvfp4", amax=1e31)
    scales, data = nvfp4_quantize(x, 16, per_tensor_amax_to_scale(torch.tensor(1e31)))
    assert torch.equal(_bits(q.scales), _bits(scales)) and torch.equal(q.codes, unpack_uint4(data))


# -- deliberate differences from torchao, each named -----------------------------------------


def test_difference_non_finite_block_gets_a_nan_scale():
    """MX has no Inf: a block holding Inf (or NaN) gets the NaN scale 0xFF and dequantizes
    to NaN (microsoft/microxcaling's choice). torchao 0.18 gives an Inf block the finite
    scale 2**(128 - emax) and flushes the block's finite elements to zero, which hides
    that they were lost. Other blocks are unaffected."""
    x = _random(6, (2, 64))
    x[0, 5] = float("inf")
    q = quantize(x, "mxfp8_e4m3")
    scales, data = _torchao_mx(x, "mxfp8_e4m3", "ocp")
    assert q.scales.view(torch.uint8)[0, 0] == 0xFF and scales[0, 0] == 127 + 128 - 8
    assert torch.isnan(q.dequantize()[0, :32]).all()
    theirs = mx.to_dtype(data.view(torch.float8_e4m3fn), scales.view(torch.float8_e8m0fnu),
                         torch.float8_e4m3fn, 32, torch.float32)
    assert (theirs[0, :32][x[0, :32].isfinite()] == 0).all()
    assert torch.equal(_bits(q.scales)[:, 1:], scales[:, 1:]) and torch.equal(_bits(q.codes)[1], data[1])


@pytest.mark.parametrize("rule", list(RULES))
def test_difference_smallest_scale_divides_by_the_stored_scale(rule):
    """A block whose scale is E8M0's smallest, 2**-127, is divided by 2**-127. torchao 0.18
    divides by 2**-126 (FLOOR; float32's smallest normal) or by 1 (RCEIL, Transformer
    Engine's exp2f_rcp), so its elements disagree with the scale it stores: its
    dequantized block is off by a factor of 2 (FLOOR) or flushed to zero (RCEIL)."""
    x = torch.full((1, 32), 2.0 ** -121) * torch.linspace(0.5, 1, 32)
    q = quantize(x, "mxfp8_e4m3", scale_rule=rule)
    assert q.scales.view(torch.uint8).item() == 0
    ours = q.dequantize()
    assert torch.allclose(ours, x, rtol=2.0 ** -3, atol=0)  # E4M3 keeps 3 mantissa bits
    scales, data = _torchao_mx(x, "mxfp8_e4m3", rule)
    theirs = mx.to_dtype(data.view(torch.float8_e4m3fn), scales.view(torch.float8_e8m0fnu),
                         torch.float8_e4m3fn, 32, torch.float32)
    assert scales.item() == 0 and not torch.allclose(theirs, x, rtol=0.25, atol=0)


def test_difference_nvfp4_zero_tensor():
    """An all-zero tensor has amax 0: torchao's tensor scale is 0 and everything is NaN;
    here the tensor scale falls back to 1 and the zeros stay zeros."""
    q = quantize(torch.zeros(4, 32), "nvfp4")
    assert q.tensor_scale.item() == 1.0 and torch.equal(q.dequantize(), torch.zeros(4, 32))


# -- the scale rules --------------------------------------------------------------------------


def test_trn3_scale_is_twice_ocp_and_never_saturates():
    x = _random(7)
    ocp, trn3 = quantize(x, "mxfp8_e4m3"), quantize(x, "mxfp8_e4m3", scale_rule="trn3")
    ocp_codes, trn3_codes = ocp.scales.view(torch.uint8).int(), trn3.scales.view(torch.uint8).int()
    inside = (ocp_codes > 0) & (ocp_codes < 254)
    assert torch.equal(trn3_codes[inside], ocp_codes[inside] + 1)
    largest = lambda q: q.codes.float().abs().amax(-1)  # noqa: E731
    assert (largest(trn3) < 448).all()  # trn3 headroom: the top value rounds without clamping
    assert (largest(ocp) == 448).any()  # ocp clamps blocks whose amax/2**shared exceeds 448


def test_rceil_never_saturates_and_its_scale_is_the_smallest_that_does_not():
    x = _random(8)
    q = quantize(x, "mxfp8_e5m2", scale_rule="rceil")
    blocks = x.reshape(x.shape[0], -1, 32).abs().amax(-1)
    scale = q.scales.float()
    assert (blocks / scale <= 57344).all() and (blocks / (scale / 2) > 57344).all()


def _numpy_mxint8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OCP v1.0 sample algorithm in float64 numpy, for INT8 elements (emax 0, value = code / 64)."""
    blocks = x.astype(np.float64).reshape(x.shape[0], -1, 32)
    amax = np.abs(blocks).max(-1)
    with np.errstate(divide="ignore"):
        shared = np.clip(np.floor(np.log2(np.where(amax > 0, amax, 2.0**-200))), -127, 127)
    scaled = blocks / np.exp2(shared)[..., None] * 64
    codes = np.clip(np.round(scaled), -127, 127)  # numpy rounds half to even
    return (shared + 127).astype(np.uint8), codes.reshape(x.shape).astype(np.int8)


def test_mxint8_equals_the_sample_algorithm():
    for x in (_random(9), _edge_cases()):
        x = x[:, :256] if x.shape[-1] > 256 else x
        x = x.clamp(-1e30, 1e30)
        q = quantize(x, "mxint8")
        scales, codes = _numpy_mxint8(x.numpy())
        assert np.array_equal(q.scales.view(torch.uint8).numpy(), scales)
        assert np.array_equal(q.codes.numpy(), codes)


# -- plain formats ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float16"])
def test_plain_nearest_is_torchs_cast(fmt):
    dtype = getattr(torch, fmt)
    for x in (_random(10, (4, 64)), _random(11, (4, 64)).bfloat16()):
        q = quantize(x, fmt)
        assert q.codes.dtype == dtype and torch.equal(q.codes.view(torch.uint8), x.to(dtype).view(torch.uint8))
        assert q.dequantize().dtype == x.dtype


def test_fp8_tensor_scaling_is_transformer_engines():
    x = _random(12, (8, 64)).clamp(-1e4, 1e4)
    q = quantize(x, "float8_e4m3fn", scale_rule="tensor")
    scale = 448.0 / x.abs().amax()
    assert torch.equal(q.codes.view(torch.uint8), (x * scale).to(torch.float8_e4m3fn).view(torch.uint8))
    assert torch.equal(q.tensor_scale, scale.reciprocal())
    delayed = quantize(x, "float8_e5m2", scale_rule="tensor", amax=torch.tensor(2e3))  # a stale, too small amax
    scaled = x * (57344.0 / torch.tensor(2e3))
    assert torch.equal(delayed.codes.view(torch.uint8), scaled.clamp(-57344, 57344).to(torch.float8_e5m2).view(torch.uint8))
    assert (scaled.abs() > 61440).any() and torch.isfinite(delayed.dequantize()).all()  # saturated, not inf
    assert torch.isinf(quantize(x * 1e3, "float8_e5m2").dequantize()).any()  # the unscaled cast is torch's


# -- stochastic rounding through quantize ---------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4_e2m1", "nvfp4", "bfloat16", "float8_e5m2"])
def test_stochastic_quantize_is_reproducible_unbiased_and_between_neighbours(fmt):
    x = _random(13, (4, 64)).clamp(-1e4, 1e4)
    draws = [quantize(x, fmt, rounding="stochastic", generator=torch.Generator().manual_seed(s)) for s in range(400)]
    again = quantize(x, fmt, rounding="stochastic", generator=torch.Generator().manual_seed(0))
    assert torch.equal(_bits(again.codes), _bits(draws[0].codes))
    nearest = quantize(x, fmt)
    if nearest.scales is not None:  # scales are deterministic; only elements are drawn
        assert all(torch.equal(_bits(d.scales), _bits(nearest.scales)) for d in draws)
    values = torch.stack([d.dequantize().double() for d in draws])
    low, high = values.amin(0), values.amax(0)
    x64 = x.double()
    assert bool(((low <= x64) & (x64 <= high) | (low == high)).all())  # brackets x (or x saturates)
    assert bool(((values == low) | (values == high)).all())  # no third value ever occurs
    # mean within 5 standard errors (per-draw deviation <= (high - low) / 2) where x is in range
    inside = (low <= x64) & (x64 <= high)
    bound = 5 * (high - low) / 2 / len(draws) ** 0.5
    assert bool(((values.mean(0) - x64).abs() <= bound + 1e-30)[inside].all())


# -- layout, helpers, bad input ---------------------------------------------------------------------


def test_ragged_last_block_is_zero_padded():
    x = _random(14, (3, 40))
    q = quantize(x, "mxfp6_e2m3")
    padded = quantize(torch.nn.functional.pad(x, (0, 24)), "mxfp6_e2m3")
    assert q.scales.shape == (3, 2) and torch.equal(_bits(q.scales), _bits(padded.scales))
    assert torch.equal(q.codes, padded.codes[:, :40])
    assert torch.equal(q.dequantize(), padded.dequantize()[:, :40])


def test_three_dimensional_and_scalar_inputs():
    x = _random(15, (2, 3, 64))
    q = quantize(x, "mxfp8_e4m3")
    assert q.scales.shape == (2, 3, 2)
    assert torch.equal(q.dequantize(), quantize(x.reshape(6, 64), "mxfp8_e4m3").dequantize().reshape(2, 3, 64))
    s = quantize(torch.tensor(3.3), "mxfp4_e2m1")
    assert s.dequantize().shape == () and s.dequantize().item() == 3.0


def test_bits_per_element():
    x = torch.randn(4, 64)
    assert bits_per_element(quantize(x, "mxfp8_e4m3")) == 8.25
    assert bits_per_element(quantize(x, "mxfp4_e2m1")) == 4.25
    assert bits_per_element(quantize(x, "nvfp4")) == 4.5 + 32 / 256


def test_quantize_on_a_hybrid_slot_equals_the_cpu():
    import interop  # noqa: F401  (registers the device)

    x = _random(16, (4, 64))
    for fmt in ("mxfp8_e4m3", "nvfp4", "bfloat16"):
        here, there = quantize(x, fmt), quantize(x.to("hybrid:0"), fmt)
        assert there.codes.device.type == "hybrid"
        assert torch.equal(_bits(here.codes), _bits(there.codes.cpu()))
        assert torch.equal(here.dequantize(), there.dequantize().cpu())


def test_bad_input_names_the_argument_and_lists_what_is_accepted():
    x = torch.randn(4, 32)
    with pytest.raises(ValueError, match=r"fmt: unknown format 'mxfp3'; supported formats: bfloat16, .*nvfp4"):
        quantize(x, "mxfp3")
    with pytest.raises(ValueError, match=r"block: mxfp8_e4m3 does not allow block=16; supported: 32"):
        quantize(x, "mxfp8_e4m3", block=16)
    with pytest.raises(ValueError, match=r"block: nvfp4 does not allow block=32; supported: 16"):
        quantize(x, "nvfp4", block=32)
    with pytest.raises(ValueError, match=r"block: float8_e4m3fn does not allow block=32; supported: None"):
        quantize(x, "float8_e4m3fn", block=32)
    with pytest.raises(ValueError, match=r"scale_rule: mxfp4_e2m1 does not take scale_rule='tensor'; supported: 'ocp', 'trn3', 'rceil'"):
        quantize(x, "mxfp4_e2m1", scale_rule="tensor")
    with pytest.raises(ValueError, match=r"scale_rule='floor' \(unknown rule; rules: ocp, trn3"):
        quantize(x, "mxfp8_e5m2", scale_rule="floor")
    with pytest.raises(ValueError, match=r"rounding: unknown mode 'down'; accepted: nearest, stochastic"):
        quantize(x, "nvfp4", rounding="down")
    with pytest.raises(ValueError, match=r"x: cannot quantize dtype torch.int32; accepted: torch.float32"):
        quantize(x.int(), "mxint8")
    with pytest.raises(ValueError, match=r"amax: only the per-tensor scale rules"):
        quantize(x, "mxfp8_e4m3", amax=1.0)
    with pytest.raises(ValueError, match=r"packed: only FP4 formats"):
        quantize(x, "mxfp8_e4m3").packed()
    assert set(FORMATS) == {"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "mxfp8_e4m3", "mxfp8_e5m2",
                            "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "mxint8", "nvfp4"}
