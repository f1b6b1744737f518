"""The `hybrid` command line and the prepared scripts run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT


def run(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def test_racks_lists_presets_and_sourced_figures():
    out = run("-m", "hybrid_cli", "racks")
    assert out.returncode == 0, out.stderr
    assert "fusion-default" in out.stdout and "trn3-ultraserver" in out.stdout
    assert "989 TFLOP/s" in out.stdout and "projected" in out.stdout and "published" in out.stdout


def test_racks_fits_a_120_column_terminal_and_its_sources_have_their_own_view():
    from devices import catalogue_rows
    from devices.sources import DOCUMENTS, cited

    for args in ((), ("--kind", "trn4"), ("--kind", "gb200")):
        out = run("-m", "hybrid_cli", "racks", *args)
        assert out.returncode == 0, out.stderr
        wide = [line for line in out.stdout.splitlines() if len(line) > 120]
        assert not wide, f"racks {' '.join(args)}: {len(wide)} lines over 120 columns, e.g. {wide[0]!r}"
    default = run("-m", "hybrid_cli", "racks").stdout
    assert "https://" not in default  # the figures' citations are the sources view's
    row = next(r for r in catalogue_rows(["h100"]) if r["figure"] == "peak.bfloat16")
    numbers = ", ".join(f"[{n}]" for n in cited(row["source"]))
    assert numbers and any(line.startswith("h100") and "peak.bfloat16" in line and numbers in line
                           for line in default.splitlines())
    view = run("-m", "hybrid_cli", "racks", "--sources").stdout
    assert row["source"].split(" (")[0] in view  # the figure's full citation
    for n in cited(row["source"]):
        assert f"[{n}] {DOCUMENTS[n - 1].title}" in view  # and the numbered document
    assert max(len(line) for line in view.splitlines()) <= 120  # a URL longer than that continues on the next line
    longest = max((d.url for d in DOCUMENTS), key=len)
    assert len(longest) > 120 and longest in view.replace("\n    ", "")  # split after a '/', rejoined whole


def test_bench_ops_prints_tables_and_writes_a_plot(tmp_path):
    png = tmp_path / "ops.png"
    out = run("-m", "hybrid_cli", "bench", "ops", "--kinds", "h100,trn4", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    assert "matmul: modelled TFLOP/s" in out.stdout and "trn4*" in out.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_demo_matches_cpu_and_reports_modelled_times():
    # --compile in the same run (one process for both: the suite's time): eager vs compiled per kind.
    out = run("-m", "hybrid_cli", "demo", "--steps", "2", "--compile")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every slot matched the CPU exactly" in out.stdout
    assert "modelled ms/step" in out.stdout and "h100-node" in out.stdout and "trn3:16" in out.stdout
    # What a real Trainium would do differently is listed once at the end, not warned mid-output.
    assert "FidelityWarning" not in out.stderr
    assert "aten::arange.start_out in int64 on trn3: would compute in another format" in out.stdout
    compiled = out.stdout.split("== torch.compile:")[1]
    rows = [line.split() for line in compiled.splitlines() if line.startswith("hybrid:")]
    assert {r[1] for r in rows} == {"trn4*", "b200"}, compiled  # one slot per kind of the default rack
    for row in rows:
        eager_ms, compiled_ms, speedup, dloss = float(row[2]), float(row[4]), row[-2], float(row[-1])
        assert compiled_ms < eager_ms and dloss <= 1e-4
        assert speedup.endswith("x") and abs(float(speedup[:-1]) - eager_ms / compiled_ms) <= 0.011


def test_demo_rejects_a_bad_rack():
    out = run("-m", "hybrid_cli", "demo", "--rack", "h9000:2")
    assert out.returncode == 2 and "h9000" in out.stderr


@pytest.mark.parametrize("script", ["benchmarks/calibrate_gpu.py"])
def test_gpu_calibration_script_dry_run(script, tmp_path):
    out = run(script, "--dry-run", "--repeats", "1", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "calibration.csv").exists() and "ops compared" in (tmp_path / "calibration.md").read_text()


def test_check_collectives_that_checks_nothing_fails_and_says_why():
    out = run("-m", "hybrid_cli", "check", "collectives", "--rack", "fusion-default", "--participants", "9",
              "--no-progress")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "participants" in out.stderr and "9" in out.stderr and "8 slots" in out.stderr
    assert "OK" not in out.stdout
    from hybrid_cli.cmd_check import _counts

    assert _counts("1, 2,9", "--participants", 1) == (1, 2, 9)
    for bad in ("two", "0", "1,,2"):
        with pytest.raises(ValueError, match="--participants"):
            _counts(bad, "--participants", 1)


def test_check_collectives_runs_and_notes_what_it_skipped():
    out = run("-m", "hybrid_cli", "check", "collectives", "--rack", "fusion-default", "--participants", "2,9",
              "--sizes", "3", "--dtypes", "int32", "--no-algorithms", "--no-progress")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "skipped participants 9" in out.stdout and "0 wrong elements" in out.stdout and "OK" in out.stdout


_WITHOUT_TORCH = ("import contextlib, io, json, sys\nfrom hybrid_cli import main\nout = io.StringIO()\n"
                  "with contextlib.redirect_stdout(out):\n    try:\n        code = main(sys.argv[1:])\n"
                  "    except SystemExit as e:\n        code = e.code\n"
                  "print(json.dumps({'code': code or 0, 'printed': len(out.getvalue()),\n"
                  "                  'imported': sorted(m for m in ('torch', 'interop') if m in sys.modules)}))\n")


@pytest.mark.parametrize("argv", [["--help"], ["racks"], ["racks", "--kind", "trn2"],
                                  ["whatif", "--model", "llama3-8b", "--rack", "h100:64", "--tp", "8"]])
def test_paper_commands_run_without_importing_torch_or_the_device(argv, tmp_path):
    env = dict(os.environ, HYBRID_INTEROP_CACHE=str(tmp_path))
    # A first run may trace the model's blocks (that needs torch, on the meta device); the second is warm.
    for attempt in range(2):
        result = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *argv], capture_output=True, text=True,
                                timeout=600, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["code"] == 0, result.stderr[-2000:]
    assert outcome["imported"] == [], f"hybrid {' '.join(argv)} imported {outcome['imported']}"
    assert outcome["printed"] > 200  # it printed its help, listing or estimate


def test_a_command_that_lacks_a_module_says_which_and_how_before_it_starts(monkeypatch, capsys):
    import hybrid_cli
    import hybrid_cli.cmd_numerics as numerics

    monkeypatch.setattr(numerics, "REQUIRES", ("json", "no_such_module_for_this_test"))
    monkeypatch.setattr(numerics, "main", lambda args: pytest.fail("the command started"))
    assert hybrid_cli.main(["numerics", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("hybrid numerics: needs no_such_module_for_this_test "
                           "(pip install no_such_module_for_this_test)")


_THP = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.mark.skipif(not os.path.exists(_THP) or "[never]" in open(_THP).read(),
                    reason="transparent huge pages are off on this machine")
@pytest.mark.parametrize("user_setting, huge", [(None, True), ("0", False)])
def test_hybrid_plan_puts_large_host_blocks_on_huge_pages_unless_the_user_said_otherwise(user_setting, huge):
    # What `hybrid plan` does before torch is imported; a slot's 16 MB block is then on huge pages (the kernel's
    # own count), and THP_MEM_ALLOC_ENABLE=0 from the user keeps it off.
    code = ("from hybrid_cli.cmd_plan import host_huge_pages; host_huge_pages()\n"
            "import torch, interop\n"
            "x = torch.ones(1 << 22, device='hybrid:0')\n"
            "print(next(int(l.split()[1]) for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHuge')))")
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if user_setting is not None:
        env["THP_MEM_ALLOC_ENABLE"] = user_setting
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    huge_kb = int(out.stdout.split()[-1])
    assert (huge_kb >= 2048) == huge, huge_kb
