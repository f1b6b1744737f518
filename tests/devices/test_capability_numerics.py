"""The numerics fields of each kind's capability record: complete, sourced, in interop.numerics' vocabulary,
and consistent with the same record's dtype rules."""

from __future__ import annotations

import pytest

import devices
from devices.capability import DTYPES, STATUSES
from devices.capability_numerics import ROUNDING_MODES, Accumulation, BlockFormat, Rounding

KINDS = devices.capability_kinds()


def _entries(caps):
    return [caps.rounding, *caps.block_formats, *caps.accumulation]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_sourced_numerics(kind):
    caps = devices.capabilities(kind)
    assert caps.rounding is not None and caps.accumulation
    for entry in _entries(caps):
        assert entry.source.strip() and entry.status in STATUSES
    for operand in ("bfloat16", "float16", "float32"):
        acc = caps.accumulator(operand)
        assert acc is not None and acc.accumulator == "float32", (kind, operand)


@pytest.mark.parametrize("kind", KINDS)
def test_names_are_interop_numerics_names(kind):
    from interop.numerics import FORMATS, ROUNDINGS

    assert set(ROUNDING_MODES) == set(ROUNDINGS)
    caps = devices.capabilities(kind)
    assert caps.rounding.default in ROUNDINGS
    assert set(caps.rounding.stochastic_dtypes) <= set(DTYPES)
    for block in caps.block_formats:
        fmt = FORMATS[block.format]
        assert fmt.element.name == block.element and block.block in fmt.blocks, (kind, block.format)
        assert block.scale_rule in fmt.scale_rules, (kind, block.format, block.scale_rule)
    for acc in caps.accumulation:
        for operand in acc.inputs:
            assert operand in DTYPES or operand in FORMATS, (kind, operand)


@pytest.mark.parametrize("kind", KINDS)
def test_numerics_agree_with_the_dtype_rules(kind):
    caps = devices.capabilities(kind)
    for block in caps.block_formats:  # a block format is a scaled GEMM on its element type
        dtype = "float4_e2m1fn_x2" if block.element == "e2m1" else (
            "float8_e4m3fn" if block.element == "e4m3" else "float8_e5m2")
        if block.element in ("e4m3", "e5m2", "e2m1"):
            assert caps.support("scaled_matmul", dtype).native, (kind, block.format)
    for acc in caps.accumulation:
        for operand in acc.inputs:
            if operand in DTYPES:
                assert (caps.support("matmul", operand).native or caps.support("scaled_matmul", operand).native), \
                    (kind, operand)
    for dtype in caps.rounding.stochastic_dtypes:
        assert caps.support("data_movement", dtype).native, (kind, dtype)


def test_documented_facts():
    trn3, b200, h100, trn2 = (devices.capabilities(k) for k in ("trn3", "b200", "h100", "trn2"))
    # Neuron: RNE by default, stochastic rounding of op outputs behind NEURON_RT_STOCHASTIC_ROUNDING_EN.
    assert trn2.rounding.stochastic_outputs("bfloat16") and "NEURON_RT_STOCHASTIC_ROUNDING_EN" in trn2.rounding.switch
    assert trn2.rounding.default == "nearest" and not trn2.block_formats
    # Trn3 quantizes MXFP8 with a scale twice OCP's (nki.isa.quantize_mx), status published.
    entry = trn3.block_format("mxfp8_e4m3")
    assert entry.scale_rule == "trn3" and entry.status == "published" and "quantize_mx" in entry.source
    assert trn3.block_format("nvfp4") is None and trn3.block_format("mxfp4_e2m1").status == "assumption"
    # Blackwell: cuBLAS's RCEIL rule, NVFP4, stochastic rounding only in conversion instructions.
    assert b200.block_format("mxfp8_e5m2").scale_rule == "rceil" and b200.block_format("nvfp4").block == 16
    assert not b200.rounding.stochastic_outputs("bfloat16") and "bfloat16" in b200.rounding.stochastic_dtypes
    # Hopper: no MX, no stochastic rounding; FP8 accumulates in FP32 (the ~14-bit report is a note, not a model).
    assert not h100.block_formats and h100.rounding.stochastic_scope == "none"
    assert h100.accumulator("float8_e4m3fn").accumulator == "float32"
    assert "14 bits" in h100.accumulator("float8_e4m3fn").note


def test_projected_kind_is_labelled():
    for entry in _entries(devices.capabilities("trn4")):
        assert entry.status in ("projected", "assumption") and "projected from Trainium3" in entry.source


def test_records_validate_their_fields():
    with pytest.raises(ValueError, match="Rounding.default: unknown mode 'up'"):
        Rounding("up", "none", (), "", "", "src", "published")
    with pytest.raises(ValueError, match="stochastic_dtypes must be empty exactly when"):
        Rounding("nearest", "none", ("bfloat16",), "", "", "src", "published")
    with pytest.raises(ValueError, match="BlockFormat.status: unknown status 'guess'"):
        BlockFormat("mxfp8_e4m3", 32, "e4m3", "e8m0", "ocp", "src", "guess")
    with pytest.raises(ValueError, match="Accumulation.status"):
        Accumulation(("bfloat16",), "float32", ("float32",), "src", "rumour")
