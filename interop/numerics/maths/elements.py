"""Element formats as code: the bit layout of each low-precision number type, and
float32 <-> code conversion with round-to-nearest-even or stochastic rounding.

An :class:`ElementFormat` is a sign-exponent-mantissa layout (or MX's INT8).
:meth:`ElementFormat.encode` turns float32 values into integer codes (sign bit
included, one code per element, in an int32 tensor), :meth:`ElementFormat.decode`
turns codes back into float32. Both are vectorised torch code; every code of
every format round-trips (tests/interop/numerics/test_numerics_formats.py checks all of them).

Encoding works on the magnitude's exponent and a power-of-two quantum, so it is
exact in float32 arithmetic: with ``e = max(floor(log2|v|), emin)`` and
``q = 2**(e - mbits)``, ``|v| / q`` is exact and lies in ``[0, 2**(mbits+1))``;
rounding it to an integer ``n`` (half to even, or up with probability equal to
its fractional part) gives the magnitude code ``(e - emin) * 2**mbits + n``
(a carry into the next binade falls out of the same sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch

ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic")
"""Accepted rounding modes: ``nearest`` (to nearest, ties to even, as torch's casts)
and ``stochastic`` (up with probability equal to the distance from the value below,
in units of the gap between the two neighbours: unbiased)."""

OVERFLOWS: tuple[str, ...] = ("saturate", "inf")
"""What a magnitude past the largest finite value becomes: the largest finite value,
or infinity (IEEE-like formats, as torch's float8_e5m2, float16 and bfloat16 casts do)."""

_F32_EXP_MASK = 0x7F800000


@dataclass(frozen=True)
class ElementFormat:
    """One element number type: layout, special values, and overflow rule."""

    name: str
    """Short name (``e4m3``, ``e5m2``, ``e3m2``, ``e2m3``, ``e2m1``, ``int8``, ``bf16``, ``fp16``)."""
    ebits: int
    """Exponent bits (0 for ``int8``)."""
    mbits: int
    """Explicit mantissa bits (for ``int8``: the bits after the binary point, 6)."""
    bias: int
    """Exponent bias; the smallest normal exponent is ``1 - bias``."""
    max_code: int
    """Magnitude code (sign bit clear) of the largest finite value."""
    overflow: str
    """One of :data:`OVERFLOWS`."""
    inf_code: int | None = None
    """Magnitude code of infinity; None where the format has none."""
    nan_code: int | None = None
    """Canonical magnitude code of NaN (the sign bit is kept); None where the format has none."""
    torch_dtype: torch.dtype | None = None
    """The torch dtype whose bits are these codes, where torch has one."""
    integer: bool = False
    """True for MX's INT8: two's complement codes worth ``code * 2**-mbits``."""
    source: str = ""
    """Where the layout is defined."""

    def __post_init__(self) -> None:
        if self.overflow not in OVERFLOWS:
            raise ValueError(f"ElementFormat.overflow: unknown rule {self.overflow!r}; accepted: {', '.join(OVERFLOWS)}")
        if self.overflow == "inf" and self.inf_code is None:
            raise ValueError(f"ElementFormat {self.name}: overflow 'inf' needs an inf_code")

    # -- derived constants ------------------------------------------------------

    @property
    def bits(self) -> int:
        """Width of a code, sign included."""
        return 8 if self.integer else 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return 1 - self.bias

    @cached_property
    def max_value(self) -> float:
        """The largest finite value (448 for E4M3, 6 for E2M1, 127/64 for MX INT8)."""
        return float(self.decode_table()[self.max_code])

    @cached_property
    def emax(self) -> int:
        """Exponent of the largest power of two not above :attr:`max_value` (OCP's emax_elem)."""
        value, e = self.max_value, 0
        while 2.0 ** (e + 1) <= value:
            e += 1
        while 2.0 ** e > value:
            e -= 1
        return e

    @cached_property
    def overflow_ratio(self) -> float:
        """Magnitudes above ``max_value * overflow_ratio`` (the midpoint to the next step up) are past the
        format's range: rounding would not bring them back to :attr:`max_value`; they saturate or overflow."""
        table = self.decode_table()
        below = float(table[self.max_code - 1])
        return (self.max_value + (self.max_value - below) / 2) / self.max_value

    @cached_property
    def smallest_subnormal(self) -> float:
        return float(self.decode_table()[1])

    def code_value(self, code: int) -> float:
        """The exact value of one code (Python float; NaN/inf for special codes)."""
        if self.integer:
            signed = code - 256 if code >= 128 else code
            return signed / 2.0 ** self.mbits
        sign = -1.0 if code & self.sign_bit else 1.0
        mag = code & (self.sign_bit - 1)
        if self.nan_code is not None and self._is_nan_magnitude(mag):
            return math.copysign(float("nan"), sign)
        if self.inf_code is not None and mag == self.inf_code:
            return sign * float("inf")
        exp, mant = mag >> self.mbits, mag & ((1 << self.mbits) - 1)
        if exp == 0:
            return sign * mant * 2.0 ** (self.emin - self.mbits)
        return sign * (1 + mant / 2.0 ** self.mbits) * 2.0 ** (exp - self.bias)

    def _is_nan_magnitude(self, mag: int) -> bool:
        if self.inf_code is not None:  # IEEE-like: every code above infinity is a NaN
            return mag > self.inf_code
        return mag == self.nan_code

    def decode_table(self) -> torch.Tensor:
        """float32 value of every code, indexed by code (``2**bits`` entries)."""
        return _decode_table(self)

    # -- conversion ------------------------------------------------------------------

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """float32 values of integer ``codes`` (any integer dtype, or this format's torch dtype)."""
        if self.torch_dtype is not None and codes.dtype == self.torch_dtype:
            return codes.float()
        if self.integer:
            if codes.dtype != torch.int8:  # read the low byte as two's complement
                codes = ((codes.to(torch.int32) & 0xFF) ^ 0x80) - 0x80
            return codes.to(torch.float32) * (2.0 ** -self.mbits)
        mask = (1 << self.bits) - 1
        index = codes.to(torch.int64) & mask
        return self.decode_table().to(codes.device)[index]

    def encode(self, values: torch.Tensor, *, rounding: str = "nearest",
               generator: torch.Generator | None = None, saturate: bool | None = None) -> torch.Tensor:
        """int32 codes of float32 ``values`` (sign bit included).

        ``saturate`` overrides :attr:`overflow` (MX elements always saturate).
        NaN becomes the NaN code with the input's sign, or code 0 where the format
        has no NaN (E3M2, E2M3, E2M1: MX marks such a block NaN through its scale).
        """
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding: unknown mode {rounding!r}; accepted: {', '.join(ROUNDINGS)}")
        if values.dtype != torch.float32:
            values = values.to(torch.float32)
        if self.integer:
            return self._encode_integer(values, rounding, generator)
        saturating = self.overflow == "saturate" if saturate is None else saturate
        bits = values.contiguous().view(torch.int32)
        magnitude = bits & 0x7FFFFFFF
        draws = None if rounding == "nearest" else _draws(magnitude, generator)
        codes = self._encode_normal(magnitude, draws)
        # Below the smallest normal the quantum is one constant, 2**(emin - mbits). (With
        # float32's own exponent range, as bfloat16's, the integer path covers subnormals too.)
        subnormal = magnitude < ((self.emin + 127) << 23)
        if self.emin > -126 and bool(subnormal.any()):
            steps = magnitude.view(torch.float32) * 2.0 ** (self.mbits - self.emin)
            steps = _round(steps, draws)
            codes = torch.where(subnormal, steps.to(torch.int32), codes)
        if saturating:
            codes.clamp_(max=self.max_code)
        else:
            codes = torch.where(codes > self.max_code, self.inf_code, codes)
        sign = torch.bitwise_right_shift(bits, 32 - self.bits).bitwise_and_(self.sign_bit)
        if bool((magnitude > _F32_EXP_MASK).any()):  # NaN: the NaN code with its sign, or +0 without one
            is_nan = magnitude > _F32_EXP_MASK
            codes = torch.where(is_nan, 0 if self.nan_code is None else self.nan_code, codes)
            if self.nan_code is None:
                sign = torch.where(is_nan, 0, sign)
        return codes.bitwise_or_(sign)

    def _encode_normal(self, magnitude: torch.Tensor, draws: torch.Tensor | None) -> torch.Tensor:
        """Magnitude codes of values in (or above) the normal range, by integer rounding of the
        float32 bits: drop ``23 - mbits`` mantissa bits (a carry moves into the exponent), then
        rebias the exponent. Infinity lands above every finite code."""
        shift = 23 - self.mbits
        if draws is None:  # to nearest, ties to even
            odd = torch.bitwise_right_shift(magnitude, shift).bitwise_and_(1)
            rounded = odd.add_(magnitude).add_((1 << (shift - 1)) - 1)
        else:  # up with probability (dropped bits) / 2**shift, exactly
            rounded = torch.bitwise_right_shift(draws, self.mbits).add_(magnitude)
        return rounded.bitwise_right_shift_(shift).sub_((127 - self.bias) << self.mbits)

    def _encode_integer(self, values: torch.Tensor, rounding: str, generator) -> torch.Tensor:
        # MX INT8 (microxcaling's reading of OCP v1.0): symmetric, +-127 * 2**-6; NaN -> 0.
        scaled = torch.nan_to_num(values, nan=0.0) * 2.0 ** self.mbits
        magnitude = scaled.abs()
        magnitude = _round(magnitude, None if rounding == "nearest" else _draws(magnitude, generator))
        codes = torch.clamp_max(magnitude, self.max_code).to(torch.int32)
        return torch.where(scaled < 0, -codes, codes)

    def to_torch(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes in the container a user expects: this format's torch dtype, int8 for
        INT8, uint8 (low bits) for the sub-byte formats."""
        if self.integer:
            return codes.to(torch.int8)
        if self.torch_dtype is not None:
            width = {1: torch.uint8, 2: torch.int16}[self.torch_dtype.itemsize]
            return codes.to(width).view(self.torch_dtype)
        return codes.to(torch.uint8)


_DRAW_BITS = 23


def _draws(like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One uniform integer in [0, 2**23) per element (int32), from ``generator``."""
    return torch.randint(0, 1 << _DRAW_BITS, like.shape, generator=generator, device=like.device, dtype=torch.int32)


def _round(scaled: torch.Tensor, draws: torch.Tensor | None) -> torch.Tensor:
    """Integer-valued float32 of non-negative ``scaled``: half to even, or stochastic.

    Stochastic: ``floor(s) + (u < frac(s))`` with ``u = draw / 2**23``. ``frac`` is
    exact in float32, so the probability of rounding up is exactly ``frac`` whenever
    ``frac`` has at most 23 fraction bits; only values below 2**-23 of the format's
    smallest subnormal step round up with a probability off by at most 2**-23.
    """
    if draws is None:
        return torch.round(scaled)
    low = torch.floor(scaled)
    return low.add_(draws.to(torch.float32).mul_(2.0 ** -_DRAW_BITS).lt_(scaled - low))


_TABLES: dict[str, torch.Tensor] = {}


def _decode_table(fmt: ElementFormat) -> torch.Tensor:
    table = _TABLES.get(fmt.name)
    if table is None:
        table = _TABLES[fmt.name] = torch.tensor([fmt.code_value(c) for c in range(1 << fmt.bits)],
                                                 dtype=torch.float32)
    return table


_OCP_MX = "OCP Microscaling Formats (MX) v1.0, section 5.3 (element data types)"
_OFP8 = "OCP 8-bit Floating Point (OFP8) v1.0; torch.float8_e4m3fn / float8_e5m2"

E4M3 = ElementFormat("e4m3", 4, 3, 7, max_code=0x7E, overflow="saturate", nan_code=0x7F,
                     torch_dtype=torch.float8_e4m3fn, source=_OFP8 + " (torch's cast saturates, inf -> 448)")
E5M2 = ElementFormat("e5m2", 5, 2, 15, max_code=0x7B, overflow="inf", inf_code=0x7C, nan_code=0x7F,
                     torch_dtype=torch.float8_e5m2, source=_OFP8)
E3M2 = ElementFormat("e3m2", 3, 2, 3, max_code=0x1F, overflow="saturate", source=_OCP_MX + " (FP6 E3M2, no Inf/NaN)")
E2M3 = ElementFormat("e2m3", 2, 3, 1, max_code=0x1F, overflow="saturate", source=_OCP_MX + " (FP6 E2M3, no Inf/NaN)")
E2M1 = ElementFormat("e2m1", 2, 1, 1, max_code=0x7, overflow="saturate", source=_OCP_MX + " (FP4 E2M1, no Inf/NaN)")
INT8 = ElementFormat("int8", 0, 6, 0, max_code=127, overflow="saturate", integer=True,
                     source=_OCP_MX + " (INT8, implicit scale 2**-6; symmetric +-127 as microsoft/microxcaling)")
BF16 = ElementFormat("bf16", 8, 7, 127, max_code=0x7F7F, overflow="inf", inf_code=0x7F80, nan_code=0x7FC0,
                     torch_dtype=torch.bfloat16, source="bfloat16 (torch.bfloat16)")
FP16 = ElementFormat("fp16", 5, 10, 15, max_code=0x7BFF, overflow="inf", inf_code=0x7C00, nan_code=0x7E00,
                     torch_dtype=torch.float16, source="IEEE 754 binary16 (torch.float16)")

ELEMENTS: dict[str, ElementFormat] = {f.name: f for f in (E4M3, E5M2, E3M2, E2M3, E2M1, INT8, BF16, FP16)}
"""Every element format by short name."""

E8M0_BIAS = 127
E8M0_NAN = 0xFF
"""The E8M0 scale (OCP MX v1.0 section 5.4.1): code c is 2**(c - 127); 0xFF is NaN; no zero, no sign."""


def e8m0_values(codes: torch.Tensor) -> torch.Tensor:
    """float32 2**(code - 127) of E8M0 codes (uint8 or torch.float8_e8m0fnu); NaN for 0xFF."""
    return _E8M0_TABLE.to(codes.device)[codes.view(torch.uint8).to(torch.int64)]


def e8m0_reciprocals(codes: torch.Tensor) -> torch.Tensor:
    """float32 2**(127 - code): what a block is multiplied by before its elements are rounded."""
    return _E8M0_RECIPROCAL.to(codes.device)[codes.view(torch.uint8).to(torch.int64)]


_E8M0_TABLE = torch.tensor([2.0 ** (c - E8M0_BIAS) for c in range(255)] + [float("nan")], dtype=torch.float32)
_E8M0_RECIPROCAL = torch.tensor([2.0 ** (E8M0_BIAS - c) for c in range(255)] + [float("nan")], dtype=torch.float32)
