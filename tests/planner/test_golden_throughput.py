"""The step model against NVIDIA Megatron-Bridge's published training throughput (25.11, FP8, seq 8192).

Fit and test: the GPU family's step efficiencies were fitted to the three DGX-H100 rows, GB200's own FP8
GEMM factor to the Llama3 8B DGX-GB200 row; the 70B and 405B DGX-GB200 rows are out of sample. The
same factors serve every row (planner/fitted_efficiency.py lists each with what it was fitted to).
"""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("transformers", reason="the published models are built from transformers configs")

from planner import fitted_efficiency, golden  # noqa: E402


@pytest.fixture(scope="module")
def outcomes():
    out = golden.evaluate()
    print("\n" + golden.table(out))
    return out


def test_every_row_within_20_percent_and_median_within_10(outcomes):
    errors = {o.row.label: o.error for o in outcomes}
    assert all(abs(e) <= 0.20 for e in errors.values()), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.10, errors


def test_out_of_sample_rows_within_20_percent(outcomes):
    tests = [o for o in outcomes if golden._role(o.row) == "test"]
    assert [o.row.label for o in tests] == ["llama3-70b 64 DGX-GB200", "llama3.1-405b 128 DGX-GB200"]
    assert all(abs(o.error) <= 0.20 for o in tests)


def test_ranking_preserved(outcomes):
    published = sorted(outcomes, key=lambda o: o.row.tokens_per_gpu)
    modelled = sorted(outcomes, key=lambda o: o.tokens_per_gpu)
    assert [o.row for o in published] == [o.row for o in modelled]


def test_model_flops_follow_the_published_convention(outcomes):
    # Megatron-Bridge's TFLOP/s/GPU = tokens/s/GPU x its FLOPs per token: our model FLOPs per token agree.
    for o in outcomes:
        published = o.row.tflops_per_gpu / o.row.tokens_per_gpu
        modelled = o.estimate.model_tflops_per_chip / o.tokens_per_gpu
        assert modelled == pytest.approx(published, rel=0.02), o.row.label


def test_no_per_row_constants():
    # One set of factors for the GPU family plus GB200's FP8 GEMMs; each says what it was fitted to (the Trainium
    # family's are tests/planner/test_golden_trainium.py's).
    assert set(fitted_efficiency.FITTED) == {"gpu", "gb200", "trainium"}
    for eff in (fitted_efficiency.GPU, fitted_efficiency.GB200):
        for name, fig in eff.figures().items():
            assert fig.status == "calibrated" and "fitted" in fig.source and "Megatron-Bridge" in fig.source
    assert "DGX-H100" in fitted_efficiency.GPU.matmul_fp8.source and "GB200" not in fitted_efficiency.GPU.matmul_fp8.source
    assert fitted_efficiency.GB200.attention is fitted_efficiency.GPU.attention


def test_fitted_values_are_the_fit_optimum():
    # Each stored GPU-family factor beats its grid neighbours on the fit rows (coordinate-wise optimum).
    fit_rows = [r for r in golden.ROWS if r.system == golden.FIT_SYSTEM]
    stored = {name: fig.value for name, fig in fitted_efficiency.GPU.figures().items()}
    best = golden.fit_loss(stored, fit_rows)
    for name, grid in golden.FIT_GRID.items():
        i = grid.index(stored[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(grid):
                assert golden.fit_loss(dict(stored, **{name: grid[j]}), fit_rows) >= best - 1e-12, (name, grid[j])
