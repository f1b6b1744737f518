"""Numerics of the real chips: low-precision formats, rounding, and a slot's numerics mode.

- :func:`quantize` turns a tensor into a :class:`QuantizedTensor` (codes + scales) in
  one of :data:`FORMATS`: torch's plain dtypes (``"bfloat16"``, ``"float16"``,
  ``"float8_e4m3fn"``, ``"float8_e5m2"``), the OCP MX v1.0 block formats
  (``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp6_e3m2"``, ``"mxfp6_e2m3"``,
  ``"mxfp4_e2m1"``, ``"mxint8"``) and NVIDIA's ``"nvfp4"``; with round-to-nearest-even
  or stochastic rounding from a seeded generator, and the scale rule as a
  parameter (:data:`SCALE_RULES`).
- :data:`ELEMENTS`: the element formats as code (bit layouts, encode/decode).
- A slot's numerics mode, ``exact`` (the default) or ``device``: :func:`set_numerics`,
  :func:`numerics`, per rack file with ``numerics = "device"`` (:mod:`interop.numerics.slots.mode`).
- :func:`scaled_matmul` and block-scaled ``torch._scaled_mm`` on slots
  (:mod:`interop.numerics.slots.scaled_mm`).

Three parts, one folder each: :mod:`.maths` (format maths: elements, formats, scales,
quantize; no slot), :mod:`.slots` (the device glue: modes, device ops, scaled matmul) and
:mod:`.drift` (an experiment: low-precision training recipes against float32).
"""

from __future__ import annotations

from interop.numerics.maths.elements import ELEMENTS, ROUNDINGS, ElementFormat
from interop.numerics.maths.formats import FORMATS, SCALE_RULES, Format, format_named
from interop.numerics.maths.quantize import INPUT_DTYPES, QuantizedTensor, bits_per_element, quantize
from interop.numerics.slots.mode import MODES, NumericsSettings, counters, numerics, set_numerics
from interop.numerics.slots.scaled_mm import scaled_matmul, swizzle, unswizzle
from interop.numerics.slots.settings import SlotNumerics

__all__ = [
    "ELEMENTS", "FORMATS", "INPUT_DTYPES", "MODES", "ROUNDINGS", "SCALE_RULES", "ElementFormat", "Format",
    "NumericsSettings", "QuantizedTensor", "SlotNumerics", "bits_per_element", "counters", "format_named",
    "numerics", "quantize", "scaled_matmul", "set_numerics", "swizzle", "unswizzle",
]
