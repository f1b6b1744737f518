"""`hybrid serving`: the paper serving command (what it prints, writes and refuses)."""

from __future__ import annotations

import json

import pytest

from hybrid_cli import main


def run(capsys, *argv):
    code = main(["serving", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_one_rack(capsys, tmp_path):
    path = tmp_path / "est.json"
    code, out, _ = run(capsys, "--model", "llama3-8b", "--rack", "h100:8", "--tp", "2", "--isl", "512", "--osl", "64",
                       "--requests", "64", "--concurrency", "8", "--slo-ttft", "500", "--slo-tpot", "50",
                       "--json", str(path))
    assert code == 0
    assert "8 h100 as 4 x (tp 2)" in out and "TTFT (modelled)" in out and "goodput within the SLO" in out
    data = json.loads(path.read_text())
    assert data[0]["parallel"]["colocated"]["tp"] == 2 and data[0]["modelled"] is True


def test_disaggregated_pools(capsys):
    code, out, _ = run(capsys, "--model", "llama3-70b", "--rack", "trn4:8+gb300:8", "--precision", "fp8",
                       "--prefill", "trn4:8:4", "--decode", "gb300:8:2", "--isl", "2000", "--osl", "100",
                       "--requests", "64")
    assert code == 0
    assert "prefill pool" in out and "8 trn4 (projected) as 2 x (tp 4)" in out and "KV transfer per request" in out
    assert "[PROJECTED chip figures]" in out


def test_compare_alone_is_the_demo(capsys):
    # One model on a Trainium rack, a GPU rack and a disaggregated Trn4 -> GB300 hybrid, $/M and J where they exist
    code, out, _ = run(capsys, "--compare")
    assert code == 0
    assert any("trn3:16" in line and "h100:16" in line and "trn4:8+gb300:8" in line for line in out.splitlines())
    assert "prefill pool" in out and "KV transfer per request" in out
    cost = next(line for line in out.splitlines() if line.startswith("$ per million output tokens"))
    joules = next(line for line in out.splitlines() if line.startswith("J per output token"))
    assert cost.count("$") >= 2 and "no price for trn3" in cost  # H100 has a price; Trn3 and Trn4 have none
    assert "J (board power)" in joules and "no board power for trn4" in joules


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10"], "--model, --isl and --osl"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10", "--osl", "5", "--prefill", "h100"],
     "--prefill and --decode: give both"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10", "--osl", "5", "--prefill", "h100",
      "--decode", "h100:4"], "--prefill: expected KIND:CHIPS"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "0", "--osl", "5"], "input_tokens: expected a positive"),
])
def test_bad_arguments_exit_2_naming_them(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err
