"""devices.cost.estimate_kernel: a kernel that is not an ATen op, costed from its own bytes and FLOPs with
the same figures as the ATen ops it replaces (the references here are devices.cost.estimate's)."""

from __future__ import annotations

import pytest

import devices.cost as cost


@pytest.mark.parametrize("kind", ["h100", "b200", "trn2", "trn4"])
def test_a_kernel_moving_an_ops_bytes_costs_what_the_op_costs(kind):
    n = 1 << 24  # large enough that moving the bytes, not launching, sets the time
    op = cost.estimate(kind, "aten::add.Tensor", [(n,), (n,)], "float32")
    kernel = cost.estimate_kernel(kind, "float32", bytes=op.bytes, name="inductor:cpp_fused_add_0")
    assert kernel.seconds == pytest.approx(op.seconds, rel=1e-3)  # the add's vector FLOPs are negligible
    assert kernel.bound == "memory" and kernel.op == "inductor:cpp_fused_add_0" and kernel.category == "kernel"
    assert kernel.projected == op.projected and kernel.sources


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (512, 2048, 1024)])
def test_a_kernels_matmul_flops_are_priced_at_its_equivalent_gemm(m, n, k):
    mm = cost.estimate("h200", "aten::mm", [(m, k), (k, n)], "bfloat16")
    side = round((m * n) ** 0.5)
    square = cost.estimate("h200", "aten::mm", [(side, k), (k, side)], "bfloat16")
    kernel = cost.estimate_kernel("h200", "bfloat16", bytes=mm.bytes, matmul_flops=2 * m * n * k,
                                  matmul_outputs=m * n)
    assert cost.kernel.equivalent_gemm(2 * m * n * k, m * n) == (side, side, k)
    assert kernel.flops == mm.flops
    assert kernel.compute_seconds == pytest.approx(square.compute_seconds, rel=1e-3)
    if m == n:
        assert kernel.seconds == pytest.approx(mm.seconds, rel=1e-9)


def test_bad_figures_are_refused_by_name():
    with pytest.raises(ValueError, match="bytes"):
        cost.estimate_kernel("h100", "float32", bytes=-1)
    with pytest.raises(ValueError, match="matmul_flops"):
        cost.estimate_kernel("h100", "float32", bytes=8, matmul_flops=float("nan"))
    with pytest.raises(ValueError, match="dtype"):
        cost.estimate_kernel("h100", "float99", bytes=8)
    with pytest.raises(ValueError):
        cost.estimate_kernel("h9000", "float32", bytes=8)
