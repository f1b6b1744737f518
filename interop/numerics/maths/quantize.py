"""``quantize(x, fmt, ...)`` and the :class:`QuantizedTensor` it returns (codes + scales)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from interop.numerics.maths import scales as scaling
from interop.numerics.maths.elements import ROUNDINGS, e8m0_reciprocals, e8m0_values
from interop.numerics.maths.formats import Format, format_named, resolve

_DEVICE_SCALE_RULES: list = []
"""Callables ``(x, fmt) -> scale rule or None``: who says ``x``'s slot rounds block format ``fmt`` its own way
(a slot in device numerics mode, :mod:`interop.numerics.slots.settings`). The format maths asks them through
this hook and imports no slot state."""


def register_device_scale_rule(rule_of) -> None:
    """Let ``rule_of(x, fmt)`` choose the scale rule of :func:`quantize` called with ``scale_rule=None``."""
    if rule_of not in _DEVICE_SCALE_RULES:
        _DEVICE_SCALE_RULES.append(rule_of)

INPUT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
"""Dtypes :func:`quantize` takes (each converts to float32 exactly before rounding)."""


@dataclass(frozen=True, slots=True, eq=False)
class QuantizedTensor:
    """A tensor in a low-precision format: element codes plus the scales that go with them.

    ``codes`` has the input's shape, one code per element: in the format's torch
    dtype where torch has one (``float8_e4m3fn``, ``float8_e5m2``, ``bfloat16``,
    ``float16``), int8 for MX INT8, and uint8 holding the code in its low bits for
    FP6/FP4 (:meth:`packed` gives torch's ``float4_e2m1fn_x2`` layout). Block
    formats have one scale per block of ``block`` elements along the last
    dimension (a short last block is padded with zeros): ``scales`` of shape
    ``(*shape[:-1], ceil(shape[-1] / block))``, ``float8_e8m0fnu`` for MX and
    ``float8_e4m3fn`` for NVFP4.
    """

    codes: torch.Tensor
    """Element codes (see the class docstring for the container)."""
    scales: torch.Tensor | None
    """Per-block scales, or None for plain formats."""
    tensor_scale: torch.Tensor | None
    """float32 0-d factor applied on dequantization (NVFP4's tensor scale; FP8's 1/scale), or None."""
    format: Format
    """The format (its name is :attr:`fmt`)."""
    block: int | None
    """Elements per scale block, or None."""
    scale_rule: str | None
    """The rule the scales were computed with (see :data:`interop.numerics.SCALE_RULES`)."""
    rounding: str
    """``nearest`` or ``stochastic``."""
    dtype: torch.dtype
    """The input's dtype: what :meth:`dequantize` returns by default."""

    @property
    def fmt(self) -> str:
        return self.format.name

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The values the codes and scales stand for, in ``dtype`` (default: the input's dtype)."""
        dtype = self.dtype if dtype is None else dtype
        values = self.format.element.decode(self.codes)
        if self.scales is not None:
            per_block = (e8m0_values(self.scales) if self.format.family == "mx"
                         else self.tensor_scale * self.scales.to(torch.float32))
            blocks, width = _blocks(values, self.block)
            values = (blocks * per_block.reshape(blocks.shape[:-1]).unsqueeze(-1)).reshape(
                blocks.shape[0], blocks.shape[1] * self.block)
            values = values[:, :width].reshape(self.codes.shape)
        elif self.tensor_scale is not None:
            values = values * self.tensor_scale
        return values.to(dtype)

    def packed(self) -> torch.Tensor:
        """FP4 codes two to a byte as torch's ``float4_e2m1fn_x2`` (element 2i in the low nibble)."""
        if self.format.element.bits != 4:
            raise ValueError(f"packed: only FP4 formats pack two codes per byte; {self.fmt} has "
                             f"{self.format.element.bits}-bit codes")
        if self.codes.shape[-1] % 2:
            raise ValueError(f"packed: the last dimension ({self.codes.shape[-1]}) must be even")
        pairs = self.codes.reshape(*self.codes.shape[:-1], -1, 2)
        return (pairs[..., 0] | (pairs[..., 1] << 4)).contiguous().view(torch.float4_e2m1fn_x2)

    def __repr__(self) -> str:
        scales = "" if self.scales is None else f", scales={tuple(self.scales.shape)} {self.scales.dtype}"
        tensor = "" if self.tensor_scale is None else f", tensor_scale={float(self.tensor_scale):.6g}"
        return (f"QuantizedTensor({self.fmt}, shape={tuple(self.shape)}, block={self.block}, "
                f"scale_rule={self.scale_rule!r}, rounding={self.rounding!r}{scales}{tensor})")


def _blocks(values: torch.Tensor, block: int) -> tuple[torch.Tensor, int]:
    """``values`` as (rows, blocks, block) float32, zero-padded; and the unpadded width. Every size is
    explicit, so an empty tensor gives empty blocks (a ``-1`` cannot be inferred from zero elements)."""
    width = values.shape[-1] if values.dim() else 1
    rows = math.prod(values.shape[:-1]) if values.dim() else 1
    flat = values.reshape(rows, width)
    if width % block:
        flat = F.pad(flat, (0, block - width % block))
    return flat.view(rows, flat.shape[1] // block, block), width


def _check_amax(amax, device) -> torch.Tensor | None:
    """``amax`` as a float32 0-d tensor on ``device`` (None stays None); TypeError/ValueError naming it."""
    if amax is None:
        return None
    if isinstance(amax, torch.Tensor):
        if amax.numel() != 1:
            raise ValueError(f"amax: expected a number or a one-element tensor (the tensor's largest magnitude), "
                             f"got a tensor of shape {tuple(amax.shape)}")
        if amax.is_complex() or amax.dtype == torch.bool:
            raise TypeError(f"amax: expected a real number, got a {amax.dtype} tensor")
        value = amax.detach().reshape(()).to(device=device, dtype=torch.float32)
    elif isinstance(amax, (int, float)) and not isinstance(amax, bool):
        value = torch.tensor(float(amax), dtype=torch.float32, device=device)
    else:
        raise TypeError(f"amax: expected a number or a one-element tensor, got {type(amax).__name__}")
    checked = float(value)
    if not math.isfinite(checked) or checked < 0:
        raise ValueError(f"amax: expected a finite magnitude >= 0 (a delayed-scaling history holds finite "
                         f"amaxes), got {checked}")
    return value


def quantize(x: torch.Tensor, fmt: str, *, block: int | None = None, scale_rule: str | None = None,
             rounding: str = "nearest", generator: torch.Generator | None = None,
             amax: torch.Tensor | float | None = None) -> QuantizedTensor:
    """Quantize ``x`` to ``fmt``; returns a :class:`QuantizedTensor` (codes + scales).

    Args:
        x: a float32, bfloat16 or float16 tensor (CPU or a hybrid slot).
        fmt: a name in :data:`interop.numerics.FORMATS`: ``"bfloat16"``, ``"float16"``,
            ``"float8_e4m3fn"``, ``"float8_e5m2"``, ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``,
            ``"mxfp6_e3m2"``, ``"mxfp6_e2m3"``, ``"mxfp4_e2m1"``, ``"mxint8"``, ``"nvfp4"``.
        block: elements per scale block along the last dimension (MX: 32, NVFP4: 16; the default).
        scale_rule: how scales are computed: MX ``"ocp"`` (default), ``"trn3"``, ``"rceil"``;
            NVFP4 ``"nvfp4"``; FP8 ``None`` (a plain cast, default) or ``"tensor"`` (per-tensor
            scaling). See :data:`interop.numerics.SCALE_RULES`. None on a slot in ``device``
            numerics mode: the rule of the slot's kind (``trn3`` on Trainium3, ``rceil`` on Blackwell).
        rounding: ``"nearest"`` (ties to even) or ``"stochastic"``; applies to the elements
            (scales are always computed deterministically).
        generator: the torch.Generator stochastic rounding draws from (same device as ``x``);
            the same seed gives the same codes.
        amax: for the per-tensor rules (``"tensor"``, ``"nvfp4"``), the amax to scale by instead
            of ``x``'s own: delayed scaling from an amax history, or a calibrated value.

    ``nearest`` on a plain format is torch's own cast (``x.to(torch.float8_e4m3fn)``),
    bit for bit; MX and NVFP4 equal torchao 0.18's reference bit for bit on finite
    blocks whose scale is above 2**-127 (the differences, and why, are in
    tests/interop/numerics/test_numerics_formats.py).
    """
    spec = format_named(fmt)
    if scale_rule is None and spec.scaled_blocks and isinstance(x, torch.Tensor):
        for rule_of in _DEVICE_SCALE_RULES:
            scale_rule = rule_of(x, spec.name)
            if scale_rule is not None:
                break
    block, rule = resolve(spec, block, scale_rule)
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: unknown mode {rounding!r}; accepted: {', '.join(ROUNDINGS)}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise ValueError(f"x: cannot quantize dtype {x.dtype}; accepted: {', '.join(map(str, INPUT_DTYPES))}")
    if amax is not None and rule not in ("tensor", "nvfp4"):
        raise ValueError(f"amax: only the per-tensor scale rules ('tensor', 'nvfp4') take an amax; "
                         f"{spec.name} with scale_rule={rule!r} computes its scales per block")
    amax = _check_amax(amax, x.device)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator (on {x.device}) or None, got "
                        f"{type(generator).__name__}")
    if spec.family == "plain":
        return _plain(x, spec, rule, rounding, generator, amax)
    return _blockwise(x, spec, block, rule, rounding, generator, amax)


def _cast(values: torch.Tensor, spec: Format, rounding: str, generator, *, saturate: bool | None = None) -> torch.Tensor:
    element = spec.element
    if rounding == "nearest" and element.torch_dtype is not None and not saturate:
        return values.to(element.torch_dtype)
    return element.to_torch(element.encode(values, rounding=rounding, generator=generator, saturate=saturate))


def _plain(x, spec: Format, rule, rounding, generator, amax) -> QuantizedTensor:
    if rule is None:
        source = x if rounding == "nearest" else x.float()
        return QuantizedTensor(_cast(source, spec, rounding, generator), None, None, spec, None, None, rounding, x.dtype)
    values = x.float()
    tensor_amax = (values.abs().amax() if values.numel() else values.new_zeros(())) if amax is None else amax
    scale = spec.element.max_value / tensor_amax
    scale = torch.where(torch.isfinite(scale) & (tensor_amax > 0), scale, torch.ones_like(scale))
    # Scaled casts saturate (Transformer Engine's casts, cuda_fp8.h's __NV_SATFINITE): with a delayed amax
    # a value can land past the format's range, and becomes its largest value rather than infinity.
    limit = spec.element.max_value
    codes = _cast(torch.clamp(values * scale, -limit, limit), spec, rounding, generator)
    return QuantizedTensor(codes, None, scale.reciprocal(), spec, None, rule, rounding, x.dtype)


def _blockwise(x, spec: Format, block: int, rule: str, rounding, generator, amax) -> QuantizedTensor:
    shape = x.shape if x.dim() else torch.Size([1])
    blocks, width = _blocks(x.float().reshape(shape), block)
    block_max = scaling.block_amax(blocks)
    tensor_scale = None
    if spec.family == "mx":
        scale_codes = scaling.mx_scale_codes(block_max, spec.element, rule)
        multipliers = e8m0_reciprocals(scale_codes)
        bad = scale_codes == 0xFF
        scales = scale_codes.view(torch.float8_e8m0fnu)
    else:
        if amax is None:
            finite = torch.where(torch.isfinite(block_max), block_max, torch.zeros_like(block_max))
            amax = finite.amax() if finite.numel() else finite.new_zeros(())
        tensor_scale = scaling.nvfp4_tensor_scale(amax)
        scales = scaling.nvfp4_block_scales(block_max, tensor_scale)
        multipliers = scaling.nvfp4_reciprocals(scales, tensor_scale)
        bad = scales.view(torch.uint8) == 0x7F
    values = blocks * multipliers.unsqueeze(-1)
    if bool(bad.any()):  # NaN/Inf blocks: NaN scale, zero elements
        values = torch.where(bad.unsqueeze(-1), 0.0, values)
    limit = spec.element.max_value
    if rounding == "nearest" and spec.element.torch_dtype is not None:
        codes = values.clamp_(-limit, limit).to(spec.element.torch_dtype)
    else:
        codes = _cast(values, spec, rounding, generator, saturate=True)
    codes = codes.reshape(blocks.shape[0], blocks.shape[1] * block)[:, :width].reshape(x.shape)
    scales = scales.reshape(*shape[:-1], blocks.shape[1])
    return QuantizedTensor(codes, scales, tensor_scale, spec, block, rule, rounding, x.dtype)


def bits_per_element(q: QuantizedTensor) -> float:
    """Storage bits per element, scales included (MXFP8: 8.25, NVFP4: 4.5 plus the tensor scale)."""
    n = max(1, math.prod(q.shape))
    bits = q.format.element.bits * n
    if q.scales is not None:
        bits += 8 * q.scales.numel()
    if q.tensor_scale is not None:
        bits += 32
    return bits / n
