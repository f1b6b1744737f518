"""`hybrid run`'s outputs survive signals and bad paths: SIGINT, SIGTERM and SIGHUP (what torchrun, Slurm and
Kubernetes send) still write the summary and the report and exit with 128 + the signal; a report path that
cannot be written is refused before the script runs; a report that fails at the end is never half written
and makes the exit status non-zero, after the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support import ROOT

LOOP = """
import sys, time, torch
x = torch.ones(4, device="cuda")
with open("started", "w") as f:
    f.write("1")
while True:
    x = x * 1.0
    time.sleep(0.01)
"""


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    env.pop("LOCAL_RANK", None)
    return env


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _hybrid_run(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "interop.run", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(), cwd=cwd)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stopping_signal_writes_the_summary_and_the_report(tmp_path, sig):
    (tmp_path / "loop.py").write_text(LOOP)
    # As a terminal starts it: the signals at their defaults (a background job of a shell ignores SIGINT, and
    # Python then never raises KeyboardInterrupt); faulthandler dumps its threads if it must be aborted.
    proc = subprocess.Popen([sys.executable, "-m", "interop.run", "--report", "rep", "loop.py"], cwd=tmp_path,
                            env=dict(_env(), PYTHONFAULTHANDLER="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the script did not start"
            time.sleep(0.1)
        proc.send_signal(getattr(signal, sig))
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=60)
            pytest.fail(f"still running 120 s after {sig}; its threads when aborted:\n{err[-8000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert "ops on slots:" in err and f"report written to rep.json and rep.md" in err
    assert err.index("ops on slots:") < err.index("report written")  # the summary first
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["exit_code"] == 128 + getattr(signal, sig)
    assert (tmp_path / "rep.md").read_text().startswith("#")
    if sig != "SIGINT":
        assert f"loop.py stopped by {sig}" in err


@pytest.mark.parametrize("where", ["/proc/hybrid-report", "dir", "missing/rep"])
def test_a_report_path_that_cannot_be_written_is_refused_before_the_script_runs(tmp_path, where):
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "touch.py").write_text("open('ran', 'w').write('1')\n")
    out = _hybrid_run("--report", where, "touch.py", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "hybrid run: error: --report:" in out.stderr
    assert not (tmp_path / "ran").exists()


def test_a_report_that_fails_at_the_end_is_not_half_written_and_fails_the_run(tmp_path):
    # The script turns the Markdown file's path into a directory after the check: the write fails at the end.
    (tmp_path / "sabotage.py").write_text("import os, torch\ntorch.ones(2, device='cuda').sum()\nos.mkdir('rep.md')\n")
    out = _hybrid_run("--report", "rep", "sabotage.py", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "ops on slots:" in out.stderr
    assert "hybrid run: error: the report was not written: --report:" in out.stderr
    assert out.stderr.index("ops on slots:") < out.stderr.index("the report was not written")
    assert not (tmp_path / "rep.json").exists()
    assert sorted(os.listdir(tmp_path)) == ["rep.md", "sabotage.py"]  # no temporary file left behind


def test_the_exit_summary_fits_the_cli_width_and_keeps_every_word():
    # A long script path, rack and device map wrap within 120 columns, continued further in; nothing is cut.
    from devices.text_table import MAX_WIDTH
    from interop.cuda_layer.report import CudaReport

    script = "/home/someone/" + "/".join(["a_rather_long_project_directory"] * 4) + "/train.py"
    rack = "+".join(f"trn3:{n}" for n in range(1, 9)) + "+h100:8"
    device_map = ", ".join(f"cuda:{i} -> hybrid:{i}" for i in range(16))
    report = CudaReport(script=script, rack=rack, device_map=device_map, map_note="", strict=False,
                        modelled={"makespan_ms": 1.5})
    summary = report.summary()
    assert max(len(line) for line in summary.splitlines()) <= MAX_WIDTH
    assert summary.splitlines()[1].startswith("    ")  # a continuation, not a new item
    assert "".join(summary.split()) == "".join(
        f"hybrid run: {script} on {rack} ({device_map})CUDA APIs: 0 touched, 0 calls (none)"
        "ops on slots: 0 (0 distinct); default cost estimates: 0 op(s)modelled makespan: 1.500 ms".split())
