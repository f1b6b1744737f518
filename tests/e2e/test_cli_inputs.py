"""The commands' bad values and their outputs (issue 17): 0 is not "not given", a word is not a slot, a factory
must make a model; every output path is checked before the long work, and data is written before pictures."""

from __future__ import annotations

import json
import sys

import pytest

from hybrid_cli import main


def _refused(capsys, argv, *fragments) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.mark.parametrize("argv, fragments", [
    (["whatif", "--model", "llama3-8b", "--rack", "h100:8", "--gbs", "0"],
     ["argument --global-batch/--gbs: expected a positive integer, got '0'"]),
    (["whatif", "--model", "llama3-8b", "--rack", "h100:8", "--seq", "0"],
     ["argument --seq: expected a positive integer, got '0'"]),
    (["whatif", "--model", "llama3-8b", "--rack", "h100:8", "--tp", "-2"],
     ["argument --tp: expected a positive integer, got '-2'"]),
    (["whatif", "--model", "llama3-8b", "--rack", "h100:8", "--kernels", "flash"],
     ["argument --kernels: invalid choice: 'flash' (choose from 'fused', 'eager')"]),
    (["plan", "--batch", "0"], ["argument --global-batch/--batch: expected a positive integer, got '0'"]),
    (["plan", "--microbatches", "0"], ["argument --microbatches: expected a positive integer, got '0'"]),
    (["plan", "--slots", "a,b"], ["argument --slots: expected comma-separated slot indices such as 0,1,4, got 'a,b'"]),
    (["plan", "--run", "-1"], ["argument --run: expected an integer >= 0, got '-1'"]),
    (["numerics", "--steps", "0"], ["argument --steps: expected a positive integer, got '0'"]),
    (["bench", "collectives", "-f", "0"], ["argument -f/--stepfactor: expected a positive integer, got '0'"]),
])
def test_zero_and_garbage_values_are_refused_by_their_option(capsys, argv, fragments):
    _refused(capsys, argv, *fragments)


def test_a_model_factory_that_makes_no_model_is_refused(capsys):
    assert main(["plan", "--model", "os:getcwd"]) == 2
    err = capsys.readouterr().err
    assert "hybrid plan: error: model: os:getcwd() returned str" in err
    assert "expected (model, example_inputs[, example_targets[, loss_fn]])" in err
    assert main(["plan", "--model", "os:sep"]) == 2
    assert "model: os:sep is a str, not a factory" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["plan", "--model", "gpt-tiny", "--json", "{path}"],
    ["plan", "--model", "gpt-tiny", "--plot", "{path}"],
    ["numerics", "--model", "gpt", "--steps", "1", "--recipe", "bf16-sr", "--json", "{path}"],
    ["whatif", "--model", "llama3-8b", "--rack", "h100:8", "--plot", "{path}"],
    ["bench", "ops", "--plot", "{path}"],
])
@pytest.mark.parametrize("where", ["/proc/hybrid-out.json", "missing-folder/out.json", "a-folder"])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(tmp_path, capsys, monkeypatch, command, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-folder").mkdir()
    started = []
    import interop.live.plan_models as plan_models
    import planner

    monkeypatch.setattr(plan_models, "build", lambda *a, **k: started.append("plan") or pytest.fail("ran"))
    monkeypatch.setattr(planner, "whatif", lambda *a, **k: started.append("whatif") or pytest.fail("ran"))
    argv = [arg.replace("{path}", where) for arg in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    option = next(a for a in command if a in ("--json", "--plot"))
    assert f"error: {option}:" in err and not started


def test_numerics_without_its_plotting_package_stops_before_the_run(tmp_path, capsys, monkeypatch):
    data = tmp_path / "drift.json"
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    import interop.numerics.drift as drift

    monkeypatch.setattr(drift, "drift", lambda *a, **k: pytest.fail("the runs started"))
    code = main(["numerics", "--model", "gpt", "--rack", "trn3:1", "--steps", "1", "--recipe", "bf16-sr",
                 "--json", str(data)])
    assert code == 2
    assert "hybrid numerics: needs matplotlib (pip install matplotlib)" in capsys.readouterr().err
    assert not data.exists()


def test_numerics_writes_its_json_before_the_plot_and_a_plot_that_fails_loses_nothing(
        tmp_path, capsys, monkeypatch):
    plot, data = tmp_path / "drift.png", tmp_path / "drift.json"
    from interop.numerics.drift.experiment import DriftReport

    def full_disk(self, path):
        assert data.exists()  # the data is already written when the picture is drawn
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(DriftReport, "plot", full_disk)
    code = main(["numerics", "--model", "gpt", "--rack", "trn3:1", "--steps", "1", "--recipe", "bf16-sr",
                 "--plot", str(plot), "--json", str(data)])
    captured = capsys.readouterr()
    assert code == 1
    assert "hybrid numerics: error: --plot: not drawn: [Errno 28] No space left on device" in captured.err
    assert json.loads(data.read_text())["runs"] and not plot.exists()
    assert f"json: {data}" in captured.out
