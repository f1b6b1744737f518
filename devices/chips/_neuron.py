"""Rules of the AWS Neuron stack (Trainium): what NeuronCores compute in, with the Neuron docs that say so.

Kind files compose these in order; the generation-specific rules (float8
variants, MX formats) are chosen per kind.
"""

from __future__ import annotations

from devices.capability import (
    ANY, COMPLEX, FLOAT, FLOAT4, FLOAT8_FNUZ, GEMM, INT64, INTEGER, OP_CLASSES, VECTOR, Rule,
)

_DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest"
NKI_DTYPES = ("AWS Neuron docs, NKI API common fields, 'Supported Data Types by NKI' "
              "(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.api.shared.html): "
              "unsigned/signed integers of 8, 16 and 32 bits, float8_e4m3, float8_e5m2, float8_e4m3fn, "
              "float8_e8m0fnu, float16, bfloat16, tfloat32, float32, packed MX types; no 64-bit or complex type")
DATA_TYPES = (f"AWS Neuron docs, Data Types ({_DOCS}/about-neuron/arch/neuron-features/data-types.html): "
              "NeuronCore-v2 supports FP32, TF32, BF16, FP16, cFP8 (E5M2, E4M3, E3M4) and UINT8")
NC_V2 = (f"AWS Neuron docs, NeuronCore-v2 architecture ({_DOCS}/general/arch/neuron-hardware/neuron-core-v2.html): "
         "TensorEngine inputs cFP8/FP16/BF16/TF32/FP32/INT8, outputs FP32/INT32")
NC_V3 = (f"AWS Neuron docs, NeuronCore-v3 architecture ({_DOCS}/about-neuron/arch/neuron-hardware/neuron-core-v3.html): "
         "Tensor Engine inputs and outputs cFP8, FP16, BF16, TF32, FP32")
NC_V4 = (f"AWS Neuron docs, NeuronCore-v4 architecture ({_DOCS}/about-neuron/arch/neuron-hardware/neuron-core-v4.html): "
         "Tensor Engine inputs MXFP8/MXFP4 (OCP), FP16, BF16, TF32, FP32; outputs FP32 or BF16")
MIXED_PRECISION = (f"AWS Neuron docs, Mixed Precision and Performance-accuracy Tuning (neuronx-cc) "
                   f"({_DOCS}/general/appnotes/neuronx-cc/neuronx-cc-training-mixed-precision.html)")


def error_code(code: str) -> str:
    """Citation of a Neuron compiler error code page."""
    return f"AWS Neuron docs, Neuron Compiler error code NCC_{code} ({_DOCS}/compiler/error-codes/{code}.html)"


COMPLEX_REFUSED = Rule(
    (ANY,), COMPLEX, "unsupported", "complex data types are not supported on the Neuron device",
    error_code("EVRF004"), "published",
    error="Complex data types are not supported on the Neuron device.",
    instead="keep real and imaginary parts as separate float tensors, or compute the complex part on the CPU")

FLOAT64_REFUSED = Rule(
    (ANY,), ("float64",), "unsupported",
    "NeuronCores have no FP64 data type (no 64-bit float among the NKI data types or any engine's inputs); "
    "the Neuron stack does not compute in float64",
    NKI_DTYPES, "published",
    instead="float32 (or bfloat16 with float32 accumulation); keep float64 work on the CPU")

FNUZ_REFUSED = Rule(
    (ANY,), FLOAT8_FNUZ, "unsupported", "the fnuz float8 variants (AMD's formats) are not Neuron data types",
    error_code("EVRF005"), "published",
    error="The compiler found usage of F8E4M3FNUZ, F8E4M3B11FNUZ, or F8E5M2FNUZ data type which is not supported.",
    instead="float8_e5m2 (or float8_e4m3fn on Trn3 and later), or float16")

E4M3FN_REFUSED = Rule(
    (ANY,), ("float8_e4m3fn",), "unsupported",
    "float8_e4m3fn is natively supported from Trainium3 (Trn3) on; Trn1 and Trn2 use the IEEE-style E4M3",
    error_code("EVRF051"), "published",
    error="Data type F8E4M3FN is not supported on TRN1/TRN2.",
    instead="float8_e5m2, or a Trn3 slot")

E8M0_REFUSED = Rule(
    (ANY,), ("float8_e8m0fnu",), "unsupported",
    "float8_e8m0fnu is the MX block-scale type, and MX formats arrive with NeuronCore-v4 (Trn3)",
    f"{NKI_DTYPES}; {NC_V4}", "assumption",
    instead="float32 scales, or a Trn3 slot")

E8M0_SCALES_ONLY = (
    Rule(("data_movement",), ("float8_e8m0fnu",), "native", "MX block-scale type, stored and moved as such",
         NKI_DTYPES, "published"),
    Rule((ANY,), ("float8_e8m0fnu",), "unsupported",
         "float8_e8m0fnu is a scale type: the Neuron docs show it only as MX block scales, never as an operand",
         f"{NKI_DTYPES}; {NC_V4}", "assumption",
         instead="float32 (dequantize the scales first)"),
)

FLOAT4_REFUSED = Rule(
    (ANY,), FLOAT4, "unsupported", "float4_e2m1fn is not a data type the Neuron compiler generates code for "
    "before NeuronCore-v4's MXFP4", error_code("ESPP004"), "published",
    error="The compiler encountered a data type that is not supported for code generation.",
    instead="bfloat16, or MXFP4 on a Trn3 slot")

FLOAT4_MX_ONLY = (
    Rule(("scaled_matmul", "data_movement"), FLOAT4, "native",
         "MXFP4 operands of the NeuronCore-v4 Tensor Engine (OCP MX, 32-element blocks)", NC_V4, "published"),
    Rule((ANY,), FLOAT4, "unsupported", "FP4 exists on NeuronCore-v4 only as MXFP4 matmul operands",
         f"{NC_V4}; {error_code('ESPP004')}", "published",
         error="The compiler encountered a data type that is not supported for code generation.",
         instead="bfloat16 (dequantize before computing)"),
)

SCALED_FP8_UNDOCUMENTED = Rule(
    ("scaled_matmul",), ("float8_e4m3fn", "float8_e5m2"), "unsupported",
    "no scaled FP8 GEMM is documented before NeuronCore-v4 (FP8 matmuls are plain cFP8 matmuls there)",
    f"{NC_V3}; {NC_V2}", "assumption",
    instead="a plain matmul on float8_e5m2 operands, or a Trn3 slot for MXFP8")

SCALED_FP8_MX = Rule(
    ("scaled_matmul",), ("float8_e4m3fn", "float8_e5m2"), "native",
    "MXFP8 operands of the NeuronCore-v4 Tensor Engine (ScaledMatmul on QuantizeMX outputs)",
    f"{NC_V4}; {error_code('EVRF043')}", "published")

INT_GEMM_WIDE_REFUSED = Rule(
    GEMM, ("int64", "uint64", "int32", "uint32"), "unsupported",
    "matrix multiplication does not take 32-bit or 64-bit integer operands on Neuron targets",
    error_code("EVRF035"), "published",
    error="Matrix multiplication (dot) does not support 32-bit or 64-bit integer operands on this target.",
    instead="cast the operands to float32 (exact while |values| < 2**24)")

INT_GEMM_NARROW_CONVERTED = Rule(
    GEMM, ("int16", "int8", "uint16", "uint8", "bool"), "converted",
    "the NeuronCore-v3/v4 Tensor Engines list no integer inputs; narrow integer matmuls are assumed computed "
    "through a float type", f"{NC_V3}; {NC_V4}", "assumption",
    instead="cast to bfloat16 or float32 explicitly")

INT_SCALED_REFUSED = Rule(
    ("scaled_matmul",), INTEGER, "unsupported",
    "no int8 GEMM entry point (torch._int_mm) is documented for the Neuron stack", f"{NC_V3}; {NC_V4}", "assumption",
    instead="a float matmul")

INT64_CONVERTED = Rule(
    (ANY,), INT64, "converted",
    "NeuronCores have no 64-bit integer type: the Neuron stack computes int64 as int32, exact only below 2**31",
    f"{NKI_DTYPES}; {error_code('EVRF062')}", "published",
    instead="int32 where the values fit")

FLOAT_NATIVE = Rule(
    (ANY,), FLOAT, "native", "FP32, BF16 and FP16 are inputs of every NeuronCore engine",
    f"{NKI_DTYPES}; {NC_V3}", "published")

NARROW_INT_NATIVE = Rule(
    VECTOR + ("data_movement",), ("int32", "int16", "int8", "uint32", "uint16", "uint8", "bool"), "native",
    "8-, 16- and 32-bit integers (and bool, stored as uint8) are NKI data types", NKI_DTYPES, "published")


def fp8_native(dtypes: tuple[str, ...], source: str, status: str = "published") -> Rule:
    """The float8 variants a generation computes in natively (matmul, vector engines, data movement)."""
    classes = tuple(c for c in OP_CLASSES if c != "scaled_matmul")
    return Rule(classes, dtypes, "native", "cFP8 inputs of the Tensor, Vector and Scalar engines", source, status)


FP32_MATMUL_NOTE = ("float32 matmuls: neuronx-cc casts FP32 matrix multiplications to BF16 by default "
                    f"(--auto-cast matmult) [{MIXED_PRECISION}]; this run computes them in float32")

__all__ = [
    "COMPLEX_REFUSED", "E4M3FN_REFUSED", "E8M0_REFUSED", "E8M0_SCALES_ONLY", "FLOAT4_MX_ONLY", "FLOAT4_REFUSED",
    "FLOAT64_REFUSED", "FLOAT_NATIVE", "FNUZ_REFUSED", "FP32_MATMUL_NOTE", "INT64_CONVERTED",
    "INT_GEMM_NARROW_CONVERTED", "INT_GEMM_WIDE_REFUSED", "INT_SCALED_REFUSED", "NARROW_INT_NATIVE",
    "SCALED_FP8_MX", "SCALED_FP8_UNDOCUMENTED", "error_code", "fp8_native",
]
