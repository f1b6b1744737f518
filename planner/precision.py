"""Training precisions: what ``precision="fp8"`` means to the planner, in one table.

A precision is a recipe, not a dtype: ``"fp8"`` trains with FP8 matmuls (a scaling pass and a cast of
each input, as Transformer Engine's current scaling does) and everything else in BF16. :data:`PRECISIONS`
says, per recipe, which catalogue peak MFU is measured against (:meth:`devices.Chip.peak_for` keys) and
which dtype block pricing casts matmul inputs to; :func:`check_precision` is the one check, and
:func:`precision_argument` the one place the deprecated ``dtype=`` spelling is accepted.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Precision:
    """One training precision recipe."""

    name: str
    """What callers pass (``precision="fp8"``)."""
    peak: str
    """The catalogue's peak key MFU divides by (:meth:`devices.Chip.peak_for`)."""
    matmul_dtype: str | None
    """The dtype matmul inputs are cast to before the matmul (None: matmuls run in the traced dtype)."""
    description: str


PEAKS: dict[str, str] = {"bfloat16": "bfloat16", "fp8": "float8", "fp4": "float4", "float32": "float32"}
"""Every precision the planner names (training and serving) -> the catalogue peak key its matmuls run at
(:meth:`devices.Chip.peak_for`). Training accepts the recipes of :data:`PRECISIONS`; serving
(:mod:`planner.serving.precision`) all of these, where the kind's stack computes them."""


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("bfloat16", PEAKS["bfloat16"], None, "BF16 everywhere"),
    Precision("fp8", PEAKS["fp8"], "float8_e4m3fn",
              "FP8 matmuls (an amax pass and a cast of each input), attention and the rest in BF16"),
    Precision("float32", PEAKS["float32"], None,
              "FP32 everywhere: parameters, gradients and optimizer state, no master copy (a float32 model)"),
)}
"""Accepted training precisions, by name."""


def check_precision(value: object, name: str = "precision") -> Precision:
    """The :class:`Precision` called ``value``; ValueError naming the argument and listing the accepted ones."""
    found = PRECISIONS.get(value) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{name}: unknown training precision {value!r}; accepted: {', '.join(PRECISIONS)}")
    return found


def precision_argument(precision: str | None, dtype: str | None, default: str = "bfloat16") -> str:
    """``precision``, or the deprecated ``dtype=`` spelling of it (a FutureWarning); both given must agree."""
    if dtype is not None:
        warnings.warn("dtype= is deprecated: it names a training precision recipe, not a dtype; pass "
                      f"precision={dtype!r}", FutureWarning, stacklevel=3)
        if precision is not None and precision != dtype:
            raise ValueError(f"precision: {precision!r} and the deprecated dtype={dtype!r} disagree; pass precision "
                             "only")
        check_precision(dtype, "dtype")  # the argument the caller passed is the one the error names
        return dtype
    precision = default if precision is None else precision
    check_precision(precision)
    return precision


__all__ = ["PEAKS", "PRECISIONS", "Precision", "check_precision", "precision_argument"]
