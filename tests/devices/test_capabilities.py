"""The per-kind capability table (devices.capability, devices/chips/): complete, consistent with the
catalogue and with its sources (Neuron compiler error codes, PyTorch's CUDA kernels, NVIDIA's compute
capability table), and importable without torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import devices
from devices.capability import DTYPES, FLOAT8, OP_CLASSES, Rule

from tests.support import ROOT
TRAINIUM = [k for k in devices.capability_kinds() if k.startswith("trn")]
GPUS = [k for k in devices.capability_kinds() if not k.startswith("trn")]


def test_every_catalogue_kind_has_a_complete_table():
    for kind in devices.kinds():
        caps = devices.capabilities(kind)
        assert caps.kind == kind
        assert caps.gaps() == [], f"{kind}: no rule covers {caps.gaps()[:5]}"
        for op_cls in OP_CLASSES:
            for dtype in DTYPES:
                s = caps.support(op_cls, dtype)
                assert s.level in devices.LEVELS and s.source and s.reason


def test_refused_rules_say_what_to_use_instead():
    for kind in devices.capability_kinds():
        for rule in devices.capabilities(kind).compute:
            if rule.level != "native":
                assert rule.instead, f"{kind}: {rule.reason!r} says nothing about what to use instead"


def test_float64_follows_the_catalogue():
    # The catalogue lists an FP64 rate exactly for the chips with FP64 units; the capability table
    # refuses float64 on the others (Trainium: no FP64 data type in the NKI type table).
    for kind in devices.kinds():
        has_fp64 = "float64" in devices.chip(kind).peak
        for op_cls in OP_CLASSES:
            s = devices.capabilities(kind).support(op_cls, "float64")
            assert s.native == has_fp64, (kind, op_cls, s.level)
            if not has_fp64:
                assert "NKI" in s.source and s.refused


def test_float4_gemms_follow_the_catalogue():
    # A float4 peak figure in the catalogue <=> FP4 GEMMs through the scaled-matmul path.
    for kind in devices.kinds():
        has_fp4 = "float4" in devices.chip(kind).peak
        assert devices.capabilities(kind).support("scaled_matmul", "float4_e2m1fn_x2").native == has_fp4, kind


def test_gpu_scaled_gemms_follow_the_compute_capability():
    # torch._scaled_mm needs sm_89+ for FP8 and sm_100+ for NVFP4: the table and the CUDA identity agree.
    for kind in GPUS:
        caps = devices.capabilities(kind)
        cc = (caps.cuda.major, caps.cuda.minor)
        assert caps.support("scaled_matmul", "float8_e4m3fn").native == (cc >= (8, 9)), kind
        assert caps.support("scaled_matmul", "float4_e2m1fn_x2").native == (cc >= (10, 0)), kind
        assert caps.cuda.status in ("published", "secondary", "assumption")
    assert {k: (devices.capabilities(k).cuda.major, devices.capabilities(k).cuda.minor) for k in GPUS} == {
        "a100": (8, 0), "h100": (9, 0), "h200": (9, 0), "b200": (10, 0), "gb200": (10, 0), "gb300": (10, 3)}


def test_trainium_capability_answer_matches_its_fp8_gemms():
    # The documented answer for Trainium: >= (8, 9) exactly when float8_e4m3fn GEMMs are native,
    # so that a library's FP8 gate takes the path the chip can run.
    for kind in TRAINIUM:
        caps = devices.capabilities(kind)
        e4m3fn = caps.support("scaled_matmul", "float8_e4m3fn").native
        assert ((caps.cuda.major, caps.cuda.minor) >= (8, 9)) == e4m3fn, kind
        assert caps.cuda.status == "assumption" and "documented answer" in caps.cuda.note


def test_plain_float8_matmul_is_refused_on_every_gpu_with_cudas_error():
    for kind in GPUS:
        for dtype in FLOAT8 + ("float4_e2m1fn_x2",):
            s = devices.capabilities(kind).support("matmul", dtype)
            assert s.refused and "torch._scaled_mm" in s.instead
        s = devices.capabilities(kind).support("matmul", "float8_e4m3fn")
        assert s.error.format(scalar_type="Float8_e4m3fn") == "\"addmm_cuda\" not implemented for 'Float8_e4m3fn'"
        assert "Blas.cpp" in s.source


def test_integer_matmul_is_refused_on_gpus_and_wide_integers_on_trainium():
    for kind in GPUS:
        s = devices.capabilities(kind).support("matmul", "int64")
        assert s.refused and "44428" in s.source
        assert devices.capabilities(kind).support("scaled_matmul", "int8").native  # torch._int_mm
        assert devices.capabilities(kind).support("elementwise", "int64").native
    for kind in TRAINIUM:
        caps = devices.capabilities(kind)
        for dtype in ("int32", "int64"):
            assert caps.support("matmul", dtype).refused and "EVRF035" in caps.support("matmul", dtype).source
        assert caps.support("elementwise", "int64").level == "converted"  # computed as int32 (EVRF062)
        assert caps.support("elementwise", "int32").native


def test_neuron_float8_generations():
    # NCC_EVRF051: F8E4M3FN is refused on Trn1/Trn2 and native from Trn3 on; NCC_EVRF005: no fnuz types.
    for kind in ("trn1", "trn2"):
        s = devices.capabilities(kind).support("matmul", "float8_e4m3fn")
        assert s.refused and s.error == "Data type F8E4M3FN is not supported on TRN1/TRN2."
        assert devices.capabilities(kind).support("matmul", "float8_e5m2").native
    for kind in ("trn3", "trn4"):
        assert devices.capabilities(kind).support("matmul", "float8_e4m3fn").native
    for kind in TRAINIUM:
        assert devices.capabilities(kind).support("elementwise", "float8_e4m3fnuz").refused
        assert "EVRF004" in devices.capabilities(kind).support("data_movement", "complex64").source


def test_trn4_is_projected_from_trn3():
    trn3, trn4 = devices.capabilities("trn3"), devices.capabilities("trn4")
    for op_cls in OP_CLASSES:
        for dtype in DTYPES:
            a, b = trn3.support(op_cls, dtype), trn4.support(op_cls, dtype)
            assert a.level == b.level
            assert b.status in ("projected", "assumption") and "projected from Trainium3" in b.source


def test_op_classes_of_aten_ops():
    cases = {
        "aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm.out": "matmul", "aten::linear": "matmul",
        "aten::convolution": "conv", "aten::convolution_backward": "conv",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
        "aten::_scaled_mm": "scaled_matmul", "aten::_int_mm": "scaled_matmul",
        "aten::add_.Tensor": "elementwise", "aten::gelu": "elementwise", "aten::native_layer_norm": "elementwise",
        "aten::_foreach_mul_.Scalar": "elementwise", "aten::some_unknown_op": "elementwise",
        "aten::sum.dim_IntList": "reduction", "aten::_to_copy": "data_movement", "aten::copy_": "data_movement",
        "aten::index_select": "data_movement", "aten::embedding": "data_movement", "aten::fill_.Scalar": "data_movement",
    }
    assert {op: devices.op_class(op) for op in cases} == cases


def test_bad_input_names_the_accepted_values():
    with pytest.raises(ValueError, match="kinds with one: .*h100"):
        devices.capabilities("h9000")
    with pytest.raises(ValueError, match="accepted: matmul"):
        devices.capabilities("h100").support("gemm", "float32")
    with pytest.raises(ValueError, match="accepted: float64"):
        devices.capabilities("h100").support("matmul", "float128")
    with pytest.raises(ValueError, match="level"):
        Rule(("matmul",), ("float32",), "sometimes", "r", "s", "published")
    with pytest.raises(ValueError, match="op class"):
        Rule(("gemm",), ("float32",), "native", "r", "s", "published")
    with pytest.raises(ValueError, match="reason and a source"):
        Rule(("matmul",), ("float32",), "native", "", "s", "published")


def test_dtype_spellings():
    caps = devices.capabilities("trn2")
    assert caps.support("matmul", "double") == caps.support("matmul", "float64")
    assert caps.support("matmul", "torch.float64").refused


def test_table_is_importable_without_torch():
    code = ("import sys, devices; s = devices.capabilities('trn2').support('matmul', 'float64'); "
            "assert s.refused; assert devices.op_class('aten::mm') == 'matmul'; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr


def test_racks_kind_shows_the_table():
    out = subprocess.run([sys.executable, "-m", "hybrid_cli", "racks", "--kind", "trn2"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "== capabilities of trn2" in text and "EVRF051" in text and "capability (8, 0)" in text
    assert "float64" in text.split("== capabilities of trn2")[1]
