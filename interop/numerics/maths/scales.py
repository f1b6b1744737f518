"""Scale rules: from the largest magnitude of a block (or tensor) to its scale.

Every rule here is exact integer/bit arithmetic on float32 values except where
the rule itself is defined by a float32 division (RCEIL's ``amax / max``,
NVFP4's ``amax / 6 / tensor scale``), which is then done exactly as the
reference implementations do it, operation for operation.

Non-finite blocks: a block whose largest magnitude is NaN or infinite gets a NaN
scale (E8M0 0xFF, E4M3 0x7F) and zero elements, so it dequantizes to NaN. MX has
no infinity, and a saturated finite stand-in would hide an overflow (this is
microsoft/microxcaling's choice; torchao instead gives an Inf block a finite
scale, see tests/interop/numerics/test_numerics_formats.py).
"""

from __future__ import annotations

import torch

from interop.numerics.maths.elements import E4M3, E8M0_BIAS, E8M0_NAN, ElementFormat

_F32_INF_BITS = 0x7F800000
_E8M0_MIN, _E8M0_MAX = -E8M0_BIAS, E8M0_BIAS  # representable exponents; 0xFF is NaN

NVFP4_ELEMENT_MAX = 6.0
"""Largest E2M1 value."""
NVFP4_TENSOR_DIVISOR = 448.0 * NVFP4_ELEMENT_MAX
"""amax / this = the FP32 tensor scale, so the largest block scale reaches E4M3's 448."""
NVFP4_MIN_BLOCK_SCALE = 2.0 ** -6
"""Smallest normal E4M3 value: block scales are clamped to [2**-6, 448] before rounding (torchao's E4M3_EPS)."""


def block_amax(blocks: torch.Tensor) -> torch.Tensor:
    """Largest magnitude over the last dimension; NaN if the block holds a NaN.

    ``max(amax, -amin)`` reads the data twice but allocates nothing of its size
    (``abs().amax()`` writes a full copy first), which is faster on the CPU.
    """
    return torch.maximum(blocks.amax(-1), blocks.amin(-1).neg_())


def _magnitude_bits(values: torch.Tensor) -> torch.Tensor:
    return values.contiguous().view(torch.int32) & 0x7FFFFFFF


def mx_scale_codes(amax: torch.Tensor, element: ElementFormat, rule: str) -> torch.Tensor:
    """E8M0 codes (uint8) of the blocks whose float32 largest magnitudes are ``amax``.

    ``ocp``: floor(log2(amax)) - emax; ``trn3``: that + 1; ``rceil``:
    ceil(log2(amax / max)). A zero (or float32-subnormal) amax gives the smallest
    scale, 2**-127, as in the OCP sample code and torchao.
    """
    bits = _magnitude_bits(amax)
    if rule in ("ocp", "trn3"):
        # floor(log2) from the exponent field; float32 subnormals read as -127 and
        # clamp to E8M0's smallest scale like torchao's FLOOR mode.
        shared = (bits >> 23) - 127 - element.emax + (1 if rule == "trn3" else 0)
    elif rule == "rceil":
        descale = (amax / element.max_value).contiguous().view(torch.int32) & 0x7FFFFFFF
        field, mantissa = descale >> 23, descale & 0x7FFFFF
        normal = field - 127 + (mantissa != 0).to(torch.int32)
        # A float32-subnormal descale lies in (2**-127, 2**-126) -> -126, else at most 2**-127 -> -127.
        subnormal = torch.where(mantissa > 0x400000, -126, -127).to(torch.int32)
        shared = torch.where(field > 0, normal, subnormal)
    else:
        raise ValueError(f"scale_rule: {rule!r} is not an MX scale rule; accepted: ocp, trn3, rceil")
    codes = torch.clamp(shared, _E8M0_MIN, _E8M0_MAX) + E8M0_BIAS
    codes = torch.where(bits < _F32_INF_BITS, codes, E8M0_NAN)
    return codes.to(torch.uint8)


def nvfp4_tensor_scale(amax: torch.Tensor) -> torch.Tensor:
    """The FP32 per-tensor scale ``amax / (448 * 6)`` (torchao's per_tensor_amax_to_scale).

    A zero or non-finite amax gives 1.0 (torchao's formula would divide by zero
    further on and return NaN everywhere).
    """
    scale = amax.to(torch.float32) / NVFP4_TENSOR_DIVISOR
    usable = torch.isfinite(scale) & (scale > 0)
    return torch.where(usable, scale, torch.ones_like(scale))


def nvfp4_block_scales(amax: torch.Tensor, tensor_scale: torch.Tensor) -> torch.Tensor:
    """E4M3 block scales (torch.float8_e4m3fn): ``clamp(amax / 6 / tensor_scale, 2**-6, 448)``
    rounded to nearest even; NaN (0x7F) for non-finite blocks."""
    scaled = (amax / NVFP4_ELEMENT_MAX) / tensor_scale
    codes = torch.clamp(scaled, min=NVFP4_MIN_BLOCK_SCALE, max=E4M3.max_value).to(torch.float8_e4m3fn)
    finite = _magnitude_bits(amax) < _F32_INF_BITS
    if bool(finite.all()):
        return codes
    nan = torch.full_like(codes.view(torch.uint8), E4M3.nan_code)
    return torch.where(finite, codes.view(torch.uint8), nan).view(torch.float8_e4m3fn)


def nvfp4_reciprocals(block_scales: torch.Tensor, tensor_scale: torch.Tensor) -> torch.Tensor:
    """What each block is multiplied by before its elements are rounded: ``(1 / tensor_scale) / block_scale``
    (torchao's order of operations, which matches its Triton kernel)."""
    return (1.0 / tensor_scale) / block_scales.to(torch.float32)
