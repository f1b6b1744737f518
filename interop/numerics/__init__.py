"""Numerics of the real chips: low-precision formats, rounding, and a slot's numerics mode.

- :func:`quantize` turns a tensor into a :class:`QuantizedTensor` (codes + scales) in
  one of :data:`FORMATS`: torch's plain dtypes (``"bfloat16"``, ``"float16"``,
  ``"float8_e4m3fn"``, ``"float8_e5m2"``), the OCP MX v1.0 block formats
  (``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp6_e3m2"``, ``"mxfp6_e2m3"``,
  ``"mxfp4_e2m1"``, ``"mxint8"``) and NVIDIA's ``"nvfp4"``; with round-to-nearest-even
  or stochastic rounding from a seeded generator, and the scale rule as a
  parameter (:data:`SCALE_RULES`).
- :data:`ELEMENTS`: the element formats as code (bit layouts, encode/decode).
"""

from __future__ import annotations

from interop.numerics.elements import ELEMENTS, ROUNDINGS, ElementFormat
from interop.numerics.formats import FORMATS, SCALE_RULES, Format, format_named
from interop.numerics.quantize import INPUT_DTYPES, QuantizedTensor, bits_per_element, quantize

__all__ = [
    "ELEMENTS", "FORMATS", "INPUT_DTYPES", "ROUNDINGS", "SCALE_RULES", "ElementFormat", "Format", "QuantizedTensor",
    "bits_per_element", "format_named", "quantize",
]
