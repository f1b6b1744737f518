"""The dtype vocabulary of ``devices/``: torch's dtype names, their element sizes, and every spelling of them.

torch's own names are the canonical spelling everywhere in the catalogue and
the cost model (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``), so a name
printed by torch, written in a test or emitted by ``interop._C`` means the
same thing.  :func:`dtype_name` is the one normaliser: it takes a name, a
torch alias (``"half"``), a ``"torch."``-prefixed string or a ``torch.dtype``
(read through ``str()``, so torch is never imported here).  :func:`dtype_label`
names any dtype for a message (the canonical name, or torch's own spelling of
one the vocabulary leaves out).  No other module strips ``"torch."``
(tests/test_one_home.py checks it).
"""

from __future__ import annotations

from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

# Bytes per element as torch stores them.  float4_e2m1fn_x2 packs two FP4
# values in one byte, and torch counts that byte as one element.
ITEMSIZE: Mapping[str, int] = MappingProxyType({
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
})
"""Element size in bytes of every canonical dtype name (torch's spelling)."""

DTYPE_NAMES: tuple[str, ...] = tuple(ITEMSIZE)
"""The canonical dtype names, torch's spelling (``str(torch.bfloat16)`` without ``"torch."``)."""

ALIASES: Mapping[str, str] = MappingProxyType({
    "half": "float16", "float": "float32", "double": "float64", "long": "int64", "int": "int32",
    "short": "int16", "chalf": "complex32", "cfloat": "complex64", "cdouble": "complex128",
})
"""torch's alias attributes (``torch.half`` is ``torch.float16``) -> canonical name."""

INDEX_ITEMSIZE = 8
"""Bytes per element of an index tensor (int64, what torch's indexing ops take)."""


@lru_cache(maxsize=256)
def dtype_name(dtype: object) -> str:
    """Canonical torch dtype name of a name, an alias or a ``torch.dtype`` (``torch.half`` -> ``"float16"``).

    Raises ValueError naming the value and listing the accepted names for anything else.
    """
    name = str(dtype).strip()
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = ALIASES.get(name, name)
    if name not in ITEMSIZE:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; accepted: {', '.join(DTYPE_NAMES)} "
                         f"(or the aliases {', '.join(ALIASES)})")
    return name


def dtype_label(dtype: object) -> str:
    """A dtype's name for a message or a record: :func:`dtype_name`'s when the vocabulary has it, else the value's
    own text without ``"torch."`` (``torch.bits8`` -> ``"bits8"``), so that saying a dtype is unsupported never
    fails on the dtype itself."""
    try:
        return dtype_name(dtype)
    except ValueError:
        name = str(dtype).strip()
        return name[len("torch."):] if name.startswith("torch.") else name


def itemsize(dtype: object) -> int:
    """Bytes per element of a dtype, in any spelling :func:`dtype_name` accepts."""
    return ITEMSIZE[dtype if type(dtype) is str and dtype in ITEMSIZE else dtype_name(dtype)]


__all__ = ["ALIASES", "DTYPE_NAMES", "INDEX_ITEMSIZE", "ITEMSIZE", "dtype_label", "dtype_name", "itemsize"]
