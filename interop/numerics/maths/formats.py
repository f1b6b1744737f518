"""The quantization formats :func:`interop.numerics.quantize` accepts, by name.

Plain formats carry torch's dtype names (``"bfloat16"``, ``"float16"``,
``"float8_e4m3fn"``, ``"float8_e5m2"``): an element-wise cast, optionally with
one float32 scale for the whole tensor (FP8 training's per-tensor scaling).
Block formats share one scale per block of elements along the last dimension:
the OCP MX v1.0 family (32 elements, an E8M0 power-of-two scale) and NVIDIA's
NVFP4 (16 E2M1 elements, an E4M3 scale, one FP32 scale per tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

from devices.dtypes import dtype_label
from interop.numerics.maths.elements import BF16, E2M1, E2M3, E3M2, E4M3, E5M2, FP16, INT8, ElementFormat

SCALE_RULES: dict[str, str] = {
    "ocp": "OCP MX v1.0 sample algorithm (section 6.3): shared exponent = floor(log2(amax)) - emax of the "
           "element type, clamped to E8M0's [-127, 127]; elements = v / 2**shared, rounded, clamped to the "
           "largest normal (torchao ScaleCalculationMode.FLOOR)",
    "trn3": "AWS Neuron nki.isa.quantize_mx (NeuronCore-v4): a block scale two times larger than the OCP sample "
            "algorithm's (shared exponent + 1), leaving headroom for rounding the largest values without "
            "saturation; OCP MX-compliant",
    "rceil": "cuBLAS 1D block quantization for MX (https://docs.nvidia.com/cuda/cublas/#d-block-quantization): "
             "scale = amax / max of the element type rounded up to a power of two (cvt.rp.satfinite.ue8m0; "
             "torchao ScaleCalculationMode.RCEIL)",
    "nvfp4": "NVFP4 two-level scaling (torchao nvfp4_quantize with a per-tensor scale): tensor scale = "
             "amax / (448 * 6) in FP32; block scale = block amax / 6 / tensor scale, rounded to E4M3; "
             "elements = v * ((1 / tensor scale) / block scale), rounded to E2M1",
    "tensor": "per-tensor FP8 scaling as Transformer Engine's recipes: scale = max of the format / amax "
              "(amax of the tensor itself: current scaling; a given amax: delayed scaling), elements = "
              "cast(v * scale) saturated to the format's largest value (TE / cuda_fp8.h satfinite; the unscaled "
              "cast, scale_rule=None, is torch's and overflows E5M2 to inf), dequantization multiplies by the "
              "float32 reciprocal 1 / scale",
}
"""Every ``scale_rule`` value and what it computes."""


@dataclass(frozen=True, slots=True)
class Format:
    """A quantization format: its element type and how (if at all) it is scaled."""

    name: str
    """The name :func:`quantize` takes (``"mxfp8_e4m3"``, ``"float8_e4m3fn"``...)."""
    element: ElementFormat
    """The element type."""
    family: str
    """``plain`` (element-wise, optionally one tensor scale), ``mx`` (OCP MX blocks), ``nvfp4``."""
    blocks: tuple[int | None, ...]
    """Accepted ``block`` values; the first is the default (None: no blocks)."""
    scale_rules: tuple[str | None, ...]
    """Accepted ``scale_rule`` values; the first is the default (None: unscaled)."""
    source: str
    """Where the format is defined."""

    @property
    def scaled_blocks(self) -> bool:
        return self.family in ("mx", "nvfp4")


_MX = "OCP Microscaling Formats (MX) v1.0 (https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf)"
_NVFP4 = ("NVIDIA Blackwell NVFP4 (https://docs.nvidia.com/cuda/cublas/#d-block-quantization; "
          "https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/)")
_MX_RULES = ("ocp", "trn3", "rceil")
_FP8_RULES = (None, "tensor")


def _mx(name: str, element: ElementFormat) -> Format:
    return Format(name, element, "mx", (32,), _MX_RULES, _MX)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("bfloat16", BF16, "plain", (None,), (None,), BF16.source),
    Format("float16", FP16, "plain", (None,), (None,), FP16.source),
    Format("float8_e4m3fn", E4M3, "plain", (None,), _FP8_RULES, E4M3.source),
    Format("float8_e5m2", E5M2, "plain", (None,), _FP8_RULES, E5M2.source),
    _mx("mxfp8_e4m3", E4M3),
    _mx("mxfp8_e5m2", E5M2),
    _mx("mxfp6_e3m2", E3M2),
    _mx("mxfp6_e2m3", E2M3),
    _mx("mxfp4_e2m1", E2M1),
    _mx("mxint8", INT8),
    Format("nvfp4", E2M1, "nvfp4", (16,), ("nvfp4",), _NVFP4),
)}
"""Every format :func:`interop.numerics.quantize` accepts, by name."""


def format_named(name: object) -> Format:
    """The format called ``name`` (a name above or a torch dtype); ValueError listing the accepted names."""
    found = FORMATS.get(dtype_label(name))
    if found is None:
        raise ValueError(f"fmt: unknown format {name!r}; supported formats: {', '.join(FORMATS)}")
    return found


def _show(values: tuple) -> str:
    return ", ".join("None" if v is None else repr(v) for v in values)


def resolve(fmt: Format, block: int | None, scale_rule: str | None) -> tuple[int | None, str | None]:
    """``block`` and ``scale_rule`` with defaults filled in; ValueError naming the format and what it accepts."""
    if block is None:
        block = fmt.blocks[0]
    elif isinstance(block, bool) or not isinstance(block, int) or block not in fmt.blocks:
        raise ValueError(f"block: {fmt.name} does not allow block={block!r}; supported: {_show(fmt.blocks)}")
    if scale_rule is None:
        scale_rule = fmt.scale_rules[0]
    elif scale_rule not in fmt.scale_rules:
        known = "" if scale_rule in SCALE_RULES else f" (unknown rule; rules: {', '.join(SCALE_RULES)})"
        raise ValueError(f"scale_rule: {fmt.name} does not take scale_rule={scale_rule!r}{known}; "
                         f"supported: {_show(fmt.scale_rules)}")
    return block, scale_rule
