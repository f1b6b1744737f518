"""The serving model against published serving results (reference/inference.md, the given rows).

TensorRT-LLM's throughput tables (Llama 3.3 70B, H100 and H200, FP8, TP2), MLPerf Inference v4.1 Llama 2 70B on
8 H100 (Offline, Server), NVIDIA NIM's latency curve (2 H100, concurrency 1 and 25) and the Neuron documentation's
Trainium1 Llama 3 70B rows, each with the configuration it states. Four serving efficiencies per chip family are
fitted on these rows (planner/serving/fitted.py says which rows each was fitted to); other published rows are kept
back by the reviewers to test them. `python -m pytest -s tests/planner/test_serving_golden.py` prints the table."""

from __future__ import annotations

import statistics

import pytest

from planner.serving import fitted, golden


@pytest.fixture(scope="module")
def outcomes():
    out = golden.evaluate()
    print("\n" + golden.table(out))
    return out


def test_given_rows_within_15_percent_median_within_10(outcomes):
    errors = {(o.row.label, k): e for o in outcomes for k, e in o.errors().items()}
    assert len(errors) == 24
    assert all(abs(e) <= 0.15 for e in errors.values()), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.10, errors


def test_mlperf_server_meets_its_latency_constraints(outcomes):
    server = next(o for o in outcomes if o.row.limits)
    assert set(server.limits_met) == {"ttft_p99", "tpot_p99"}
    assert all(ok for _, _, ok in server.limits_met.values()), server.limits_met


def test_every_factor_is_a_named_figure_fitted_on_given_rows():
    assert set(fitted.FITTED) == {"gpu", "trainium"}
    labels = {r.label for r in golden.ROWS}
    for family, eff in fitted.FITTED.items():
        figures = eff.figures()
        assert set(figures) == set(golden.FIT_GRID[family]) == {"gemm", "memory", "attention", "iteration"}
        rows = {r.label for r in golden.FIT_ROWS[family]}
        for fig in figures.values():
            assert fig.status == "calibrated" and "fitted" in fig.source
            named = {label for label in labels if label in fig.source}
            assert named == rows, (family, named)


def test_the_same_factors_serve_every_row_of_a_family():
    # No row carries its own constant: a row holds only what its source states.
    import dataclasses

    assert [f.name for f in dataclasses.fields(golden.GoldenRow)] == [
        "label", "model", "rack", "parallel", "precision", "workload", "published", "source", "limits", "engine"]
    assert fitted.serving_efficiency("h100") is fitted.serving_efficiency("h200") is fitted.FITTED["gpu"]
    assert fitted.serving_efficiency("trn1") is fitted.serving_efficiency("trn3") is fitted.FITTED["trainium"]


@pytest.mark.slow
def test_stored_factors_are_the_fit_optimum():
    # Each stored factor beats its grid neighbours on the family's rows (a coordinate-wise optimum of fit()).
    # Trainium only: its four rows model in about a second, the GPU family's eight in about eight, nine times
    # over; `golden.fit("gpu")` re-derives the GPU factors (it lands on the stored ones).
    family = "trainium"
    stored = {name: fig.value for name, fig in fitted.FITTED[family].figures().items()}
    rows = golden.FIT_ROWS[family]
    best = golden.fit_loss(golden._efficiency(family, stored, rows), rows)
    for name, grid in golden.FIT_GRID[family].items():
        i = grid.index(stored[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(grid):
                trial = dict(stored, **{name: grid[j]})
                assert golden.fit_loss(golden._efficiency(family, trial, rows), rows) >= best - 1e-12, (name, grid[j])


@pytest.mark.parametrize("document", ["README.md", "docs/serving.md"])
def test_the_documents_show_this_table(outcomes, document):
    # The table the README and docs/serving.md print is the one these factors give (regenerate it with -s).
    from tests.support import ROOT

    with open(f"{ROOT}/{document}", encoding="utf-8") as f:
        assert golden.table(outcomes) in f.read()
