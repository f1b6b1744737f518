"""interop.whatif: the API, its bad-input paths, heterogeneous racks, the CLI, and life without interop._C."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="what-if models are built from transformers configs")

import devices  # noqa: E402
from planner import Stage, StepConfig, model_blocks, step_model, whatif  # noqa: E402
from planner.decoder_blocks import DecoderBlocks  # noqa: E402

from tests.support import ROOT
FIELDS = ["seconds", "tokens_per_second", "tokens_per_second_per_chip", "model_tflops_per_chip", "mfu",
          "memory_per_chip", "fits", "joules_per_token", "usd_per_million_tokens", "breakdown", "parallel",
          "projected", "result", "model", "rack", "rack_counts", "precision", "advice", "price_basis",
          "usd_per_step", "joules_per_step", "economics", "kernels"]


@pytest.fixture(scope="module")
def small():
    from transformers import LlamaConfig

    return DecoderBlocks(LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
                                     num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False),
                         name="small-llama")


def test_estimate_fields_and_figures(small):
    est = whatif(small, "h100-node*2", parallel={"tp": 2, "pp": 2, "microbatch": 2}, global_batch=64, seq_len=1024)
    assert [f.name for f in dataclasses.fields(est)] == FIELDS
    assert est.parallel["dp"] == 4 and est.parallel["microbatches"] == 8
    assert est.tokens_per_second == pytest.approx(64 * 1024 / est.seconds)
    assert est.tokens_per_second_per_chip == pytest.approx(est.tokens_per_second / 16)
    peak = devices.chip("h100").peak_for("bfloat16").value
    assert est.mfu == pytest.approx(est.model_tflops_per_chip * 1e12 / peak)
    assert sum(est.breakdown.values()) == pytest.approx(est.seconds, rel=1e-6)
    m = est.memory_per_chip
    assert m.total == m.weights + m.gradients + m.optimizer + m.activations and est.fits
    # Energy from board power, dollars from the catalogue's H100 price: both derived from figures we know.
    chip = devices.chip("h100")
    assert est.joules_per_token == pytest.approx(16 * chip.power.value * est.seconds / (64 * 1024))
    assert est.usd_per_million_tokens == pytest.approx(16 * chip.price_per_hour.value / 3600 * est.seconds
                                                      / (64 * 1024) * 1e6)
    assert est.usd_per_step == pytest.approx(16 * chip.prices["on-demand"].value / 3600 * est.seconds)
    assert est.joules_per_step == pytest.approx(16 * chip.power.value * est.seconds)
    assert est.price_basis == "on-demand"
    assert not est.projected
    assert "step time (modelled)" in str(est) and all("modelled" in label for label, _ in est.rows()[4:10])
    rows = dict(est.rows())
    assert rows["cost (modelled)"].endswith("(on-demand; secondary)") and "per M tokens" in rows["cost (modelled)"]
    assert "J per token" in rows["energy (modelled)"] and "(board power; published)" in rows["energy (modelled)"]
    assert rows["step efficiencies"] == "h100: gpu family, fitted on h100 rows"


def test_cost_is_on_one_basis_and_says_why_when_unset(small):
    kwargs = dict(parallel={"tp": 2}, global_batch=16, seq_len=512)
    block = whatif(small, "h100-node", price_basis="capacity-block", **kwargs)
    demand = whatif(small, "h100-node", **kwargs)
    ratio = devices.chip("h100").prices["capacity-block"].value / devices.chip("h100").prices["on-demand"].value
    assert block.usd_per_million_tokens == pytest.approx(demand.usd_per_million_tokens * ratio)
    reserved = whatif(small, "h100-node", price_basis="reserved-effective", **kwargs)
    assert reserved.usd_per_step is None and reserved.usd_per_million_tokens is None
    assert "unset on reserved-effective: h100:" in dict(reserved.rows())["cost (modelled)"]
    trn1 = whatif(small, "trn1-instance", price_basis="reserved-effective", **kwargs)
    assert trn1.usd_per_step == pytest.approx(16 * 8.197 / 16 / 3600 * trn1.seconds)
    assert trn1.joules_per_token is None and "no Trainium (Trn1) board power" in trn1.economics.energy_text()
    searched = whatif(small, "h100-node", parallel="search", global_batch=16, seq_len=512,
                      price_basis="capacity-block")
    assert searched.price_basis == "capacity-block" and searched.usd_per_step == pytest.approx(
        8 * devices.chip("h100").prices["capacity-block"].value / 3600 * searched.seconds)
    with pytest.raises(ValueError, match="price_basis: unknown basis 'spot'"):
        whatif(small, "h100-node", price_basis="spot", **kwargs)


def test_zero_stages_shard_memory_as_documented(small):
    # Mixed precision with Adam: 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master, m, v) bytes per parameter.
    seen = {}
    for zero in (0, 1, 2, 3):
        est = whatif(small, "h100-node", parallel={"zero": zero}, global_batch=8, seq_len=512, recompute="none")
        seen[zero] = est.memory_per_chip
    params = sum(small.profile(i, __import__("planner", fromlist=["Shard"]).Shard(seq_len=512)).params
                 for i in range(len(small)))
    assert seen[0].optimizer == pytest.approx(12 * params, rel=1e-3)
    assert seen[1].optimizer == pytest.approx(12 * params / 8, rel=1e-3) and seen[1].gradients == seen[0].gradients
    assert seen[2].gradients == pytest.approx(2 * params / 8, rel=1e-3)
    assert seen[3].weights == pytest.approx(2 * params / 8, rel=1e-3)


def test_projected_chips_are_labelled(small):
    est = whatif(small, "trn4:4+b200:4", parallel={"tp": 4}, global_batch=16, seq_len=512)
    assert est.projected and "PROJECTED" in str(est)
    assert [s.kind for s in est.result.stages] == ["trn4", "b200"]


def test_bad_parallel_configurations_name_the_dimension(small):
    with pytest.raises(ValueError, match="tp: tensor parallelism 3 does not divide the 8 attention heads"):
        whatif(small, "h100-node", parallel={"tp": 3}, global_batch=8, seq_len=512)
    with pytest.raises(ValueError, match=r"pp: 3 pipeline chunks do not divide the 8 layers of small-llama \(nor 10"):
        whatif(small, "h100-node*3", parallel={"pp": 3}, global_batch=24, seq_len=512)
    with pytest.raises(ValueError, match=r"dp: tp\*cp\*pp\*dp = 2\*5 = 10 chips exceeds the rack's 8"):
        whatif(small, "h100-node", parallel={"tp": 2, "dp": 5}, global_batch=10, seq_len=512)
    with pytest.raises(ValueError, match="global_batch: 10 samples are not a multiple of microbatch x dp = 1 x 8"):
        whatif(small, "h100-node", parallel={"dp": 8}, global_batch=10, seq_len=512)
    with pytest.raises(ValueError, match="tp: tensor parallelism 16 does not divide the 72-slot nvlink domain"):
        whatif("llama3-8b", "gb300-nvl72", parallel={"tp": 16}, global_batch=16, seq_len=512)
    with pytest.raises(ValueError, match="cp: context parallelism 3 does not divide seq_len 512"):
        whatif(small, "h100-node", parallel={"cp": 3, "dp": 2}, global_batch=8, seq_len=512)
    with pytest.raises(ValueError, match="parallel: unknown key 'tensor'; accepted: cp, dp, ep, fsdp"):
        whatif(small, "h100-node", parallel={"tensor": 2}, global_batch=8, seq_len=512)
    with pytest.raises(ValueError, match="vp: the interleaved schedule runs microbatches in groups of pp=2"):
        whatif(small, "h100-node", parallel={"pp": 2, "vp": 2, "dp": 4}, global_batch=12, seq_len=512)
    for bad, message in (({"precision": "fp4"}, "precision: unknown training precision 'fp4'; accepted: bfloat16, fp8"),
                         ({"recompute": "some"}, "recompute: unknown 'some'; accepted: none, selective, full, auto"),
                         ({"optimizer": "lion"}, "optimizer: unknown 'lion'; accepted: adamw, adam, sgd")):
        with pytest.raises(ValueError, match=message):
            whatif(small, "h100-node", global_batch=8, seq_len=512, **bad)


def test_model_that_does_not_fit_says_what_it_needs():
    # 8B replicated (DDP) needs 16 bytes per parameter on every chip: 128 GB of an 80 GB H100.
    est = whatif("llama3-8b", "h100-node", parallel={"dp": 8, "zero": 0}, global_batch=8, seq_len=2048)
    assert not est.fits
    assert est.memory_per_chip.total > est.memory_per_chip.capacity
    assert f"needs {est.memory_per_chip.total / 1e9:,.1f} GB per chip" in est.advice
    assert "the fastest configuration that fits: tp" in est.advice  # on the same 8 chips
    assert "does not fit" in str(est)
    # 70B needs 1.1 TB of weights, gradients and Adam state: no configuration of 8 H100s holds it.
    est = whatif("llama3-70b", "h100-node", parallel={"dp": 8}, global_batch=8, seq_len=2048, recompute="full")
    assert not est.fits
    assert "no configuration of this model fits" in est.advice
    assert "the largest preset that fits these 8 chips (fully sharded): llama2-13b" in est.advice


def test_unknown_model_lists_the_named_models():
    with pytest.raises(ValueError, match="named models: llama3-8b, llama3-70b, llama3.1-405b, mixtral-8x7b, "
                                         "llama3.1-8b, llama3.1-70b, llama2-7b, llama2-13b, llama2-70b, gpt, "
                                         "gpt-tiny, cnn; or a transformers causal-LM model type"):
        whatif("llama-17", "h100-node", global_batch=8, seq_len=512)
    with pytest.raises(ValueError, match="'gpt' .interop.models:GPT. is one of the models `hybrid plan` runs"):
        whatif("gpt", "h100-node", global_batch=8, seq_len=512)


def test_recompute_auto_picks_the_cheapest_that_fits(small):
    roomy = whatif(small, "h100-node", parallel={"dp": 8}, global_batch=8, seq_len=512, recompute="auto")
    assert roomy.parallel["recompute"] == ["none"]
    # A slot of 0.3 GB: the activations must go.
    tight = devices.parse_rack("h100:8")
    tight = dataclasses.replace(tight, groups=(dataclasses.replace(tight.groups[0], capacity=300_000_000),))
    auto = whatif(small, tight, parallel={"dp": 8, "microbatch": 1}, global_batch=64, seq_len=2048)
    none = whatif(small, tight, parallel={"dp": 8, "microbatch": 1}, global_batch=64, seq_len=2048, recompute="none")
    assert auto.fits and not none.fits
    assert auto.parallel["recompute"] != ["none"] and auto.seconds > none.seconds


def test_heterogeneous_stages_priced_per_kind(small):
    # A hand-made split on Trn4 + GB300 over NVLink Fusion: moving layers to the faster stage helps. The per-op
    # cost model alone (calibrated=False): on this tiny model the Trainium family's fitted collective latency per
    # ring step would make the Trn4 stage's tensor parallelism dominate.
    spec = devices.parse_rack("trn4:4+gb300:4")
    config = StepConfig(global_batch=32, seq_len=1024, microbatches=8, precision="bfloat16", calibrated=False)

    def split(k):
        return [Stage(chunks=range(0, k), kind="trn4", slots=(0, 1, 2, 3), tp=4),
                Stage(chunks=range(k, len(small)), kind="gb300", slots=(4, 5, 6, 7), tp=4)]

    times = {k: step_model(small, split(k), spec, config).seconds for k in range(2, 9)}
    per_layer = {}
    for kind in ("trn4", "gb300"):
        r = step_model(small, split(5), spec, config)
        per_layer[kind] = [s for s in r.stages if s.kind == kind][0]
    best = min(times, key=times.get)
    assert 2 < best < 8  # neither stage takes (almost) everything
    assert times[best] < times[2] and times[best] < times[8]
    r = step_model(small, split(best), spec, config)
    assert r.projected and r.stages[0].kind == "trn4" and r.stages[1].memory.capacity == int(
        devices.chip("gb300").hbm_capacity.value)
    # Trn3 UltraServer beside a GB300 NVL72 over EFA: the pipeline send crosses the network.
    wide = devices.parse_rack("trn3:144+gb300:72")
    est = whatif(small, wide, parallel={"tp": 8}, global_batch=216, seq_len=1024)
    assert [s.kind for s in est.result.stages] == ["trn3", "gb300"]
    assert est.parallel["dp"] == [18, 9]


def test_search_finds_a_fitting_configuration(small):
    from planner.search import candidates, search

    spec = devices.parse_rack("h100-node*2")
    found = search(small, spec, global_batch=32, seq_len=1024, progress=False)
    assert found.evaluated == len(found.ranking) >= 1
    assert found.best is not None and found.best.fits
    assert found.candidates == len(candidates(small, spec, global_batch=32, seq_len=1024)) == (
        found.evaluated + found.skipped + found.pruned + len(found.rejected)) > 20
    # The bound prunes nothing that could win: the exhaustive walk finds the same step.
    from planner.estimate import run_config

    exhaustive = []
    for par in candidates(small, spec, global_batch=32, seq_len=1024):
        try:
            result, _ = run_config(small, spec, par, global_batch=32, seq_len=1024, precision="bfloat16",
                                   recompute="auto", optimizer="adamw")
        except ValueError:
            continue
        if all(s.memory.fits for s in result.stages):
            exhaustive.append(result.seconds)
    assert found.best.seconds == pytest.approx(min(exhaustive))


def test_search_with_context_parallel_attention_is_exhaustive(small):
    # 8,192-token sequences on 16 Trn3: CP 1, 2 and 4 are in the space and the fastest layout is context parallel,
    # so the ring's pricing (planner.ring_attention) is what the bound must stay under. Every candidate's compute
    # bound is at most its priced step (else branch and bound could prune a winner) and the search's best is the
    # exhaustive walk's.
    from planner.estimate import run_config
    from planner.search import candidates, compute_bound, search

    spec, step = devices.parse_rack("trn3:16"), dict(global_batch=16, seq_len=8192)
    found = search(small, spec, **step, progress=False)
    fitting = []
    for par in candidates(small, spec, **step):
        try:
            result, _ = run_config(small, spec, par, **step, precision="bfloat16", recompute="auto",
                                   optimizer="adamw")
        except ValueError:
            continue
        bound = compute_bound(small, par, **step, precision="bfloat16", kind="trn3")
        assert bound <= result.seconds * (1 + 1e-12), par
        if all(s.memory.fits for s in result.stages):
            fitting.append((result.seconds, par.cp))
    assert {cp for _, cp in fitting} == {1, 2, 4}
    assert found.best.seconds == min(fitting)[0] and found.best.parallel["cp"] == min(fitting)[1] > 1


def test_profiles_survive_the_process_on_disk(tmp_path, monkeypatch, small):
    from transformers import LlamaConfig

    from planner import Shard, profile_cache

    monkeypatch.setenv("HYBRID_INTEROP_CACHE", str(tmp_path))
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    first = DecoderBlocks(cfg, name="cached").profile(1, Shard(seq_len=128, tp=2))
    assert len(list(tmp_path.rglob("*"))) >= 2
    again = DecoderBlocks(cfg, name="cached").profile(1, Shard(seq_len=128, tp=2))  # a fresh object: from disk
    assert again == first
    monkeypatch.setenv("HYBRID_INTEROP_CACHE", "off")
    assert profile_cache.directory() is None


def _cli(*args, env=None):
    run_env = dict(os.environ, PYTHONPATH=ROOT, HYBRID_INTEROP_CACHE="off", **(env or {}))
    return subprocess.run([sys.executable, "-m", "hybrid_cli", "whatif", *args], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env=run_env)


def test_cli_whatif_compare_and_plot(tmp_path):
    png = tmp_path / "step.png"
    out = _cli("--model", "llama3-8b", "--compare", "h100-node", "gb200-nvl72", "--tp", "8", "--gbs", "64",
               "--seq", "1024", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()
    assert "all figures modelled" in " ".join(head[:2])  # the title wraps at 120 columns
    rack = next(line for line in head if line.startswith("rack"))
    assert "h100-node" in rack and "gb200-nvl72" in rack
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"
    bad = _cli("--model", "llama3-8b", "--rack", "h100-node", "--tp", "3")
    assert bad.returncode == 2 and "tp: tensor parallelism 3 does not divide the 32 attention heads" in bad.stderr


def test_whatif_without_the_extension():
    code = ("import sys; sys.modules['interop._C'] = None\n"
            "import interop, torch\n"
            "assert not hasattr(torch, 'hybrid')\n"
            "est = interop.whatif('llama3-8b', 'h100-node', global_batch=8, seq_len=512)\n"
            "print('seconds', est.seconds)\n"
            "try:\n"
            "    interop.set_rack('h100-node')\n"
            "except RuntimeError as e:\n"
            "    print('error', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT, HYBRID_INTEROP_CACHE="off"))
    assert out.returncode == 0, out.stderr
    seconds = float(out.stdout.split("seconds", 1)[1].split()[0])
    assert math.isfinite(seconds) and seconds > 0
    assert "error interop._C (the hybrid device extension) could not be loaded" in out.stdout
    assert "setup.py build_ext --inplace" in out.stdout


def test_default_configuration_is_not_a_starved_pipeline(small):
    # 64 samples on 1,024 chips: using every chip would need a deep pipeline with one microbatch (mostly
    # bubble). The default is as fast by the compute bound as any plain configuration, on fewer chips, and
    # close to what the search finds with the step model.
    from planner.search import DEFAULT_TOLERANCE, candidates, compute_bound, default_parallel, search

    spec = devices.parse_rack("h100-node*128")
    est = whatif(small, spec, global_batch=64, seq_len=1024)
    assert est.breakdown["bubble"] < est.seconds / 3
    par = default_parallel(small, spec, global_batch=64, seq_len=1024, optimizer="adamw")
    bound = dict(global_batch=64, seq_len=1024, precision="bfloat16", kind="h100")
    plain = candidates(small, spec, global_batch=64, seq_len=1024, vp=(1,), microbatch=(1,), ep=False)
    assert compute_bound(small, par, **bound) <= min(compute_bound(small, c, **bound) for c in plain) * (
        1 + DEFAULT_TOLERANCE)
    found = search(small, spec, global_batch=64, seq_len=1024, progress=False)
    assert est.seconds <= 2 * found.best.seconds


def test_default_configuration_counts_context_parallel_chips():
    # hybrid claims' Trn3 row (llama3-70b, FP8, 1,024 x 8,192 on 144 Trn3; its profiles ship, so no trace): of
    # the plain configurations as fast by the compute bound as any, the default takes the one on the fewest chips,
    # then the least model parallel. A context-parallel group is chips and model parallelism like a TP group: the
    # default once counted neither, took CP4 x DP32 as "32 chips" and CP2 x DP64 as "64" against CP1 x DP128,
    # all 128 chips, and so the most context parallel of them, the slowest priced (1,203 tokens/s per chip against
    # 1,298 and 1,316 before the CP ring pricing). Chips here are the step model's own count (the rack less the
    # idle chips), not the default's arithmetic.
    from planner.search import DEFAULT_HEADROOM, DEFAULT_TOLERANCE, _static_bytes, candidates, compute_bound

    blocks = model_blocks("llama3-70b", kernels="fused")
    spec = devices.parse_rack("trn3-ultraserver")
    step = dict(global_batch=1024, seq_len=8192)
    capacity = spec.slot(0).capacity
    plain = [c for c in candidates(blocks, spec, **step, vp=(1,), microbatch=(1,), ep=False)
             if _static_bytes(blocks, c, 8192, "adamw") <= DEFAULT_HEADROOM * capacity]
    bound = {c: compute_bound(blocks, c, **step, precision="fp8", kind="trn3") for c in plain}
    near = [c for c in plain if bound[c] <= min(bound.values()) * (1 + DEFAULT_TOLERANCE)]
    assert any(c.cp > 1 for c in near) and any(c.cp == 1 for c in near)  # the case has the choice

    def used(parallel: dict) -> tuple[int, int]:
        est = whatif(blocks, spec, parallel=parallel, **step, precision="fp8")
        return len(spec) - est.parallel["idle_chips"], est.parallel["tp"] * est.parallel["cp"] * est.parallel["pp"]

    chosen = whatif(blocks, spec, **step, precision="fp8").parallel
    same = [c for c in near if c.fsdp == chosen["fsdp"]]
    options = [used(dict(tp=c.tp, pp=c.pp, cp=c.cp, dp=c.dp, fsdp=c.fsdp)) for c in same]
    assert used({k: chosen[k] for k in ("tp", "pp", "cp", "dp", "fsdp")}) == min(options)


def test_compare_table_fits_120_columns_and_never_cuts_a_cell(small):
    from collections import Counter

    from planner.report import compare_table

    a = whatif(small, "h100-node", parallel={"tp": 2}, global_batch=8, seq_len=512)
    b = whatif(small, "trn3:8+h100:8", parallel={"tp": 2}, global_batch=48, seq_len=512)
    for width, blocks in ((None, 1), (36, 2)):  # 36 columns: the racks follow one under the other
        text = compare_table([a, b], width=width)
        assert max(len(line) for line in text.splitlines()) <= (width or 120)
        assert text.count("\n\n") == blocks - 1
        words = Counter(text.split())
        for est in (a, b):  # every word of every figure, as often as the rows hold it
            assert not Counter(w for _, value in est.rows() for w in value.split()) - words
    for est in (a, b):  # one estimate alone, as `hybrid whatif --rack` prints it
        text = str(est)
        assert max(len(line) for line in text.splitlines()) <= 120
        assert Counter(text.split()) == Counter(w for row in est.rows() for part in row for w in part.split())
