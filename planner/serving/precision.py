"""Serving precisions: what ``precision="bfloat16" | "fp8" | "fp4"`` means for weights, GEMMs and the KV cache.

The one table of this package mapping a precision name to the catalogue's peak key
(:data:`PRECISIONS`); :func:`resolve` checks it against a chip kind's capability table
(``devices.capabilities``) and refuses a kind whose stack lacks it, naming what the kind
accepts.

* ``bfloat16``: BF16 weights, activations, GEMMs and KV cache (the Neuron rows: BF16
  matmuls, bf16 weights).
* ``fp8``: FP8 weights and activations in the GEMMs (per-tensor scales) and an FP8 KV
  cache, as the Hopper rows (ModelOpt FP8 checkpoints; MLPerf also FP8 KV). Accepted
  where the kind computes an FP8 matmul natively (E4M3 or E5M2).
* ``fp4``: 4-bit block-scaled weights and activations: NVFP4 (16-element blocks, an E4M3
  scale each: 4.5 bits per element) where the kind has it, else MXFP4 (32-element blocks,
  an E8M0 scale: 4.25 bits), with an FP8 KV cache (the Blackwell NVFP4 rows). Refused
  where the kind has neither block format.

* ``float32``: everything in FP32, as small models run for real on the CPU-emulated rack
  (``interop.serve``); the kind's FP32 rate.

Attention runs in the KV cache's dtype; everything outside GEMMs and attention in BF16.
"""

from __future__ import annotations

from dataclasses import dataclass

import devices
from planner.precision import PEAKS


@dataclass(frozen=True, slots=True)
class Precision:
    """A serving precision as one chip kind runs it (see the module doc)."""

    name: str
    """``bfloat16``, ``fp8``, ``fp4`` or ``float32``."""
    gemm_dtype: str
    """The torch dtype the cost model prices GEMMs in (its peak key follows from it)."""
    peak_key: str
    """The catalogue peak (``Chip.peak``) the GEMMs run at: ``bfloat16``, ``float8`` or ``float4``."""
    weight_bytes: float
    """Bytes per weight (and GEMM activation) element, block scales included."""
    kv_dtype: str
    """The KV cache's torch dtype (attention is priced in it)."""
    kv_bytes: int
    """Bytes per KV cache element."""
    block_format: str = ""
    """``nvfp4`` or ``mxfp4_e2m1`` for fp4, else empty."""

    activation_bytes: int = 2
    """Bytes per element of the activations between layers (BF16)."""


PRECISIONS: dict[str, str] = PEAKS
"""Serving precision -> the catalogue peak key its GEMMs run at (:data:`planner.precision.PEAKS`)."""

_FP4_FORMATS = (("nvfp4", 4 + 8 / 16), ("mxfp4_e2m1", 4 + 8 / 32))


def accepted(kind: str) -> list[str]:
    """The serving precisions ``kind``'s stack computes in."""
    return [name for name in PRECISIONS if _resolve(name, kind) is not None]


def _resolve(precision: str, kind: str) -> Precision | None:
    chip = devices.chip(kind)
    caps = devices.capabilities(chip.kind)
    if precision == "bfloat16":
        return Precision("bfloat16", "bfloat16", "bfloat16", 2.0, "bfloat16", 2)
    if precision == "float32":
        return Precision("float32", "float32", "float32", 4.0, "float32", 4, activation_bytes=4)
    if precision == "fp8":
        for dtype in ("float8_e4m3fn", "float8_e5m2"):
            if any(caps.support(cls, dtype).native for cls in ("scaled_matmul", "matmul")):
                return Precision("fp8", dtype, PRECISIONS["fp8"], 1.0, dtype, 1)
        return None
    for fmt, bits in _FP4_FORMATS:
        if caps.block_format(fmt) is not None and "float4" in chip.peak:
            return Precision("fp4", "float4_e2m1fn_x2", PRECISIONS["fp4"], bits / 8, "float8_e4m3fn", 1, fmt)
    return None


def resolve(precision: str, kind: str) -> Precision:
    """``precision`` as ``kind`` runs it; ValueError naming the precisions the kind accepts when it lacks it."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: unknown {precision!r}; accepted: {', '.join(PRECISIONS)}")
    found = _resolve(precision, kind)
    if found is not None:
        return found
    kind = devices.chip(kind).kind
    why = ("no native FP8 matmul in its capability table" if precision == "fp8"
           else "neither NVFP4 nor MXFP4 in its capability table (no FP4 path)")
    raise ValueError(f"precision: {kind} has {why}; accepted on {kind}: {', '.join(accepted(kind))}")


__all__ = ["PRECISIONS", "Precision", "accepted", "resolve"]
