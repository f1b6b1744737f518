"""Numerics of the AWS Neuron stack (Trainium): rounding, MX block formats, matmul accumulation, with sources.

Kind files take these into their ``Capabilities`` (``rounding=``, ``block_formats=``, ``accumulation=``).
"""

from __future__ import annotations

from devices.capability_numerics import Accumulation, BlockFormat, Rounding
from devices.chips._neuron import DATA_TYPES, MIXED_PRECISION

_DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest"
ENV_VARS = ("AWS Neuron docs, PyTorch Neuron environment variables (torch-neuronx): NEURON_RT_STOCHASTIC_ROUNDING_EN "
            "'will use stochastic rounding instead of round-nearest-even for all internal rounding operations when "
            "casting from FP32 to a reduced precision data type (FP16, BF16, FP8, TF32)'; "
            "NEURON_RT_STOCHASTIC_ROUNDING_SEED, default 0 "
            f"({_DOCS}/frameworks/torch/torch-neuronx/api-reference-guide/training/torch-neuron-envvars.html)")
SR_DEFAULT = ("AWS Neuron docs, Migration from XLA_USE_BF16/XLA_DOWNCAST_BF16 (Trn1, Trn2, Trn3): stochastic "
              "rounding is on by default when XLA_USE_BF16 or XLA_DOWNCAST_BF16 is set, otherwise off unless "
              "NEURON_RT_STOCHASTIC_ROUNDING_EN=1 "
              f"({_DOCS}/about-neuron/appnotes/torch-neuronx/migration-from-xla-downcast-bf16.html)")
NC_MATMUL = ("AWS Neuron docs, nki.isa.nc_matmul: 'The matmul accumulation and results are always in float32' "
             "(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.isa.nc_matmul.html)")
MX_MATMUL = ("AWS Neuron docs, MXFP Matrix Multiplication with NKI: NeuronCore-v4 multiplies MXFP4/MXFP8 inputs with "
             "their MX scales in one instruction, 'outputting results in FP32 or BF16'; nki.isa.nc_matmul_mx "
             f"({_DOCS}/nki/deep-dives/mxfp-matmul.html)")
QUANTIZE_MX = ("AWS Neuron docs v2.32.0, nki.isa.quantize_mx: FP16/BF16 to MXFP8 (E4M3 or E5M2) in groups of 32 with "
               "an E8M0 scale; 'uses a block scale that is two times larger' than the OCP sample algorithm, "
               "'reserving additional range for rounding the largest values in each group without saturation. "
               "This remains OCP MX-compliant.' "
               "(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.32.0/nki/api/generated/nki.isa.quantize_mx.html)")

_ALGORITHM = ("Neuron: the hardware rounds 'up or down using a proportional probability'; the bit-level algorithm and "
              "its random source are not published. Modelled as exactly unbiased stochastic rounding (P(up) = distance "
              "to the lower neighbour / gap) drawing from the slot's torch generator: an assumption, so individual "
              "roundings differ from a real chip's, their statistics do not")


def rounding(fp8: tuple[str, ...]) -> Rounding:
    """RNE by default, stochastic rounding of every FP32 -> narrower result when enabled."""
    return Rounding(
        default="nearest", stochastic_scope="op_outputs", stochastic_dtypes=("bfloat16", "float16") + fp8,
        switch="NEURON_RT_STOCHASTIC_ROUNDING_EN=1 (on by default with XLA_USE_BF16=1 / XLA_DOWNCAST_BF16=1; "
               "seed NEURON_RT_STOCHASTIC_ROUNDING_SEED, default 0); a rack enables it with "
               "stochastic_rounding = true",
        algorithm=_ALGORITHM, source=f"{ENV_VARS}; {SR_DEFAULT}; {DATA_TYPES}", status="published")


def accumulate_fp32(fp8: tuple[str, ...]) -> Accumulation:
    """Tensor Engine accumulation for the kind's narrow operand types: always float32."""
    return Accumulation(
        inputs=fp8 + ("bfloat16", "float16"), accumulator="float32", outputs=("float32",), source=NC_MATMUL,
        status="published", note="results land in PSUM in float32 and are cast on the way out")


ACCUMULATE_FP32_INPUTS = Accumulation(
    inputs=("float32",), accumulator="float32", outputs=("float32",), source=f"{NC_MATMUL}; {MIXED_PRECISION}",
    status="published",
    note="neuronx-cc casts FP32 matmul operands to BF16 by default (--auto-cast matmult); accumulation stays FP32. "
         "An exact-mode slot computes FP32 matmuls in float32")

ACCUMULATE_MX = Accumulation(
    inputs=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp4_e2m1"), accumulator="float32", outputs=("float32", "bfloat16"),
    source=MX_MATMUL, status="published", note="MX scales are applied inside the Tensor Engine")

MXFP8 = tuple(
    BlockFormat(fmt, 32, element, "e8m0", "trn3", QUANTIZE_MX, "published",
                note="quantized on the Vector Engine by nisa.quantize_mx (FP16/BF16 input)")
    for fmt, element in (("mxfp8_e4m3", "e4m3"), ("mxfp8_e5m2", "e5m2")))

MXFP4 = BlockFormat(
    "mxfp4_e2m1", 32, "e2m1", "e8m0", "ocp", MX_MATMUL, "assumption",
    note="nc_matmul_mx consumes MXFP4 (published), but Neuron documents no MXFP4 quantizer (quantize_mx emits MXFP8 "
         "only): MXFP4 operands come from software, assumed to use the OCP sample rule")

__all__ = ["ACCUMULATE_FP32_INPUTS", "ACCUMULATE_MX", "MXFP4", "MXFP8", "accumulate_fp32", "rounding"]
