"""Dtype names, element sizes and the peak-rate key each dtype is costed at.

The cost model takes a dtype either as a torch dtype name (``"bfloat16"``) or
as a ``torch.dtype``; it never imports torch to read one (``str(torch.bfloat16)``
is ``"torch.bfloat16"``).
"""

from __future__ import annotations

from functools import lru_cache

# Bytes per element as torch stores them.  float4_e2m1fn_x2 packs two FP4
# values in one byte, and torch counts that byte as one element.
ITEMSIZE: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
}
"""Element size in bytes of every dtype name the cost model accepts."""

_ALIASES = {
    "half": "float16", "float": "float32", "double": "float64", "long": "int64", "int": "int32",
    "short": "int16", "chalf": "complex32", "cfloat": "complex64", "cdouble": "complex128",
}

INDEX_ITEMSIZE = 8
"""Bytes per element of an index tensor (int64, what torch's indexing ops take)."""


@lru_cache(maxsize=256)
def dtype_name(dtype: object) -> str:
    """Canonical torch dtype name of a name or a ``torch.dtype`` (``torch.half`` -> ``"float16"``).

    Raises ValueError listing the accepted names for anything else.
    """
    name = str(dtype).strip()
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _ALIASES.get(name, name)
    if name not in ITEMSIZE:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; accepted: {', '.join(ITEMSIZE)}")
    return name


def itemsize(name: str) -> int:
    """Bytes per element of a canonical dtype name."""
    return ITEMSIZE[name]


def peak_key(name: str) -> str:
    """The catalogue peak key a dtype is costed at (``"float8_e4m3fn"`` -> ``"float8"``).

    Quantized types run on the integer path (int8); everything else is handed
    to :meth:`devices.chip.Chip.peak_for`, which owns the fallback rules.
    """
    if name.startswith("float8"):
        return "float8"
    if name.startswith("float4"):
        return "float4"
    if name.startswith(("qint", "quint")):
        return "int8"
    return name
