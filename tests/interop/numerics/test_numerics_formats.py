"""Element formats, tested to the bit: every code round-trips; encoding equals torch's
own casts (FP8, BF16, FP16) and torchao's sub-byte casts on a sweep that hits every
code, every rounding midpoint and its float32 neighbours, overflow thresholds,
specials and random bit patterns."""

from __future__ import annotations

import pytest
import torch

from interop.numerics import ELEMENTS
from interop.numerics.maths.elements import E8M0_NAN, e8m0_reciprocals, e8m0_values

FLOAT_ELEMENTS = ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "bf16", "fp16"]
TORCH_BACKED = ["e4m3", "e5m2", "bf16", "fp16"]
SUB_BYTE = {"e3m2": (3, 2), "e2m3": (2, 3), "e2m1": (2, 1)}


def _all_codes(fmt) -> torch.Tensor:
    return torch.arange(1 << fmt.bits, dtype=torch.int32)


def _torch_decode(fmt, codes: torch.Tensor) -> torch.Tensor:
    width = torch.uint8 if fmt.bits == 8 else torch.int16
    return codes.to(width).view(fmt.torch_dtype).float()


def _torchao_floatx():
    kernels = pytest.importorskip("torchao.prototype.custom_fp_utils",
                                  reason="torchao 0.18 (requirements-dev.txt) is the sub-byte reference")
    return kernels


@pytest.mark.parametrize("name", FLOAT_ELEMENTS + ["int8"])
def test_every_code_round_trips(name):
    fmt = ELEMENTS[name]
    codes = _all_codes(fmt)
    values = fmt.decode(codes)
    again = fmt.encode(values)
    if fmt.integer:
        # 0x80 (-2.0) is a valid INT8 code, but quantization clamps symmetrically to +-127/64
        # (OCP's sample algorithm clamps to the largest normal; microxcaling does the same).
        assert values[0x80] == -2.0 and again[0x80] == -127
        codes, values, again = codes[codes != 0x80], values[codes != 0x80], again[codes != 0x80]
    nan = torch.isnan(values)
    assert torch.equal(again[~nan] & ((1 << fmt.bits) - 1), codes[~nan] & ((1 << fmt.bits) - 1))
    if nan.any():  # NaN codes come back as the canonical NaN, sign kept
        assert torch.isnan(fmt.decode(again[nan])).all()
        assert torch.equal((again[nan] & fmt.sign_bit) != 0, (codes[nan] & fmt.sign_bit) != 0)
    if not fmt.integer:  # both zeros keep their sign
        assert fmt.encode(torch.tensor([0.0, -0.0])).tolist() == [0, fmt.sign_bit]


@pytest.mark.parametrize("name", TORCH_BACKED)
def test_decode_table_is_torchs(name):
    fmt = ELEMENTS[name]
    codes = _all_codes(fmt)
    ours, theirs = fmt.decode_table(), _torch_decode(fmt, codes)
    both_nan = torch.isnan(ours) & torch.isnan(theirs)
    assert torch.equal(ours[~both_nan], theirs[~both_nan])
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))


@pytest.mark.parametrize("name", list(SUB_BYTE))
def test_sub_byte_decode_table_is_torchaos(name):
    kernels = _torchao_floatx()
    fmt = ELEMENTS[name]
    ebits, mbits = SUB_BYTE[name]
    reference = kernels._floatx_unpacked_to_f32(_all_codes(fmt).to(torch.uint8), ebits, mbits)
    assert torch.equal(fmt.decode_table(), reference)


def test_published_values():
    # OCP MX v1.0 tables: E2M1 magnitudes, E3M2/E2M3 maxima and smallest subnormals; OFP8 maxima.
    assert ELEMENTS["e2m1"].decode_table()[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    expected = {"e4m3": (448, 2**-9, 8), "e5m2": (57344, 2**-16, 15), "e3m2": (28, 0.0625, 4),
                "e2m3": (7.5, 0.125, 2), "e2m1": (6, 0.5, 2), "int8": (127 / 64, 1 / 64, 0)}
    for name, (largest, tiny, emax) in expected.items():
        fmt = ELEMENTS[name]
        assert (fmt.max_value, fmt.smallest_subnormal, fmt.emax) == (largest, tiny, emax), name


def test_e8m0_every_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    reference = codes.view(torch.float8_e8m0fnu).float()
    ours = e8m0_values(codes)
    assert torch.equal(ours[:255], reference[:255])
    assert torch.isnan(ours[E8M0_NAN]) and torch.isnan(reference[E8M0_NAN])
    assert torch.equal(ours[:255] * e8m0_reciprocals(codes)[:255], torch.ones(255))


def _sweep(fmt, seed: int = 0) -> torch.Tensor:
    """Every finite code value, every midpoint between neighbours and the float32 values
    either side of it, the overflow threshold region, specials, random float32 bits."""
    table = fmt.decode_table()
    finite = table[torch.isfinite(table)]
    positive = torch.unique(finite[finite >= 0])
    mids = (positive[1:] + positive[:-1]) / 2
    gap = positive[-1] - positive[-2]
    beyond = torch.tensor([positive[-1] + gap / 2, positive[-1] + gap, positive[-1] * 4, 3.0e38])
    around = torch.cat([positive, mids, beyond])
    up, down = torch.nextafter(around, torch.tensor(float("inf"))), torch.nextafter(around, torch.tensor(0.0))
    tiny = torch.tensor([1e-45, 1e-40, 2.0**-126, 2.0**-127 * 3, float("inf")])
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randint(-2**31, 2**31 - 1, (200_000,), generator=gen, dtype=torch.int64).to(torch.int32)
    values = torch.cat([around, up, down, tiny])
    return torch.cat([values, -values, noise.view(torch.float32), torch.tensor([float("nan"), -float("nan")])])


@pytest.mark.parametrize("name", TORCH_BACKED)
def test_encode_equals_torch_cast(name):
    fmt = ELEMENTS[name]
    values = _sweep(fmt)
    ours = fmt.decode(fmt.encode(values))
    theirs = values.to(fmt.torch_dtype).float()
    nan = torch.isnan(theirs)
    assert torch.equal(torch.isnan(ours), nan)
    assert torch.equal(ours[~nan].view(torch.int32), theirs[~nan].view(torch.int32))  # -0.0 too


@pytest.mark.parametrize("name", list(SUB_BYTE))
def test_sub_byte_encode_equals_torchao(name):
    kernels = _torchao_floatx()
    fmt = ELEMENTS[name]
    ebits, mbits = SUB_BYTE[name]
    values = _sweep(fmt)
    values = values[~torch.isnan(values)]  # torchao's cast has no NaN handling
    ours = fmt.encode(values).to(torch.uint8)
    assert torch.equal(ours, kernels._f32_to_floatx_unpacked(values.clone(), ebits, mbits))


def test_int8_encode_is_the_mx_int8_rule():
    fmt = ELEMENTS["int8"]
    values = torch.tensor([0.0, -0.0, 1 / 128, 3 / 128, -3 / 128, 1.984375, 1.99, 2.0, -2.0, -5.0, 127.5 / 64,
                           float("inf"), float("nan")])
    # code = round_half_even(v * 64), clamped to +-127 (microsoft/microxcaling's symmetric INT8); NaN -> 0.
    assert fmt.encode(values).tolist() == [0, 0, 0, 2, -2, 127, 127, 127, -127, -127, 127, 127, 0]


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1", "bf16"])
def test_stochastic_rounding_stays_between_neighbours(name):
    fmt = ELEMENTS[name]
    table = fmt.decode_table()
    grid = torch.unique(table[torch.isfinite(table)])
    gen = torch.Generator().manual_seed(1)
    low, high = (-fmt.max_value, fmt.max_value) if fmt.bits <= 8 else (-1e4, 1e4)
    values = torch.rand(50_000, generator=gen) * (high - low) + low
    out = fmt.decode(fmt.encode(values, rounding="stochastic", generator=gen))
    below = grid[torch.searchsorted(grid, values, right=True) - 1]
    above = grid[torch.clamp_max(torch.searchsorted(grid, values), grid.numel() - 1)]
    assert bool(((out == below) | (out == above)).all())


@pytest.mark.parametrize("name", ["e4m3", "e2m1", "bf16", "int8"])
def test_stochastic_rounding_is_unbiased(name):
    fmt = ELEMENTS[name]
    draws = 20_000
    gen = torch.Generator().manual_seed(2)
    table = fmt.decode_table()
    grid = torch.unique(table[torch.isfinite(table)])
    lo, hi = grid[grid.numel() // 2 + 3], grid[grid.numel() // 2 + 4]
    for fraction in (0.125, 0.5, 0.7, 0.96875):
        x = float(lo + (hi - lo) * fraction)
        mean = fmt.decode(fmt.encode(torch.full((draws,), x), rounding="stochastic", generator=gen)).double().mean()
        # Each draw is lo or hi with P(hi) = fraction: standard deviation <= (hi - lo) / 2 per draw.
        bound = 5 * float(hi - lo) / 2 / draws ** 0.5
        assert abs(float(mean) - x) <= bound, (name, fraction, float(mean), x, bound)


def test_stochastic_rounding_reproducible_for_a_seed():
    fmt = ELEMENTS["bf16"]
    values = torch.randn(4096, generator=torch.Generator().manual_seed(3))
    a = fmt.encode(values, rounding="stochastic", generator=torch.Generator().manual_seed(7))
    b = fmt.encode(values, rounding="stochastic", generator=torch.Generator().manual_seed(7))
    c = fmt.encode(values, rounding="stochastic", generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_unknown_rounding_is_refused():
    with pytest.raises(ValueError, match="rounding: unknown mode 'up'; accepted: nearest, stochastic"):
        ELEMENTS["e4m3"].encode(torch.zeros(2), rounding="up")
