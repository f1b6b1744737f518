"""The drift report: a real training run per slot and recipe against float32 on the CPU, with the
recipes a kind cannot run skipped (or refused with --strict), and `hybrid numerics` printing the
table and writing the plot."""

from __future__ import annotations

import json
import math

import pytest

from interop.numerics.drift import DriftConfig, drift, supported
from interop.numerics.drift.recipes import RECIPES


@pytest.fixture(scope="module")
def report():
    return drift(DriftConfig(model="gpt", rack="trn3:1+b200:1", steps=4,
                             recipes=("bf16", "bf16-sr", "fp8-delayed", "mxfp8", "nvfp4")))


def test_runs_and_skips_follow_the_kinds(report):
    ran = {(r.kind, r.recipe) for r in report.runs}
    assert ran == {("trn3", "bf16"), ("trn3", "bf16-sr"), ("trn3", "fp8-delayed"), ("trn3", "mxfp8"),
                   ("b200", "bf16"), ("b200", "fp8-delayed"), ("b200", "mxfp8"), ("b200", "nvfp4")}
    skipped = {(s.kind, s.recipe): s.reason for s in report.skipped}
    assert "conversion instructions" in skipped[("b200", "bf16-sr")]
    assert "has no nvfp4" in skipped[("trn3", "nvfp4")]
    rules = {(r.kind, r.recipe): r.scale_rule for r in report.runs}
    assert rules[("trn3", "mxfp8")] == "trn3" and rules[("b200", "mxfp8")] == "rceil"


def test_figures_are_real_and_consistent(report):
    ref = report.reference.losses
    assert len(ref) == 4 and all(math.isfinite(v) for v in ref) and ref[-1] < ref[0]  # it trains
    runs = {(r.kind, r.recipe): r for r in report.runs}
    # BF16 rounds to nearest on both kinds: identical runs (same seed, same data, same numerics)
    assert runs[("trn3", "bf16")].losses == runs[("b200", "bf16")].losses
    assert runs[("trn3", "bf16-sr")].losses != runs[("trn3", "bf16")].losses
    assert runs[("trn3", "bf16-sr")].rounded_elements > 0 and runs[("trn3", "bf16")].rounded_elements == 0
    # the first step's gradients are compared on identical weights: small but non-zero errors
    for run in report.runs:
        assert run.grad_errors and all(0 < e < 1 for e in run.grad_errors.values()), (run.kind, run.recipe)
    # FP4 loses more than FP8: more underflow, larger gradient error
    nvfp4, mxfp8 = runs[("b200", "nvfp4")], runs[("b200", "mxfp8")]
    assert nvfp4.underflow > mxfp8.underflow and max(nvfp4.grad_errors.values()) > max(mxfp8.grad_errors.values())
    rows = report.rows()
    assert all(r["final_delta"] == pytest.approx(r["final_loss"] - ref[-1]) for r in rows)


def test_plot_and_table(report, tmp_path):
    table = report.table()
    assert "float32 CPU reference final loss" in table and "skipped: hybrid:1 b200 bf16-sr" in table
    path = report.plot(str(tmp_path / "drift.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_strict_refuses_an_unsupported_recipe():
    import interop

    before = interop.current_rack()
    with pytest.raises(ValueError, match=r"recipe: nvfp4 is not supported on trn3 \(hybrid:0\): trn3 has no nvfp4.*"
                                         r"supported recipes there: bf16, bf16-sr"):
        drift(DriftConfig(model="gpt", rack="trn3:1", steps=1, recipes=("nvfp4",), strict=True))
    assert interop.current_rack() is before  # a failed report leaves the rack it found
    with pytest.raises(ValueError, match=r"recipe: unknown recipe 'fp16'; accepted: bf16, bf16-sr"):
        drift(DriftConfig(model="gpt", rack="trn3:1", steps=1, recipes=("fp16",)))


def test_support_matrix():
    assert supported(RECIPES["bf16-sr"], "trn2")[0] and not supported(RECIPES["bf16-sr"], "h100")[0]
    assert not supported(RECIPES["fp8-current"], "trn2")[0]  # trn2 has no float8_e4m3fn
    assert supported(RECIPES["fp8-current"], "h100")[0] and not supported(RECIPES["mxfp8"], "h100")[0]


def test_cli_gpt2(tmp_path, capsys):
    from hybrid_cli import main

    plot, data = tmp_path / "drift.png", tmp_path / "drift.json"
    code = main(["numerics", "--model", "gpt2", "--rack", "trn3:1+b200:1", "--steps", "2", "--recipe", "bf16-sr,mxfp8",
                 "--plot", str(plot), "--json", str(data)])
    out = capsys.readouterr().out
    assert code == 0 and "drift of gpt2 over 2 steps on trn3:1+b200:1" in out and f"plot: {plot}" in out
    assert plot.stat().st_size > 10_000
    doc = json.loads(data.read_text())
    assert {(r["kind"], r["recipe"]) for r in doc["runs"]} == {("trn3", "bf16-sr"), ("trn3", "mxfp8"), ("b200", "mxfp8")}
    assert len(doc["reference"]) == 2
    assert main(["numerics", "--rack", "trn3:1", "--steps", "1", "--recipe", "nvfp4", "--strict", "--model", "gpt"]) == 2
