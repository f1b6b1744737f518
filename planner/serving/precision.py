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

A mixed checkpoint adds to a name what it quantizes apart, ``"NAME[,experts=WEIGHTS[/ACTIVATIONS]][,kv=DTYPE]"``:

* ``experts=``: the routed experts' GEMMs (shared experts, attention, router, embedding and head stay in NAME).
  WEIGHTS is a precision above, or the 4-bit block format the checkpoint fixes, ``mxfp4`` (4.25 bits) or
  ``nvfp4`` (4.5 bits), stored whatever the kind computes; ACTIVATIONS (default: the weights' precision) is a
  precision the kind computes in, and the MMA runs at its rate, the wider operand's: weights narrower than the
  activations are dequantized in the kernel (weight-only quantization: they stream at their own bits).
* ``kv=``: the KV cache's dtype as the engine or checkpoint sets it, ``bfloat16``, ``fp8`` or ``float32``
  (default: NAME's, above).

GPT-OSS (openai/gpt-oss-120b, -20b: MXFP4 experts, everything else BF16, no KV quantization) as TensorRT-LLM runs
it: on Hopper ``"bfloat16,experts=mxfp4/bfloat16"`` (its Triton MoE backend: MXFP4 weights, BF16 activations, the
MMA at the BF16 rate, "simulated mxfp4, HGMMA"; the KV cache BF16: Hopper has no FP8 KV cache for GPT-OSS), on
Blackwell ``"bfloat16,experts=mxfp4/fp8,kv=fp8"`` (CUTLASS with MXFP8 activations, the MMA at the FP8 rate,
"UTCQMMA"; an FP8 KV cache as the perf-overview's options set it). Sourced: NVIDIA/TensorRT-LLM
``examples/models/core/gpt_oss/README.md`` @ d513eeaf (MoE and KV cache support matrices). Assumed: an MMA mixing
4-bit weights with 8-bit activations runs at the FP8 peak (Blackwell's mixed-operand MMA, ``kind::f8f6f4``, runs at
the 8-bit rate), MXFP8's 8.25 bits are priced as FP8's 8, and the Triton kernel's in-register dequantization costs
no MMA time (it is hidden under the weight stream at decode and under the BF16 MMA at prefill). The experts' GEMMs
take the serving factors of their MMA's precision (:mod:`planner.serving.fitted`: the GPU family's GEMM factor for
BF16 and FP8, Blackwell's FP4 GEMM and MoE-layer factors only where both operands are FP4): assumed, no row fits it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    input_bytes: float | None = None
    """Bytes per element of a GEMM's input activations; None (given): :attr:`weight_bytes`, as the weights'.
    Larger only where the weights alone are quantized (MXFP4 weights, BF16 activations)."""
    experts: Precision | None = None
    """The routed experts' GEMMs where a checkpoint quantizes them apart (``experts=``); None: this precision."""

    def __post_init__(self) -> None:
        if self.input_bytes is None:
            object.__setattr__(self, "input_bytes", self.weight_bytes)

    @property
    def expert_gemms(self) -> Precision:
        """The precision the routed experts' GEMMs run in."""
        return self.experts or self

    def describe(self) -> str:
        """The precision for a report: its name (and FP4 block format); for a mixed checkpoint, what its experts
        run in and its KV cache."""
        out = self.name + (f" ({self.block_format})" if self.block_format else "")
        if self.experts is None:
            return out
        e = self.experts
        weights = f"{e.weight_bytes * 8:g}-bit" + (f" {e.block_format}" if e.block_format else "")
        return out + f", experts {weights} weights x {e.name} activations, KV cache {self.kv_dtype}"


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


def _named(precision: str, kind: str, argument: str) -> Precision:
    """The precision called ``precision`` on ``kind``; ValueError naming ``argument`` when unknown or refused."""
    if precision not in PRECISIONS:
        raise ValueError(f"{argument}: unknown {precision!r}; accepted: {', '.join(PRECISIONS)}")
    found = _resolve(precision, kind)
    if found is not None:
        return found
    kind = devices.chip(kind).kind
    why = ("no native FP8 matmul in its capability table" if precision == "fp8"
           else "neither NVFP4 nor MXFP4 in its capability table (no FP4 path)")
    raise ValueError(f"{argument}: {kind} has {why}; accepted on {kind}: {', '.join(accepted(kind))}")


_BLOCK_FORMATS = {"mxfp4": "mxfp4_e2m1", "nvfp4": "nvfp4"}
"""The 4-bit block formats a checkpoint may fix for its weights (``experts=mxfp4``), by name."""
_KV_DTYPES = ("bfloat16", "fp8", "float32")


def _experts(value: str, kind: str, argument: str) -> Precision:
    """The routed experts' precision ``WEIGHTS[/ACTIVATIONS]`` on ``kind`` (see the module doc)."""
    weights, _, activations = (v.strip() for v in value.partition("/"))
    fmt = _BLOCK_FORMATS.get(weights)
    if fmt is None and weights not in PRECISIONS:
        raise ValueError(f"{argument}: unknown expert weights {weights!r}; accepted: "
                         f"{', '.join([*PRECISIONS, *_BLOCK_FORMATS])}")
    mma = _named(activations or ("fp4" if fmt else weights), kind, f"{argument} activations")
    if fmt is None:
        stored = _named(weights, kind, f"{argument} weights")
        fmt, weight_bytes = stored.block_format, stored.weight_bytes
    else:
        weight_bytes = dict(_FP4_FORMATS)[fmt] / 8
        if mma.name == "fp4" and devices.capabilities(devices.chip(kind).kind).block_format(fmt) is None:
            raise ValueError(f"{argument}: {weights} weights with fp4 activations need {fmt} in "
                             f"{devices.chip(kind).kind}'s capability table; give wider activations "
                             f"({weights}/fp8 or {weights}/bfloat16: the kernel dequantizes the weights)")
        if mma.name == "fp4":
            mma = replace(mma, weight_bytes=weight_bytes, input_bytes=weight_bytes, block_format=fmt)
    if mma.input_bytes < weight_bytes:
        raise ValueError(f"{argument}: {mma.name} activations are narrower than {weights} weights; a GEMM runs at "
                         f"the wider operand's rate: give activations at least as wide as the weights")
    return replace(mma, weight_bytes=weight_bytes, input_bytes=mma.input_bytes, block_format=fmt)


def resolve(precision: str, kind: str) -> Precision:
    """``precision`` (a name, or a mixed checkpoint: the module doc) as ``kind`` runs it; ValueError naming the
    argument (and the precisions the kind accepts) when it is malformed or the kind lacks it."""
    if not isinstance(precision, str):
        raise ValueError(f"precision: expected a name ({', '.join(PRECISIONS)}), got {precision!r}")
    name, *parts = (p.strip() for p in precision.split(","))
    found = _named(name, kind, "precision")
    seen: set[str] = set()
    for part in parts:
        key, eq, value = (p.strip() for p in part.partition("="))
        if not eq or key not in ("experts", "kv") or key in seen or not value:
            raise ValueError(f"precision: {part!r} of {precision!r} is not experts=WEIGHTS[/ACTIVATIONS] or "
                             f"kv=DTYPE (each at most once)")
        seen.add(key)
        if key == "experts":
            found = replace(found, experts=_experts(value, kind, "precision experts="))
        else:
            if value not in _KV_DTYPES:
                raise ValueError(f"precision kv=: unknown KV cache dtype {value!r}; accepted: {', '.join(_KV_DTYPES)}")
            cache = _named(value, kind, "precision kv=")
            found = replace(found, kv_dtype=cache.kv_dtype, kv_bytes=cache.kv_bytes)
    return found


__all__ = ["PRECISIONS", "Precision", "accepted", "resolve"]
