"""The per-op cost model: FLOP/byte counts against hand formulas, the roofline's
floors, monotonicity in size, views, unknown ops, caching, tracing on meta."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st

from devices.chip import chip
from devices.cost import Estimate, OpRecord, estimate, estimate_ops, trace_ops
from devices.cost.efficiency import params_for
from devices.figure import STATUSES, Figure

KINDS = ["h100", "h200", "b200", "gb300", "trn2", "trn3", "trn4"]
dims = st.integers(min_value=1, max_value=4096)
small = st.integers(min_value=1, max_value=64)


def flops(op, shapes, dtype="bfloat16", **kw):
    return estimate("h100", op, shapes, dtype, **kw).flops


# ------------------------------------------------------------ counts vs formulas
@pytest.mark.parametrize("op, shapes, expected", [
    ("aten::mm", [(64, 32), (32, 16)], 2 * 64 * 32 * 16),
    ("aten::bmm", [(4, 64, 32), (4, 32, 16)], 2 * 4 * 64 * 32 * 16),
    ("aten::addmm", [(16,), (64, 32), (32, 16)], 2 * 64 * 32 * 16 + 64 * 16),
    ("aten::baddbmm", [(4, 64, 16), (4, 64, 32), (4, 32, 16)], 2 * 4 * 64 * 32 * 16 + 4 * 64 * 16),
    ("aten::linear", [(2, 8, 32), (16, 32)], 2 * 16 * 32 * 16),
    ("aten::linear", [(2, 8, 32), (16, 32), (16,)], 2 * 16 * 32 * 16 + 16 * 16),
    ("aten::matmul", [(5, 3, 64, 32), (3, 32, 16)], 2 * 15 * 64 * 32 * 16),
    ("aten::matmul", [(64, 32), (32,)], 2 * 64 * 32),
    ("aten::mv", [(64, 32), (32,)], 2 * 64 * 32),
    ("aten::addmv", [(64,), (64, 32), (32,)], 2 * 64 * 32 + 64),
    ("aten::dot", [(1000,), (1000,)], 2000),
])
def test_matmul_flops_match_formula(op, shapes, expected):
    assert flops(op, shapes) == expected


def test_matmul_bytes_are_inputs_plus_output():
    e = estimate("h100", "aten::mm", [(64, 32), (32, 16)], "float32")
    assert e.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4


def test_overloads_inplace_and_out_variants_cost_the_same():
    shapes = [(128, 256), (128, 256)]
    ref = estimate("h100", "aten::add.Tensor", shapes, "bfloat16")
    for op in ("aten::add", "aten::add_.Tensor", "aten::add.out", "aten.add.Tensor", "aten::add_"):
        e = estimate("h100", op, shapes, "bfloat16")
        assert (e.flops, e.bytes, e.seconds) == (ref.flops, ref.bytes, ref.seconds), op


def test_elementwise_broadcasts_its_output():
    e = estimate("h100", "aten::mul.Tensor", [(8, 1, 64), (1, 32, 64)], "float32")
    out = 8 * 32 * 64
    assert e.flops == out
    assert e.bytes == (8 * 64 + 32 * 64 + out) * 4


@pytest.mark.parametrize("args, out", [
    ({}, ()), ({"dim": [1]}, (8, 64)), ({"dim": [-1], "keepdim": True}, (8, 32, 1)),
])
def test_reduction_output_inference(args, out):
    e = estimate("h100", "aten::sum.dim_IntList", [(8, 32, 64)], "float32", args=args)
    assert e.bytes == (8 * 32 * 64 + math.prod(out)) * 4


def test_conv2d_output_and_flops():
    # 3x3, stride 2, padding 1 on 56x56 -> 28x28 (PyTorch's formula).
    args = {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "transposed": False,
            "output_padding": [0, 0], "groups": 1}
    e = estimate("h100", "aten::convolution", [(8, 64, 56, 56), (128, 64, 3, 3)], "bfloat16", args=args)
    assert e.flops == 2 * 8 * 28 * 28 * 128 * 64 * 9
    assert e.bytes == (8 * 64 * 56 * 56 + 128 * 64 * 9 + 8 * 128 * 28 * 28) * 2


def test_conv_backward_is_two_forward_gemms():
    fwd = flops("aten::convolution", [(8, 64, 28, 28), (128, 64, 3, 3)],
                args={"padding": [1, 1], "transposed": False, "groups": 1})
    bwd = flops("aten::convolution_backward", [(8, 128, 28, 28), (8, 64, 28, 28), (128, 64, 3, 3)],
                args={"output_mask": [True, True, False], "transposed": False, "groups": 1})
    assert bwd == 2 * fwd


def test_depthwise_groups_are_read_from_shapes():
    e = flops("aten::conv2d", [(1, 64, 32, 32), (64, 1, 3, 3)], args={"padding": [1, 1]})
    assert e == 2 * 32 * 32 * 64 * 9


# (input, weight, output, transposed, groups): what a slot's timeline records of a convolution is its shapes
# only (the C++ record carries no scalar arguments), so the geometry is read from them.
CONVS_BY_SHAPE = [
    ((8, 64, 56, 56), (128, 64, 3, 3), (8, 128, 28, 28), False, 1),        # strided
    ((1, 64, 32, 32), (64, 1, 3, 3), (1, 64, 32, 32), False, 64),          # depthwise
    ((4, 32, 16, 16), (64, 8, 3, 3), (4, 64, 16, 16), False, 4),           # grouped
    ((64, 100, 1, 1), (100, 512, 4, 4), (64, 512, 4, 4), True, 1),         # DCGAN's first up-convolution
    ((64, 512, 4, 4), (512, 256, 4, 4), (64, 256, 8, 8), True, 1),         # stride 2
    ((2, 64, 8, 8), (64, 64, 4, 4), (2, 64, 16, 16), True, 1),             # square channels: the size says up
    ((2, 32, 8, 8), (32, 4, 3, 3), (2, 16, 16, 16), True, 4),              # grouped, transposed
    ((2, 16, 10), (16, 8, 5), (2, 8, 23), True, 1),                        # 1-d
]


@pytest.mark.parametrize("inp, weight, out, transposed, groups", CONVS_BY_SHAPE)
def test_convolution_priced_from_its_shapes_alone(inp, weight, out, transposed, groups):
    # Every weight element meets every output pixel, or every input pixel when transposed (hand formula).
    pixels = inp[0] * math.prod(inp[2:]) if transposed else out[0] * math.prod(out[2:])
    expected = 2 * pixels * math.prod(weight)
    e = estimate("b200", "aten::convolution", [inp, weight], "float32", out_shapes=[out])
    assert not e.estimated_by_default
    assert e.flops == expected
    b = estimate("b200", "aten::convolution_backward", [out, inp, weight], "float32", out_shapes=[inp, weight])
    assert not b.estimated_by_default
    assert b.flops == 2 * expected


def test_topk_priced_from_its_shapes_alone():
    # A slot's timeline records shapes, not k: the outputs' shapes say it (minGPT's top-k sampling was priced
    # by the bytes-only default).
    by_args = estimate("b200", "aten::topk", [(64, 11)], "float32", args={"k": 3, "dim": -1})
    by_shapes = estimate("b200", "aten::topk", [(64, 11)], "float32", out_shapes=[(64, 3), (64, 3)])
    assert not by_shapes.estimated_by_default and not by_args.estimated_by_default
    assert by_shapes.flops == by_args.flops == 4 * 64 * 11
    assert by_shapes.bytes == by_args.bytes == 4 * (64 * 11 + 2 * 64 * 3)


@pytest.mark.parametrize("op, ins, out", [
    ("aten::pixel_shuffle", [(4, 18, 8, 8)], (4, 2, 24, 24)),          # super-resolution's upsampling
    ("aten::pixel_unshuffle", [(4, 2, 24, 24)], (4, 18, 8, 8)),
    ("aten::native_channel_shuffle", [(2, 8, 4, 4)], (2, 8, 4, 4)),    # ShuffleNet
    ("aten::im2col", [(2, 3, 8, 8)], (2, 27, 36)),                     # F.unfold
    ("aten::col2im", [(2, 27, 36)], (2, 3, 8, 8)),                     # F.fold
])
def test_data_movement_ops_cost_their_bytes(op, ins, out):
    # A permutation of the input's elements: no arithmetic, every byte read once and written once.
    e = estimate("b200", op, ins, "float32", out_shapes=[out])
    assert not e.estimated_by_default
    assert e.flops == 0
    assert e.bytes == 4 * (sum(math.prod(s) for s in ins) + math.prod(out))


SDPA = "aten::_scaled_dot_product_flash_attention"
QKV = [(2, 32, 2048, 128), (2, 8, 2048, 128), (2, 8, 2048, 128)]  # GQA: 8 KV heads


def test_attention_flops_count_query_heads():
    assert flops(SDPA, QKV) == 4 * 2 * 32 * 2048 * 2048 * 128


def test_causal_attention_is_about_half():
    full = flops(SDPA, QKV, args={"is_causal": False})
    causal = flops(SDPA, QKV, args={"is_causal": True})
    assert causal / full == pytest.approx(2049 / 4096)  # L(L+1)/2 of L^2 pairs


def test_attention_backward_is_two_and_a_half_forward():
    fwd = flops(SDPA, QKV, args={"is_causal": True})
    grad = [(2, 32, 2048, 128)]
    bwd = flops(SDPA + "_backward", grad + QKV + [(2, 32, 2048, 128), (2, 32, 2048)], args={"is_causal": True})
    assert bwd == pytest.approx(2.5 * fwd)


def test_attention_layouts_agree():
    bhld = flops("aten::_scaled_dot_product_efficient_attention", QKV, args={"is_causal": True})
    blhd = flops("aten::_flash_attention_forward", [(2, 2048, 32, 128), (2, 2048, 8, 128), (2, 2048, 8, 128)],
                 args={"is_causal": True})
    assert bhld == blhd


def test_flex_attention_is_attention_over_its_computed_blocks():
    # A BlockMask computing 3 of 4 (query block, key block) pairs: 3/4 of dense attention's FLOPs, forward and
    # backward (the backward's q, k, v come first, as the slot records them), on the same efficiency curve.
    dense = flops(SDPA, QKV)
    flex = "higher_order::flex_attention"
    assert flops(flex, QKV, args={"block_fraction": 1.0}) == dense
    assert flops(flex, QKV, args={"block_fraction": 0.75}) == pytest.approx(0.75 * dense)
    backward = flops(flex + "_backward", QKV + [(2, 32, 2048, 128)] * 2, args={"block_fraction": 0.75})
    assert backward == pytest.approx(2.5 * 0.75 * dense)
    assert estimate("h100", flex, QKV, "bfloat16", args={"block_fraction": 0.5}).category == "attention"
    # A fraction outside [0, 1] is not a count the rule can read: bytes only, flagged.
    assert estimate("h100", flex, QKV, "bfloat16", args={"block_fraction": 1.5}).estimated_by_default


def test_causal_attention_is_faster_than_full():
    full = estimate("h100", SDPA, QKV, "bfloat16", args={"is_causal": False})
    causal = estimate("h100", SDPA, QKV, "bfloat16", args={"is_causal": True})
    assert causal.seconds < 0.6 * full.seconds


def test_copies_count_read_and_write():
    n = 1 << 20
    assert estimate("h100", "aten::copy_", [(n,), (n,)], "bfloat16").bytes == 2 * n * 2
    assert estimate("h100", "aten::_to_copy", [(n,)], "float32", args={"dtype": "bfloat16"}).bytes == n * 6
    cat = estimate("h100", "aten::cat", [(4, 8), (6, 8)], "float32", args={"dim": 0})
    assert cat.bytes == 2 * 80 * 4


def test_embedding_reads_only_the_rows_it_looks_up():
    e = estimate("h100", "aten::embedding", [(128256, 4096), (1, 2048)], "bfloat16")
    assert e.bytes == 2 * 2048 * 4096 * 2 + 2048 * 8


def test_norms_and_softmax_are_memory_bound():
    for op, shapes in [("aten::native_layer_norm", [(2048, 4096), (4096,), (4096,)]),
                       ("aten::_fused_rms_norm", [(2048, 4096), (4096,)]),
                       ("aten::_softmax", [(32, 2048, 2048)]),
                       ("aten::native_layer_norm_backward", [(2048, 4096), (2048, 4096), (2048, 1), (2048, 1),
                                                             (4096,), (4096,)])]:
        e = estimate("h100", op, shapes, "bfloat16")
        assert e.bound == "memory" and e.flops > 0 and not e.estimated_by_default, op


def test_dtype_as_torch_dtype_or_name():
    torch = pytest.importorskip("torch")
    shapes = [(512, 512), (512, 512)]
    assert estimate("h100", "aten::mm", shapes, torch.bfloat16) == estimate("h100", "aten::mm", shapes, "bfloat16")
    fp8 = estimate("h100", "aten::_scaled_mm", shapes, "float8_e4m3fn")
    assert chip("h100").peak["float8"] in fp8.sources
    assert fp8.seconds < estimate("h100", "aten::mm", shapes, "bfloat16").seconds


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="kind"):
        estimate("h1000", "aten::mm", [(2, 2), (2, 2)], "float32")
    with pytest.raises(ValueError, match="dtype"):
        estimate("h100", "aten::mm", [(2, 2), (2, 2)], "float13")
    with pytest.raises(ValueError, match="non-negative"):
        estimate("h100", "aten::mm", [(2, -2), (2, 2)], "float32")


def test_shapes_a_rule_cannot_read_fall_back_flagged():
    e = estimate("h100", "aten::mm", [(2, 3, 4)], "float32")
    assert e.estimated_by_default and "mm" in e.note


# ------------------------------------------------------------------- properties
@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(KINDS), m=dims, n=dims, k=dims,
       dtype=st.sampled_from(["bfloat16", "float32", "float16", "float8_e4m3fn"]))
def test_no_matmul_beats_its_floor(kind, m, n, k, dtype):
    e = estimate(kind, "aten::mm", [(m, k), (k, n)], dtype)
    c = chip(kind)
    assert e.flops == 2 * m * n * k
    assert e.seconds >= e.flops / c.peak_for(dtype).value
    assert e.seconds >= e.bytes / c.hbm_bandwidth.value


OPS = [("aten::add.Tensor", 2), ("aten::gelu", 1), ("aten::silu_backward", 2), ("aten::sum", 1),
       ("aten::amax", 1), ("aten::_softmax", 1), ("aten::clone", 1), ("aten::native_layer_norm", 1),
       ("aten::_scaled_dot_product_flash_attention", 3), ("aten::where.self", 3), ("aten::var", 1)]


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(KINDS), op=st.sampled_from(OPS), a=small, b=small, c=small,
       dtype=st.sampled_from(["bfloat16", "float32"]))
def test_no_op_beats_its_floor(kind, op, a, b, c, dtype):
    name, arity = op
    e = estimate(kind, name, [(a, b, c, 16)] * arity, dtype)
    ch = chip(kind)
    assert e.bytes > 0 and (e.flops > 0) == (name != "aten::clone")
    assert e.seconds >= e.flops / ch.peak_for(dtype).value
    assert e.seconds >= e.bytes / ch.hbm_bandwidth.value
    assert e.seconds >= params_for(ch.kind, ch.family).launch_overhead.value


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(KINDS), m=dims, n=dims, k=dims, axis=st.integers(0, 2),
       grow=st.integers(1, 4096))
def test_matmul_time_is_monotonic_in_every_dimension(kind, m, n, k, axis, grow):
    size = [m, n, k]
    bigger = list(size)
    bigger[axis] += grow
    t = [estimate(kind, "aten::mm", [(s[0], s[2]), (s[2], s[1])], "bfloat16").seconds for s in (size, bigger)]
    assert t[1] >= t[0]


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(KINDS), op=st.sampled_from(["aten::mul.Tensor", "aten::exp", "aten::sum.dim_IntList",
                                                          "aten::mean.dim", "aten::amax"]),
       rows=st.integers(1, 1 << 14), cols=st.integers(1, 1 << 14), grow=st.integers(1, 1 << 14),
       axis=st.integers(0, 1))
def test_elementwise_and_reduction_time_is_monotonic(kind, op, rows, cols, grow, axis):
    arity = 2 if op == "aten::mul.Tensor" else 1
    args = {"dim": [-1]} if op in ("aten::sum.dim_IntList", "aten::mean.dim", "aten::amax") else None
    shape = [rows, cols]
    bigger = list(shape)
    bigger[axis] += grow
    t = [estimate(kind, op, [tuple(s)] * arity, "bfloat16", args=args).seconds for s in (shape, bigger)]
    assert t[1] >= t[0]


VIEWS = ["aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::transpose.int", "aten::permute",
         "aten::t", "aten::expand", "aten::unsqueeze", "aten::squeeze.dim", "aten::select.int",
         "aten::slice.Tensor", "aten::split.Tensor", "aten::detach", "aten::alias", "aten::_unsafe_view",
         "aten::unsqueeze_", "aten::t_"]


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(KINDS), op=st.sampled_from(VIEWS), a=dims, b=dims)
def test_views_cost_exactly_zero(kind, op, a, b):
    e = estimate(kind, op, [(a, b)], "bfloat16")
    assert (e.seconds, e.flops, e.bytes, e.bound) == (0.0, 0.0, 0.0, "none")
    assert not e.estimated_by_default


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(KINDS), name=st.from_regex(r"zz[a-z_]{1,12}", fullmatch=True), a=dims)
def test_unknown_ops_are_flagged(kind, name, a):
    e = estimate(kind, f"aten::{name}.default", [(a, 8)], "float32")
    assert e.estimated_by_default and e.flops == 0
    assert e.bytes == 2 * a * 8 * 4  # input read + an output as large, written
    assert e.seconds >= e.bytes / chip(kind).hbm_bandwidth.value


# ------------------------------------------------------- efficiency and sources
def test_small_matmuls_run_far_below_peak():
    peak = chip("h100").peak_for("bfloat16").value
    rate = {n: (lambda e: e.flops / e.seconds)(estimate("h100", "aten::mm", [(n, n), (n, n)], "bfloat16"))
            for n in (128, 512, 2048, 8192)}
    assert rate[128] < 0.05 * peak < rate[512] < rate[2048] < rate[8192] < peak


def test_small_copies_reach_little_bandwidth():
    bw = chip("h200").hbm_bandwidth.value
    rate = {n: (lambda e: e.bytes / e.seconds)(estimate("h200", "aten::clone", [(n,)], "uint8"))
            for n in (64 << 10, 64 << 20, 4 << 30)}
    assert rate[64 << 10] < 0.05 * bw < rate[64 << 20] < rate[4 << 30] < bw


def test_trainium4_estimates_are_projected():
    for op, shapes in [("aten::mm", [(1024, 1024)] * 2), ("aten::add.Tensor", [(1024,)] * 2),
                       ("aten::view", [(4, 4)]), ("aten::zzunknown", [(4, 4)])]:
        assert estimate("trn4", op, shapes, "bfloat16").projected, op
        assert not estimate("trn3", op, shapes, "bfloat16").projected, op


@pytest.mark.parametrize("kind", KINDS)
def test_every_figure_used_is_sourced(kind):
    e = estimate(kind, "aten::mm", [(4096, 4096)] * 2, "bfloat16")
    assert isinstance(e, Estimate) and e.sources
    for f in e.sources:
        assert isinstance(f, Figure) and f.source.strip() and f.status in STATUSES
        if f.status == "projected" and "assumption" in f.source:
            assert f.note, "an assumption must say what it assumes"
    ch = chip(kind)
    assert ch.peak_for("bfloat16") in e.sources and ch.hbm_bandwidth in e.sources
    p = params_for(ch.kind, ch.family)
    for field in dataclasses.fields(p):
        fig = getattr(p, field.name)
        assert isinstance(fig, Figure) and fig.source and fig.status in STATUSES
        assert 0 < fig.value and (fig.unit != "" or field.name.endswith(("half_dim", "half_keys")) or fig.value <= 1)
    if ch.family == "gpu":
        assert p.matmul_efficiency.status == "calibrated" and "8192" in p.matmul_efficiency.source
        assert p.memory_efficiency.status == "calibrated" and "4.3 TB/s" in p.memory_efficiency.source


def test_estimates_are_frozen_and_repeated_calls_hit_the_cache():
    # The speed of a cached call is a benchmark's business (python -m benchmarks); here: it is cached.
    from devices.cost.model import _estimate

    shapes = [(8192, 8192), (8192, 8192)]
    e = estimate("h200", "aten::mm", shapes, "bfloat16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.seconds = 0.0  # type: ignore[misc]
    args = {"is_causal": True}
    first = estimate("h200", SDPA, QKV, "bfloat16", args=args)
    hits = _estimate.cache_info().hits
    assert estimate("h200", "aten::mm", [list(s) for s in shapes], "bfloat16") is e
    assert estimate("h200", SDPA, QKV, "bfloat16", args=dict(args)) is first
    assert _estimate.cache_info().hits == hits + 2


# ---------------------------------------------------------- tracing on meta
def test_trace_records_aten_ops_with_shapes_and_args():
    torch = pytest.importorskip("torch")
    x = torch.ones(8, 16)  # a CPU tensor: moved to meta, nothing computed
    w = torch.ones(32, 16, requires_grad=True)

    def fn(x, w):
        y = (x @ w.t()).relu()
        y.sum(dim=-1, keepdim=True).sum().backward()

    records = trace_ops(fn, x, w)
    ops = [r.op for r in records]
    assert "aten::mm" in ops and "aten::relu" in ops and "aten::threshold_backward" in ops
    mm = next(r for r in records if r.op == "aten::mm")
    assert mm.shapes == ((8, 16), (16, 32)) and mm.out_shapes == ((8, 32),) and mm.dtype == "float32"
    total = next(r for r in records if r.op == "aten::sum.dim_IntList")
    assert total.args["keepdim"] is True and total.args["dim"] == (-1,)
    assert w.grad is None  # the real tensor was not touched


def test_trace_lowers_sdpa_and_rms_norm_to_fused_kernels():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    with torch.device("meta"):
        q = torch.empty(1, 8, 256, 64, dtype=torch.bfloat16, requires_grad=True)
        kv = torch.empty(1, 2, 256, 64, dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(64, dtype=torch.bfloat16, requires_grad=True)

    def fn():
        o = F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        F.rms_norm(o, (64,), w).sum().backward()

    ops = [r.op for r in trace_ops(fn)]
    for fused in ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward",
                  "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"):
        assert fused in ops, fused
    flash = next(r for r in trace_ops(fn) if r.op == "aten::_scaled_dot_product_flash_attention")
    assert flash.args["is_causal"] is True
    assert "aten::_scaled_dot_product_flash_attention" not in [r.op for r in trace_ops(fn, lower=False)]


def test_estimate_ops_sums_and_flags():
    records = [OpRecord("aten::mm", ((1024, 1024), (1024, 1024)), "bfloat16"),
               OpRecord("aten::view", ((1024, 1024),), "bfloat16"),
               OpRecord("aten::gelu", ((1024, 1024),), "bfloat16"),
               OpRecord("aten::zzfrobnicate", ((1024,),), "bfloat16")]
    s = estimate_ops("h100", records)
    singles = [estimate("h100", r.op, r.shapes, r.dtype) for r in records]
    assert s.seconds == pytest.approx(sum(e.seconds for e in singles))
    assert s.flops == pytest.approx(sum(e.flops for e in singles))
    assert s.mfu == pytest.approx(s.flops / (s.seconds * chip("h100").peak_for("bfloat16").value))
    assert s.estimated_by_default == 1 and s.unknown_ops == ("aten::zzfrobnicate",)
    assert s.by_op[0].op == "aten::mm" and "MFU" in s.table()
