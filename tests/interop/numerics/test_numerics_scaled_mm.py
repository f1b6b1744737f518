"""torch._scaled_mm on hybrid slots: per-tensor and row-wise scales run the CPU kernel (bit for bit),
MX and NVFP4 block scales (which CUDA takes and the CPU refuses) run on emulated slots, every call is
held to CUDA's contract (same conditions, same messages), and each call is one timeline record."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import interop
from interop.numerics import ELEMENTS, quantize, scaled_matmul, swizzle, unswizzle

M, K, N = 64, 128, 48


def _operands(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)


def _exact_product(qa, qb) -> torch.Tensor:
    """Reference in float64 from the codes and scales (independent of the float32 matmul's order)."""
    return qa.dequantize(torch.float32).double() @ qb.dequantize(torch.float32).double().t()


def _swizzled(q, dtype):
    return swizzle(q.scales.view(torch.uint8)).view(dtype)


def test_swizzle_is_cudas_layout():
    blocked = pytest.importorskip("torchao.prototype.mx_formats.utils",
                                  reason="torchao 0.18 (requirements-dev.txt) holds the reference layout")
    for rows, cols in ((200, 7), (128, 4), (5, 1)):
        s = torch.randint(0, 255, (rows, cols), dtype=torch.uint8)
        assert torch.equal(swizzle(s), blocked.to_blocked(s).flatten())
        assert torch.equal(unswizzle(swizzle(s), rows, cols), s)


def test_tensorwise_and_rowwise_equal_the_cpu():
    x, w = _operands()
    a8, b8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t()
    for sa, sb in ((torch.tensor(0.5), torch.tensor(2.0)), (torch.rand(M, 1) + 0.5, torch.rand(1, N) + 0.5)):
        cpu = torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16)
        slot = torch._scaled_mm(a8.to("hybrid:0"), b8.to("hybrid:0"), sa.to("hybrid:0"), sb.to("hybrid:0"),
                                out_dtype=torch.bfloat16)
        assert slot.device.type == "hybrid" and torch.equal(slot.cpu(), cpu)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_mxfp8_block_scales_on_a_slot(out_dtype):
    x, w = _operands(1)
    qa, qb = quantize(x, "mxfp8_e4m3"), quantize(w, "mxfp8_e5m2")
    sa, sb = _swizzled(qa, torch.float8_e8m0fnu), _swizzled(qb, torch.float8_e8m0fnu)
    with pytest.raises((RuntimeError, ValueError), match="Invalid scaling configuration"):  # the CPU refuses
        torch._scaled_mm(qa.codes, qb.codes.t(), sa, sb, out_dtype=out_dtype)
    out = torch._scaled_mm(qa.codes.to("hybrid:0"), qb.codes.to("hybrid:0").t(), sa.to("hybrid:0"),
                           sb.to("hybrid:0"), out_dtype=out_dtype)
    assert out.dtype == out_dtype and out.device == torch.device("hybrid:0")
    exact = _exact_product(qa, qb)
    # float32 accumulation of exact products: within K float32 roundings of the float64 sum
    tol = K * 2.0 ** -24 * (qa.dequantize().abs() @ qb.dequantize().abs().t()).double()
    if out_dtype == torch.float32:
        assert bool(((out.cpu().double() - exact).abs() <= tol).all())
    else:
        assert torch.equal(out.cpu(), scaled_matmul(qa, qb, out_dtype=torch.float32).to(out_dtype))


def test_nvfp4_block_scales_on_a_slot():
    x, w = _operands(2)
    qa, qb = quantize(x, "nvfp4"), quantize(w, "nvfp4")
    out = torch._scaled_mm(qa.packed().to("hybrid:0"), qb.packed().to("hybrid:0").t(),
                           _swizzled(qa, torch.float8_e4m3fn).to("hybrid:0"),
                           _swizzled(qb, torch.float8_e4m3fn).to("hybrid:0"), out_dtype=torch.float32)
    # _scaled_mm applies the E4M3 block scales; the per-tensor scales multiply the result (as torchao does)
    e2m1 = ELEMENTS["e2m1"]
    a = (e2m1.decode(qa.codes).view(M, -1, 16) * qa.scales.float().unsqueeze(-1)).view(M, K).double()
    b = (e2m1.decode(qb.codes).view(N, -1, 16) * qb.scales.float().unsqueeze(-1)).view(N, K).double()
    exact = a @ b.t()
    tol = K * 2.0 ** -24 * (a.abs() @ b.abs().t())
    assert bool(((out.cpu().double() - exact).abs() <= tol).all())


def test_v2_block_scales_swizzled_and_plain():
    x, w = _operands(3)
    qa, qb = quantize(x, "mxfp8_e4m3"), quantize(w, "mxfp8_e4m3")
    want = scaled_matmul(qa, qb, out_dtype=torch.float32).bfloat16()
    for swizzled in (True, False):
        sa = _swizzled(qa, torch.float8_e8m0fnu) if swizzled else qa.scales
        sb = _swizzled(qb, torch.float8_e8m0fnu) if swizzled else qb.scales
        kind = F.SwizzleType.SWIZZLE_32_4_4 if swizzled else F.SwizzleType.NO_SWIZZLE
        out = F.scaled_mm(qa.codes.to("hybrid:0"), qb.codes.to("hybrid:0").t(), sa.to("hybrid:0"),
                          F.ScalingType.BlockWise1x32, sb.to("hybrid:0"), F.ScalingType.BlockWise1x32,
                          swizzle_a=kind, swizzle_b=kind, output_dtype=torch.bfloat16)
        assert torch.equal(out.cpu(), want)


def test_cuda_contract_is_enforced_on_slots():
    x, w = _operands(4)
    one = torch.tensor(1.0, device="hybrid:0")
    a8 = x.to(torch.float8_e4m3fn).to("hybrid:0")
    b8 = w.to(torch.float8_e4m3fn).to("hybrid:0").t()
    cases = [
        ((a8, b8.contiguous()), RuntimeError, "Only multiplication of row-major and column-major matrices"),
        ((a8.float().to(torch.float8_e5m2), b8.float().to(torch.float8_e5m2).t().contiguous().t()), ValueError,
         "Multiplication of two Float8_e5m2 matrices is not supported"),
        ((a8[:, :120].contiguous(), b8[:120]), RuntimeError, "Expected trailing dimension of mat1 to be divisible by 16"),
        ((a8, b8[:, :40]), RuntimeError, r"mat2 shape \(128x40\) must be divisible by 16"),
    ]
    for (a, b), error, message in cases:
        with pytest.raises(error, match=message):
            torch._scaled_mm(a, b, one, one, out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="Bias is not supported when out_dtype is set to Float32"):
        torch._scaled_mm(a8, b8, one, one, bias=torch.zeros(N, dtype=torch.bfloat16, device="hybrid:0"),
                         out_dtype=torch.float32)


def test_each_call_is_one_record_and_fp4_is_costed():
    x, w = _operands(5)
    qa, qb = quantize(x, "nvfp4"), quantize(w, "nvfp4")
    operands = (qa.packed().to("hybrid:4"), qb.packed().to("hybrid:4").t(),
                _swizzled(qa, torch.float8_e4m3fn).to("hybrid:4"), _swizzled(qb, torch.float8_e4m3fn).to("hybrid:4"))
    interop.reset_timeline()
    torch._scaled_mm(*operands, out_dtype=torch.bfloat16)
    records = [r for r in interop.timeline() if r.kind == "op"]
    assert len(records) == 1 and records[0].op.endswith("_scaled_mm") and records[0].slot == 4
    assert records[0].dtype == "float4_e2m1fn_x2" and records[0].duration_ps > 0
