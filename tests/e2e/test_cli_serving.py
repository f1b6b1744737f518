"""`hybrid serving`: the paper serving command (what it prints, writes and refuses)."""

from __future__ import annotations

import json
import re

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
    lines = out.splitlines()

    def row(label: str) -> str:  # a row with the lines its cells wrap onto (those under a blank label)
        at = next(i for i, line in enumerate(lines) if line.startswith(label))
        end = next(i for i in range(at + 1, len(lines)) if not lines[i].startswith(" "))
        return " ".join(lines[at:end])

    cost, joules = row("$ per million output tokens"), row("J per output token")
    # H100 has a price; Trn3 and Trn4 have none (the words of a wrapped cell: one space or a line's end apart)
    assert cost.count("$") >= 2 and re.search(r"no\s+price\s+for\s+trn3", cost)
    assert "J (board power)" in joules and re.search(r"no\s+board\s+power\s+for\s+trn4", joules)


def test_one_estimate_fits_120_columns_and_keeps_every_figure(capsys):
    from collections import Counter

    from planner.serving import Workload, serving_whatif

    code, out, _ = run(capsys, "--model", "llama3-70b", "--rack", "h100:2", "--tp", "2", "--precision", "fp8",
                       "--isl", "1000", "--osl", "1000", "--requests", "64")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 120
    est = serving_whatif("llama3-70b", "h100:2", workload=Workload(1000, 1000, requests=64), parallel={"tp": 2},
                         precision="fp8")
    assert not Counter(w for _, value in est.rows() for w in value.split()) - Counter(out.split())


def test_compare_fits_120_columns_and_keeps_every_figure(capsys):
    """The demo's table was 224 columns wide and cut its cells at 60 characters ("weights 72.7 GB + KV cache 72")."""
    from collections import Counter

    from planner.serving import Workload, serving_whatif
    from hybrid_cli.cmd_serving import DEMO, DEMO_RACKS

    code, out, _ = run(capsys, "--compare")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 120
    words = Counter(out.split())
    workload = Workload(DEMO["isl"], DEMO["osl"], requests=DEMO["requests"])
    for rack in DEMO_RACKS:
        est = serving_whatif(DEMO["model"], rack, workload=workload, precision=DEMO["precision"])
        assert not Counter(w for _, value in est.rows() for w in value.split()) - words, rack


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10"], "--model, --isl and --osl"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10", "--osl", "5", "--prefill", "h100"],
     "--prefill and --decode: give both"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10", "--osl", "5", "--prefill", "h100",
      "--decode", "h100:4"], "--prefill: expected KIND:CHIPS"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "0", "--osl", "5"], "input_tokens: expected a positive"),
    (["--model", "llama3-8b", "--rack", "h100:8", "--isl", "10", "--osl", "5", "--precision", "int3"],
     "precision: unknown 'int3'"),
    (["--model", "mixtral-8x7b", "--rack", "h100:8", "--isl", "10", "--osl", "5", "--precision",
      "bfloat16,experts=int4"], "precision experts=: unknown expert weights 'int4'"),
])
def test_bad_arguments_exit_2_naming_them(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_a_mixed_checkpoint_precision_is_served_as_the_what_if_serves_it(capsys):
    from planner.serving import Workload, serving_whatif

    mixed = "bfloat16,experts=mxfp4/fp8,kv=fp8"
    code, out, _ = run(capsys, "--model", "mixtral-8x7b", "--rack", "b200:1", "--precision", mixed,
                       "--isl", "512", "--osl", "64", "--requests", "32")
    assert code == 0
    est = serving_whatif("mixtral-8x7b", "b200:1", workload=Workload(512, 64, requests=32), precision=mixed)
    assert f"{est.output_tokens_per_second:,.0f}" in out


def test_head_padding_takes_a_tp_that_does_not_cut_the_heads(capsys):
    # Llama 3 8B's 32 heads on 7 Trn2 chips (28 NeuronCores): refused without padding, naming the flag; with it the
    # heads are padded to 56 (and the 8 kv heads, which 28 neither divides nor is divided by, made 56), as NxD does
    argv = ["--model", "llama3-8b", "--rack", "trn2:7", "--tp", "7", "--isl", "256", "--osl", "16", "--requests", "4"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "does not divide the 32 attention heads" in err and "--head-padding" in err
    code, out, _ = run(capsys, *argv, "--head-padding")
    assert code == 0 and "7 trn2 as 1 x (tp 7)" in out


def test_nxd_inference_and_a_static_decode_graph(capsys, tmp_path):
    # optimum-neuron's way on Trainium1: NxD Inference's models (the entry fitted under it, inherited from trn2) and a
    # decode graph compiled for 8 lines of 1,024 tokens; one request at a time still pays the whole graph every step.
    argv = ["--model", "mixtral-8x7b", "--rack", "trn1:16", "--tp", "16", "--isl", "256", "--osl", "16",
            "--requests", "2", "--concurrency", "1"]
    path = tmp_path / "est.json"
    code, out, _ = run(capsys, *argv, "--max-batch", "8", "--static-decode", "1024", "--json", str(path))
    assert code == 0 and "NxD Inference's models on trn1" in " ".join(out.split())  # by default on Trainium
    static = json.loads(path.read_text())[0]
    assert static["parallel"]["nxd_inference"] == ["trn1"] and static["parallel"]["static_decode"] == 1024
    code, _, _ = run(capsys, *argv, "--max-batch", "8", "--nxd-inference", "on", "--json", str(path))
    paged = json.loads(path.read_text())[0]
    assert code == 0 and static["tpot"]["p50"] > paged["tpot"]["p50"]
    code, _, err = run(capsys, *argv, "--static-decode", "1024")
    assert code == 2 and "static_decode: a compiled graph has a batch; give max_batch" in err
    code, out, _ = run(capsys, *argv, "--nxd-inference", "off")
    assert code == 0 and "NxD Inference" not in out


def test_serving_cli_takes_a_frontends_host_time_per_token(capsys, tmp_path):
    # --host-per-token US: Engine.host_per_token in microseconds, named on the estimate's engine line; a bad value is
    # an error naming it.
    argv = ["--model", "llama3.1-8b", "--rack", "h100:1", "--precision", "fp8", "--isl", "200", "--osl", "50",
            "--requests", "200", "--concurrency", "100"]
    path = tmp_path / "est.json"
    code, out, _ = run(capsys, *argv, "--host-per-token", "200", "--json", str(path))
    assert code == 0 and "200 us of host time per streamed token" in " ".join(out.split())
    slow = json.loads(path.read_text())[0]
    assert slow["parallel"]["host_per_token"] == pytest.approx(2e-4)
    code, _, _ = run(capsys, *argv, "--json", str(path))
    plain = json.loads(path.read_text())[0]
    assert code == 0 and plain["parallel"]["host_per_token"] == 0.0
    assert slow["output_tokens_per_second"] < plain["output_tokens_per_second"]
    assert slow["output_tokens_per_second"] <= 1 / 2e-4  # the frontend streams at most 5,000 tokens a second
    code, _, err = run(capsys, *argv, "--host-per-token", "-5")
    assert code == 2 and "host_per_token: expected seconds >= 0" in err
