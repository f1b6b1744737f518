"""Fused attention's head-dim term (devices.cost.efficiency.head_dim_factor) against published kernel figures.

FlashAttention-3's paper (Shah et al., 2024, Fig. 5, H100 SXM5, BF16, non-causal, 16k) publishes both kernels'
forward TFLOP/s at head dims 64, 128 and 256: FlashAttention-3 497 / 661 / 756 and FlashAttention-2 324 / 370 /
(not shown at 16k, so unused). A kernel spends per score its MMA work and one exponential; the curve is fitted at
head dim 128, so a smaller head dim runs further below the MMA rate. These tests read the published ratios, not
the cost model's own numbers."""

from __future__ import annotations

import pytest

import devices
from devices.cost import efficiency as eff
from devices.cost import estimate

SDPA = "aten::_scaled_dot_product_flash_attention"


def _tflops(kind: str, head_dim: int, dtype: str = "bfloat16", keys: int = 16384) -> float:
    e = estimate(kind, SDPA, [(1, 16, keys, head_dim), (1, 16, keys, head_dim), (1, 16, keys, head_dim)], dtype)
    return e.flops / e.compute_seconds / 1e12


def _ratio(rate: float, exp_rate: float, small: int, large: int) -> float:
    """TFLOP/s at ``small`` over TFLOP/s at ``large`` head dim, as the factor gives them (the curve's own rate
    ``rate`` per unit of MMA work)."""
    t = lambda d: 1.0 / eff.head_dim_factor(rate, exp_rate, 4.0 * d, backward=False)  # noqa: E731
    return t(small) / t(large)


def test_the_form_reproduces_flashattention3s_head_dim_64_against_128():
    # FA3 runs its MMA at about the H100's 989 TFLOP/s peak; the exponentials at the 3.9 T/s the paper names
    assert _ratio(989e12, 3.9e12, 64, 128) == pytest.approx(497 / 661, rel=0.02)


def test_the_form_reproduces_flashattention2s_head_dim_64_against_128():
    # FA2 reaches 0.379 of peak at long sequences (the cost model's calibrated curve): its exponentials weigh less
    assert _ratio(0.379 * 989e12, 3.9e12, 64, 128) == pytest.approx(324 / 370, rel=0.03)


def test_head_dim_128_keeps_the_fitted_curve_on_every_kind():
    for kind in devices.kinds():
        p = eff.params_for(kind, devices.chip(kind).family)
        expected = devices.chip(kind).peak_for("bfloat16").value * eff.attention_efficiency(p, 16384, False) / 1e12
        assert _tflops(kind, 128) == pytest.approx(expected, rel=1e-9), kind


def test_smaller_heads_are_slower_per_flop_only_where_the_exponential_rate_is_catalogued():
    for kind in devices.kinds():
        small, curve, large = (_tflops(kind, d) for d in (64, 128, 256))
        if devices.chip(kind).exp_rate is None:  # Trainium: no published ScalarEngine rate, no head-dim term
            assert small == pytest.approx(curve, rel=1e-12) and large == pytest.approx(curve, rel=1e-12), kind
        else:
            assert small < curve < large, kind


def test_fp8_attention_gains_less_than_the_mma_peak_ratio():
    # the FP8 MMA is twice BF16's on H100; the exponentials are not: at head dim 64 FP8 gains less than 2x
    bf16, fp8 = _tflops("h100", 64), _tflops("h100", 64, "float8_e4m3fn")
    assert 1.5 < fp8 / bf16 < 2.0


def test_the_estimate_names_the_exponential_rate_it_used():
    e = estimate("h100", SDPA, [(1, 8, 512, 64)] * 3, "bfloat16")
    assert devices.chip("h100").exp_rate in e.sources
    e = estimate("trn2", SDPA, [(1, 8, 512, 64)] * 3, "bfloat16")
    assert not any(f.unit == "exp/s" for f in e.sources)


def test_backward_uses_its_own_mma_work_per_score():
    # 10 x head dim of MMA work per score backward: at head dim 128 the factor is 1, at 64 above it
    assert eff.head_dim_factor(300e12, 3.9e12, 10.0 * 128, backward=True) == pytest.approx(1.0)
    assert eff.head_dim_factor(300e12, 3.9e12, 10.0 * 64, backward=True) > 1.0
