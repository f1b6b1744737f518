"""interop.serving_whatif: the estimate's fields against their definitions, memory and KV arithmetic, pools on the
rack and the transfer model on their route, fleets priced once, bad inputs, and life without torch."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import collectives
import devices
from planner.serving import Engine, ServingEstimate, Workload, serving_whatif
from planner.serving.economics import chip_economics
from planner.serving.model_shape import model_shape
from planner.serving.precision import resolve

from tests.support import ROOT

FIELDS = ["ttft", "tpot", "e2e", "output_tokens_per_second", "output_tokens_per_second_per_chip",
          "requests_per_second", "max_concurrency", "kv_bytes_per_token", "fits", "cost_per_million_output_tokens",
          "joules_per_output_token", "bound", "breakdown", "parallel", "projected", "missing", "goodput",
          "slo_attainment", "kv_transfer"]


@pytest.fixture(scope="module")
def h100():
    return serving_whatif("llama3-8b", "h100:8", workload=Workload(512, 64, requests=200), parallel=dict(tp=2))


def test_fields_and_their_definitions(h100):
    est = h100
    assert [f.name for f in dataclasses.fields(ServingEstimate)] == FIELDS
    assert est.parallel["colocated"]["instances"] == 4 and est.fits and not est.projected
    assert est.output_tokens_per_second_per_chip == pytest.approx(est.output_tokens_per_second / 8)
    assert est.output_tokens_per_second / est.requests_per_second == pytest.approx(64)
    for lat in (est.ttft, est.tpot, est.e2e):
        assert 0 < lat.p50 <= lat.p90 <= lat.p99
    # every request's end to end is at least its TTFT plus 63 tokens at its TPOT
    assert est.e2e.p50 >= est.ttft.p50
    chip = chip_economics("h100")
    tps = est.output_tokens_per_second
    assert est.cost_per_million_output_tokens == pytest.approx(8 * chip.price_per_hour.value / 3600 / tps * 1e6)
    assert est.joules_per_output_token == pytest.approx(8 * chip.power.value / tps)
    assert est.bound == {"prefill": "compute", "decode": "memory"}
    text = est.table()
    assert "TTFT (modelled)" in text and "J per output token (modelled)" in text
    data = json.loads(est.to_json())
    assert data["modelled"] is True and data["ttft"]["p50"] == pytest.approx(est.ttft.p50)


def test_kv_bytes_per_token_is_the_reference_arithmetic():
    # 2 x layers x kv heads x head dim x bytes: 327,680 for a Llama 70B in bf16, 163,840 in fp8 (inference.md)
    for precision, expected in (("bfloat16", 327_680), ("fp8", 163_840)):
        est = serving_whatif("llama3-70b", "h100:8", workload=Workload(128, 16, requests=16),
                             precision=precision, parallel=dict(tp=8))
        assert est.kv_bytes_per_token == expected


def test_kv_cache_is_what_the_memory_leaves():
    # One H100 of an 8B model in bf16: KV = 0.9 x (80 GB - weights - activations); the batch that fits follows.
    est = serving_whatif("llama3-8b", "h100:1", workload=Workload(1000, 1000, requests=64))
    shape = model_shape("llama3-8b")
    entry = est.parallel["colocated"]
    weights = 2 * (shape.gemm_params + 2 * shape.vocab * shape.hidden + shape.extra_params)
    assert entry["weights_gb"] == pytest.approx(weights / 1e9, abs=0.01)
    kv = entry["kv_cache_gb"] * 1e9
    per_sequence = 2 * 32 * 8 * 128 * 2 * 2016  # 2,000 tokens in whole 32-token blocks
    assert est.max_concurrency == pytest.approx(kv / per_sequence, abs=1)


def test_fleet_of_a_million_chips_prices_one_replica(h100):
    one = serving_whatif("llama3-8b", "h100:8", workload=Workload(512, 64, requests=200), parallel=dict(tp=2))
    fleet = serving_whatif("llama3-8b", "h100-node*131072", workload=Workload(512, 64, requests=200 * 131072),
                           parallel=dict(tp=2))
    assert fleet.parallel["colocated"]["chips"] == 1_048_576
    assert fleet.output_tokens_per_second_per_chip == pytest.approx(one.output_tokens_per_second_per_chip, rel=1e-9)
    assert fleet.ttft.p50 == pytest.approx(one.ttft.p50) and fleet.tpot.p99 == pytest.approx(one.tpot.p99)


def test_offline_concurrency_and_rate_arrivals():
    shape = dict(parallel=dict(tp=1))
    offline = serving_whatif("llama3-8b", "h100:1", workload=Workload(256, 32, requests=64), **shape)
    one = serving_whatif("llama3-8b", "h100:1", workload=Workload(256, 32, requests=8, concurrency=1), **shape)
    slow = serving_whatif("llama3-8b", "h100:1", workload=Workload(256, 32, requests=64, rate=0.5), **shape)
    # alone, a request's TPOT is one decode of one sequence; offline they share iterations with 63 others
    assert one.tpot.p50 < offline.tpot.p50
    # requests arriving seconds apart mostly find the engine idle: their TTFT is a lone prefill (a few share
    # their prompt's iteration with another request's decode: slower, never faster)
    assert slow.ttft.p50 == pytest.approx(one.ttft.p50, rel=0.01) and slow.ttft.p99 >= one.ttft.p50
    assert slow.requests_per_second == pytest.approx(0.5, rel=0.3)


def test_disaggregated_pools_move_the_kv_cache_on_their_route():
    wl = Workload(2000, 100, requests=64)
    fused = serving_whatif("llama3-70b", "trn4:8+gb300:8", workload=wl, precision="fp8",
                           prefill=dict(kind="trn4", chips=8, tp=4), decode=dict(kind="gb300", chips=8, tp=2))
    assert fused.projected and fused.parallel["prefill"]["kind"] == "trn4"
    assert fused.parallel["decode"]["instances"] == 4
    # one request's cache over NVLink Fusion: the collectives' transfer model, over two parallel links
    nbytes = math.ceil(2000 * 163_840 / 2)
    expected = collectives.transfer(devices.parse_rack("trn4:8+gb300:8"), 0, 8, nbytes)
    assert expected.fabric == "nvlink-fusion"
    assert fused.kv_transfer.p50 == pytest.approx(expected.seconds, rel=0.01)
    efa = serving_whatif("llama3-70b", "trn3:8+h100:8", workload=wl, precision="fp8",
                         prefill=dict(kind="trn3", chips=8, tp=4), decode=dict(kind="h100", chips=8, tp=2))
    assert collectives.transfer(devices.parse_rack("trn3:8+h100:8"), 0, 8, nbytes).fabric == "efa"
    assert efa.kv_transfer.p50 > 10 * fused.kv_transfer.p50
    # two prefill and four decode instances are two identical units of one and two: one unit is simulated, with
    # half of the requests, and its timeline shows each of them crossing from its prefill to its decode instance
    kv_events = [e for e in fused.events if e.name.startswith("KV ")]
    assert len(kv_events) == 32
    assert {e.track for e in kv_events} == {"prefill 0 (trn4) -> decode 0 (gb300)", "prefill 0 (trn4) -> decode 1 (gb300)"}


def test_a_mixed_rack_without_pools_splits_prefill_and_decode_by_kind():
    est = serving_whatif("llama3-70b", "trn4:8+gb300:8", workload=Workload(1000, 100, requests=32), precision="fp8")
    # prefill on the kind with the higher FP8 peak, decode on the one with more memory bandwidth
    assert est.parallel["prefill"]["kind"] == "trn4" and est.parallel["decode"]["kind"] == "gb300"


def test_missing_prices_and_power_are_none_with_the_reason():
    # Trn4 (projected) has neither a price nor a board power in the catalogue (Trn2 has an estimated power).
    est = serving_whatif("llama3-8b", "trn4:16", workload=Workload(256, 32, requests=32))
    assert est.cost_per_million_output_tokens is None and est.joules_per_output_token is None
    assert "no price for trn4" in est.missing["cost_per_million_output_tokens"]
    assert "no board power for trn4" in est.missing["joules_per_output_token"]


def test_precisions_per_kind():
    assert resolve("fp4", "b200").block_format == "nvfp4" and resolve("fp4", "b200").weight_bytes == 4.5 / 8
    assert resolve("fp4", "trn3").block_format == "mxfp4_e2m1" and resolve("fp4", "trn3").weight_bytes == 4.25 / 8
    assert resolve("fp8", "trn1").gemm_dtype == "float8_e5m2"
    fp4 = serving_whatif("llama3-70b", "b200:8", workload=Workload(1000, 100, requests=64), precision="fp4",
                         parallel=dict(tp=1))
    fp8 = serving_whatif("llama3-70b", "b200:8", workload=Workload(1000, 100, requests=64), precision="fp8",
                         parallel=dict(tp=1))
    assert fp4.parallel["colocated"]["weights_gb"] < 0.6 * fp8.parallel["colocated"]["weights_gb"]
    assert fp4.output_tokens_per_second > fp8.output_tokens_per_second


def test_mixture_of_experts_with_expert_parallelism():
    wl = Workload(512, 64, requests=64)
    ep = serving_whatif("mixtral-8x7b", "h100:8", workload=wl, parallel=dict(tp=1, ep=8))
    assert ep.parallel["colocated"]["ep"] == 8 and ep.parallel["colocated"]["instances"] == 1
    # each chip holds an eighth of the experts (and all of the attention)
    shape = model_shape("mixtral-8x7b")
    experts = sum(g.k * g.n * g.experts for g in shape.gemms if g.experts)
    assert ep.parallel["colocated"]["weights_gb"] < (shape.parameters - experts * 7 / 8) * 2 / 1e9 + 0.1


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="no-such-model"), "model: unknown model 'no-such-model'"),
    (dict(precision="fp4"), "precision: h100 has neither NVFP4 nor MXFP4 .* accepted on h100: bfloat16, fp8"),
    (dict(precision="int3"), "precision: unknown 'int3'"),
    (dict(parallel=dict(tp=3)), "tp: tensor parallelism 3 does not divide the 64 attention heads"),
    (dict(parallel=dict(tp=2, replicas=8)), "parallel: 8 replicas of 2 chips need 16 chips; h100:8 has 8"),
    (dict(parallel=dict(tp=1)), r"parallel: llama3-70b in bfloat16 needs 141.\d GB of weights .* h100 holds 80.0 GB"),
    (dict(parallel=dict(tp=2), workload=Workload(300_000, 10)), "parallel: one sequence of 300,010 tokens needs"),
    (dict(parallel=dict(qq=2)), "parallel: unknown key 'qq'; accepted: tp, pp, ep, replicas"),
    (dict(prefill=dict(kind="trn3", chips=4), decode=dict(kind="h100", chips=4)),
     "prefill: h100:8 has no trn3 chips; it holds 8 h100"),
    (dict(prefill=dict(kind="h100", chips=4, tp=2), decode=dict(kind="h100", chips=8, tp=2)),
     "decode: 8 h100 chips asked; h100:8 has 8, 4 of them in the prefill pool"),
    (dict(prefill=dict(kind="h100", chips=4)), "prefill and decode: give both pools"),
    (dict(slo=dict(ttft=-1)), "slo ttft: expected a positive number"),
    (dict(slo=dict(latency=1)), "slo: unknown key 'latency'"),
    (dict(objective="speed"), "objective: expected 'time' or 'cost'"),
    (dict(workload=(1000, 100)), "workload: expected an interop.Workload"),
    (dict(model="llama3.1-405b", rack="h100:4"), r"model: llama3.1-405b in bfloat16 needs 81\d.\d GB of weights"),
])
def test_bad_inputs_name_the_argument_and_what_fits(kwargs, match):
    args = dict(model="llama3-70b", rack="h100:8", workload=Workload(1000, 100, requests=16))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        serving_whatif(args.pop("model"), args.pop("rack"), **args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(input_tokens=0, output_tokens=5), "input_tokens: expected a positive integer, got 0"),
    (dict(input_tokens=5, output_tokens=-1), "output_tokens: expected a positive integer, got -1"),
    (dict(input_tokens=5, output_tokens=5, rate=0), "rate: expected a positive number"),
    (dict(input_tokens=5, output_tokens=5, concurrency=-2), "concurrency: expected a positive integer"),
    (dict(input_tokens=5, output_tokens=5, requests=0), "requests: expected a positive integer"),
    (dict(input_tokens=5, output_tokens=5, rate=1, concurrency=2), "concurrency and rate: give one"),
    (dict(input_tokens=[(5, 0)]), r"input_tokens\[0\]\[1\]: expected a positive integer"),
    (dict(input_tokens=5, output_tokens=50, max_output_tokens=10), "max_output_tokens: 10 is below"),
])
def test_workload_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Workload(**kwargs)


def test_workload_lengths_and_poisson_arrivals():
    w = Workload([(10, 2), (20, 4)], requests=5)
    assert w.request_lengths() == [(10, 2), (20, 4), (10, 2), (20, 4), (10, 2)]
    r = Workload(10, 2, requests=20_000, rate=4.0)
    gaps = [b - a for a, b in zip(r.arrivals(), r.arrivals()[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.03)  # exponential gaps of mean 1 / rate
    assert r.arrivals() == r.arrivals()  # seeded


def test_plot_and_trace(h100, tmp_path):
    png = h100.plot(tmp_path / "curve.png", concurrencies=[1, 8])
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    trace = json.load(open(h100.export_trace(tmp_path / "trace.json")))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"replica 0 (h100)"}


def test_a_paper_command_imports_no_torch():
    code = (
        "import sys\n"
        "from planner.serving import serving_whatif, Workload\n"
        "serving_whatif('llama3-70b', 'trn4:8+gb300:8', workload=Workload(1000, 100, requests=32), precision='fp8')\n"
        "from hybrid_cli import main\n"
        "main(['serving', '--model', 'llama3-8b', '--rack', 'h100:8', '--isl', '128', '--osl', '16', "
        "'--requests', '32'])\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "TTFT (modelled)" in out.stdout


def test_engine_checks_its_fields():
    with pytest.raises(ValueError, match="kernels: expected one of 'fused', 'eager', got 'jit'"):
        Engine(kernels="jit")
    with pytest.raises(ValueError, match="kv_fraction: expected a share in"):
        Engine(kv_fraction=1.5)
    for bad in (-1e-6, float("nan"), float("inf"), "67us", True):
        with pytest.raises(ValueError, match="host_per_token: expected seconds >= 0"):
            Engine(host_per_token=bad)
    with pytest.raises(ValueError, match="host_per_token: the eager engine"):
        Engine(kernels="eager", chunked_prefill=False, prefill_requests=1, host_per_token=1e-5)


def test_a_frontends_host_time_per_token_floors_every_iteration_and_hides_under_longer_kernels():
    # Engine.host_per_token (NIM's frontend streaming each token, overlapped with the GPU): an iteration takes
    # max(kernels, host_per_token x sampled tokens), in the iteration's price, in decode_pricer's runs (bit for bit)
    # and in the parts a report shows.
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.model_shape import model_shape
    from planner.serving.golden_models import MODELS

    shape, spec, w = model_shape(MODELS["llama3.1-8b"]), spec_of("h100:1"), Workload(200, 200, concurrency=250)
    costs = {}
    for h in (0.0, 1e-4):
        engine = Engine(host_per_token=h)
        cfg = configure(shape, spec, parallel={"tp": 1}, precision="fp8", prefill=None, decode=None, engine=engine,
                        workload=w)
        costs[h] = price_pool(shape, spec, cfg.pools[0], "fp8", engine, w, name="x").cost
    plain, floored = costs[0.0], costs[1e-4]
    for batch in (1, 8, 250):
        kernels = plain.decode(batch, batch * 300, 300)
        assert floored.decode(batch, batch * 300, 300) == max(kernels, 1e-4 * batch)
        assert floored.decode_pricer(batch)(np.array([batch * 300]))[0] == floored.decode(batch, batch * 300, 300)
        parts = floored.parts(0, 0.0, batch, batch * 300, batch)
        assert sum(parts.values()) == pytest.approx(max(sum(plain.parts(0, 0.0, batch, batch * 300, batch).values()),
                                                        1e-4 * batch), rel=1e-9)
    assert floored.decode(1, 300, 300) == plain.decode(1, 300, 300)  # hidden under one sequence's kernels
    assert floored.decode(250, 250 * 300, 300) == pytest.approx(0.025)  # 250 tokens x 100 us: the frontend's
    load = Workload(200, 200, concurrency=250, requests=750)
    slower = serving_whatif("llama3.1-8b", "h100:1", workload=load, parallel={"tp": 1}, precision="fp8",
                            engine=Engine(host_per_token=1e-4))
    faster = serving_whatif("llama3.1-8b", "h100:1", workload=load, parallel={"tp": 1}, precision="fp8")
    assert slower.output_tokens_per_second < faster.output_tokens_per_second
    assert slower.output_tokens_per_second <= 1 / 1e-4  # never more tokens a second than the frontend streams


def test_expert_parallel_ranks_gather_tokens_once_and_schedule_their_own_batches():
    # With ep ranks attention is data parallel: the engines all-gather the ranks' hidden states once per token (in
    # the GEMMs' input precision, with each token's expert ids and weights) and reduce-scatter the BF16 outputs,
    # whatever top-k is; each rank keeps its own batch and token limits (TensorRT-LLM's max_batch_size and
    # max_num_tokens apply per rank under attention DP). Reference: the same pricer called with those sizes.
    from planner.comm import pricer_for
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.run import _limits

    shape, spec, workload = model_shape("mixtral-8x7b"), spec_of("h100:8"), Workload(512, 64, requests=8)
    config = configure(shape, spec, parallel=dict(ep=4), precision="fp8", prefill=None, decode=None,
                       engine=Engine(), workload=workload)
    (pool,) = config.pools
    cost = price_pool(shape, spec, pool, "fp8", config.engine, workload, name="parallel").cost
    tokens, group = 256, list(pool.instance(0))[:4]
    pricer = pricer_for(spec)
    expected = (pricer.seconds("all_gather", tokens * 4 * (shape.hidden * 1.0 + shape.topk * 8), group)
                + pricer.seconds("reduce_scatter", tokens * 4 * shape.hidden * 2, group))
    assert cost._layer_parts(tokens)["communication"] == pytest.approx(expected, rel=1e-12)
    limits = _limits(Engine(max_batch=16, max_num_tokens=1024), pool)
    assert limits == {"max_batch": 64, "budget": 4096, "max_prompts": None, "chunked": True}
    assert _limits(Engine(max_batch=16), dataclasses.replace(pool, ep=1))["max_batch"] == 16


def test_decode_tokens_routed_to_experts_stream_a_share_of_their_weights():
    # The fitted expert_decode figure (planner/serving/fitted.py): each decode token a rank routes to an expert
    # (top-k of them, balanced over the ep ranks) streams that share of the expert's weights at the HBM bandwidth, in
    # every layer; prefill tokens and dense models pay nothing. Reference: the same iteration priced without the
    # figure, plus that arithmetic.
    from planner.serving import fitted
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.iteration import FusedCost

    def costs(model, parallel):
        shape, spec, workload = model_shape(model), spec_of("h100:8"), Workload(512, 64, requests=8)
        config = configure(shape, spec, parallel=parallel, precision="fp8", prefill=None, decode=None,
                           engine=Engine(), workload=workload)
        cost = price_pool(shape, spec, config.pools[0], "fp8", config.engine, workload, name="parallel").cost
        without = FusedCost(shape, cost.kind, cost.precision, cost.placement, cost.pricer,
                            dataclasses.replace(fitted.GPU, expert_decode=None))
        return shape, cost, without

    shape, cost, without = costs("mixtral-8x7b", dict(ep=4))
    share = fitted.GPU.expert_decode.value
    assert 0 < share < 1 and fitted.GPU.expert_decode is fitted.BLACKWELL.expert_decode  # Hopper inherits it
    expert_bytes = sum(g.k * g.n for g in shape.gemms if g.experts) * 1.0  # FP8 weights, ep leaves experts whole
    per_token = shape.layers * shape.topk * share * expert_bytes / devices.chip("h100").hbm_bandwidth.value
    extra = cost.seconds(0, 0.0, 256, 256 * 600, 256) - without.seconds(0, 0.0, 256, 256 * 600, 256)
    assert extra == pytest.approx(256 / 4 * per_token, rel=1e-9)
    # Past one 128-row MMA tile of decode rows an expert (experts.EXPERT_TILE_ROWS) the grouped GEMM runs full tiles:
    # 2,048 sequences over 4 ranks route 1,024 rows to each of the 8 experts, charged as 128 (as 512 sequences would)
    from planner.serving.experts import EXPERT_TILE_ROWS

    assert EXPERT_TILE_ROWS == 128
    capped = cost.seconds(0, 0.0, 2048, 2048 * 600, 2048) - without.seconds(0, 0.0, 2048, 2048 * 600, 2048)
    rows = 8 * EXPERT_TILE_ROWS / shape.topk  # the decode tokens of the instance that fill every expert's tile
    assert capped == pytest.approx(rows / 4 * per_token, rel=1e-6)
    parts = cost.parts(0, 0.0, 256, 256 * 600, 256)
    assert sum(parts.values()) == pytest.approx(cost.seconds(0, 0.0, 256, 256 * 600, 256), rel=0.02)
    assert cost.seconds(512, 512 * 256.5, 0, 0, 1) == without.seconds(512, 512 * 256.5, 0, 0, 1)
    assert fitted.GPU.expert_decode in cost.figures()
    _, dense, dense_without = costs("llama3-8b", dict(tp=2))
    assert dense.seconds(0, 0.0, 64, 64 * 600, 64) == dense_without.seconds(0, 0.0, 64, 64 * 600, 64)
    assert fitted.GPU.expert_decode not in dense.figures()


def test_the_experts_grouped_gemm_streams_every_expert_in_one_kernel():
    # The routed experts run as one grouped-GEMM kernel (TensorRT-LLM's fused_moe: scatter, gemm1, activation, gemm2,
    # finalize): its memory term is one stream of every local expert's bytes, so the per-kernel memory latency that
    # keeps a small transfer below the HBM bandwidth is paid once, not once per expert; its compute is each expert's
    # GEMM at its own shape. Reference: the cost model's kernel estimate of those bytes and its mm estimate of one
    # expert, with the serving factors.
    import devices.cost
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.golden_rows import MODELS
    from planner.serving.iteration import PARTS

    shape, spec, workload = model_shape(MODELS["qwen3-30b-a3b"]), spec_of("h200:1"), Workload(512, 64, requests=8)
    config = configure(shape, spec, parallel=dict(tp=1), precision="fp8", prefill=None, decode=None, engine=Engine(),
                       workload=workload)
    cost = price_pool(shape, spec, config.pools[0], "fp8", config.engine, workload, name="parallel").cost
    p, eff = cost.precision, cost.efficiency
    m, k, n, experts = 6, shape.hidden, 1536, 128  # a decode batch's few rows an expert of gate_up
    parts = dict.fromkeys(PARTS, 0.0)
    cost._gemm(parts, m, k, n, times=experts, grouped=True)
    one = devices.estimate("h200", "aten::mm", [(m, k), (k, n)], p.gemm_dtype)
    true = m * k * p.weight_bytes + k * n * p.weight_bytes + m * n * p.activation_bytes
    stream = devices.cost.estimate_kernel("h200", p.gemm_dtype, bytes=one.bytes * experts).memory_seconds
    memory = stream * true / one.bytes * eff.memory.value
    assert memory > one.compute_seconds * eff.gemm.value * experts  # weight streaming bounds it
    assert parts["memory"] == pytest.approx(memory, rel=1e-12) and parts["compute"] == 0.0
    assert parts["overhead"] == pytest.approx(one.overhead_seconds, rel=1e-12)  # one launch
    separate = dict.fromkeys(PARTS, 0.0)
    cost._gemm(separate, m, k, n, times=experts)  # the same GEMMs as 128 kernels
    assert separate["memory"] > 1.5 * parts["memory"]  # each pays the latency of a 3 MB transfer


def test_the_experts_fp4_gemms_run_at_the_published_moe_layers_rate():
    # fitted.EXPERT_GEMM_FP4 is derived, not fitted: the published NVFP4 MoE layer on one B200 (1117 TFLOPS at 4096
    # tokens, 512 rows an expert) against what the cost model with Blackwell's FP4 GEMM factor gives the same two
    # grouped GEMMs. Reference: that arithmetic on devices.estimate. It applies to the routed experts' FP4 GEMMs only.
    from planner.serving import fitted
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.golden_rows import MODELS
    from planner.serving.iteration import PARTS

    s = fitted.MOE_LAYER_SHAPE
    rows = s["tokens"] * s["topk"] // s["experts"]
    dtype = resolve("fp4", "b200").gemm_dtype
    seconds = flops = 0.0
    for k, n in ((s["hidden"], 2 * s["expert_width"]), (s["expert_width"], s["hidden"])):
        seconds += devices.estimate("b200", "aten::mm", [(rows, k), (k, n)], dtype).compute_seconds * s["experts"]
        flops += 2.0 * rows * k * n * s["experts"]
    modelled = seconds * fitted.BLACKWELL.gemm_fp4.value
    assert fitted.EXPERT_GEMM_FP4.value == pytest.approx(flops / fitted.MOE_LAYER_TFLOPS / modelled, abs=0.005)
    assert fitted.BLACKWELL.expert_gemm_factor("fp4") is fitted.EXPERT_GEMM_FP4
    assert fitted.BLACKWELL.expert_gemm_factor("fp8") is None and fitted.GPU.expert_gemm_factor("fp4") is None

    def cost(model, kind, precision):
        shape, spec, workload = model_shape(model), spec_of(f"{kind}:1"), Workload(512, 64, requests=8)
        config = configure(shape, spec, parallel=dict(tp=1), precision=precision, prefill=None, decode=None,
                           engine=Engine(), workload=workload)
        return price_pool(shape, spec, config.pools[0], precision, config.engine, workload, name="parallel").cost

    moe = cost(MODELS["qwen3-30b-a3b"], "b200", "fp4")
    m, k, n = 512, moe.shape.hidden, 1536  # prefill-sized rows an expert: compute bounds the grouped GEMM
    parts = dict.fromkeys(PARTS, 0.0)
    moe._gemm(parts, m, k, n, times=128, grouped=True)
    one = devices.estimate("b200", "aten::mm", [(m, k), (k, n)], dtype).compute_seconds
    assert parts["compute"] == pytest.approx(one * 128 * 1.7 * fitted.EXPERT_GEMM_FP4.value, rel=1e-12)
    dense = dict.fromkeys(PARTS, 0.0)
    moe._gemm(dense, 4096, k, n)  # a dense (compute-bound) GEMM of the same model keeps the dense rate
    big = devices.estimate("b200", "aten::mm", [(4096, k), (k, n)], dtype).compute_seconds
    assert dense["compute"] == pytest.approx(big * 1.7, rel=1e-12)
    assert fitted.EXPERT_GEMM_FP4 in moe.figures()
    assert fitted.EXPERT_GEMM_FP4 not in cost("llama3-8b", "b200", "fp4").figures()
    assert fitted.EXPERT_GEMM_FP4 not in cost(MODELS["qwen3-30b-a3b"], "h200", "fp8").figures()


def test_hoppers_fp8_experts_at_the_dense_rate_run_no_faster_than_a_published_hopper_grouped_gemm():
    # Hopper's FP8 experts have no grouped-GEMM factor of their own: the dense FP8 rate (docs/serving.md says why).
    # Reference: DeepGEMM's published FP8 grouped GEMMs in the contiguous layout (every expert's tokens in one
    # segment, as a prefill's permuted tokens are), measured on H800 SXM5 (H100 SXM5's tensor-core peaks):
    # deepseek-ai/DeepGEMM README @ 55ab91f72f76 (2025-03-25), "Grouped GEMMs for MoE models (contiguous layout)",
    # groups x rows an expert x N x K -> TFLOPS. The one-kernel grouped GEMM as the serving model prices it on H100
    # reaches 80-100 % of each published rate: it prices the experts' GEMMs no faster than the best published Hopper
    # kernel runs them (85-93 % today), so the H200 rows that come out fast are not fast for their experts' GEMM rate.
    from planner.serving import fitted
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.golden_rows import MODELS
    from planner.serving.iteration import PARTS

    published = {(4, 8192, 4096, 7168): 1346e12, (4, 8192, 7168, 2048): 1214e12,
                 (8, 4096, 4096, 7168): 1346e12, (8, 4096, 7168, 2048): 1214e12}
    shape, spec, workload = model_shape(MODELS["qwen3-30b-a3b"]), spec_of("h100:1"), Workload(512, 64, requests=8)
    config = configure(shape, spec, parallel=dict(tp=1), precision="fp8", prefill=None, decode=None, engine=Engine(),
                       workload=workload)
    cost = price_pool(shape, spec, config.pools[0], "fp8", config.engine, workload, name="parallel").cost
    assert fitted.GPU.expert_gemm_factor("fp8") is None and cost.efficiency is fitted.GPU
    for (groups, m, n, k), rate in published.items():
        parts = dict.fromkeys(PARTS, 0.0)
        cost._gemm(parts, m, k, n, times=groups, grouped=True)
        modelled = 2.0 * groups * m * n * k / sum(parts.values())
        assert 0.8 * rate <= modelled <= rate, (groups, m, n, k, modelled / 1e12)


def test_attention_data_parallel_waits_for_its_busiest_rank():
    # With ep ranks each prompt is one rank's; every layer waits for the busiest rank before the experts' exchange
    # (TensorRT-LLM tech blog 10: the iteration is the slowest rank's). Reference: the same prompt tokens dealt out
    # as one prompt a rank cost the experts' share of the tokens only; one prompt alone costs its rank's dense and
    # attention time in full, so it is far above a quarter of the four-prompt iteration.
    from planner.serving.config import configure, price_pool, spec_of

    shape, spec, workload = model_shape("mixtral-8x7b"), spec_of("h100:8"), Workload(4096, 64, requests=8)
    config = configure(shape, spec, parallel=dict(ep=4), precision="fp8", prefill=None, decode=None,
                       engine=Engine(), workload=workload)
    cost = price_pool(shape, spec, config.pools[0], "fp8", config.engine, workload, name="parallel").cost
    pairs = 4096 * (4096 + 1) / 2
    assert cost.busiest_rank([(4096, 0)]) == (4096, pairs, None)  # no local-attention layers
    # largest first to the least loaded rank: 3000 | 2000 | 1000 + 500 | 1000
    assert cost.busiest_rank([(1000, 0), (3000, 0), (500, 0), (2000, 0), (1000, 0)])[0] == 3000
    one, four = cost.prefill([(4096, 0)], 1), cost.prefill([(4096, 0)] * 4, 4)
    balanced = cost.seconds(4096, pairs, 0, 0, 1)  # the same tokens spread evenly over the ranks
    assert balanced < one < four
    # the busiest rank's dense and attention time is the same in both; only the experts' share differs
    layers = shape.layers
    moe = layers * (sum(cost._expert_parts(4096).values()) - sum(cost._expert_parts(1024).values()))
    head = cost._head(4 / 4) - cost._head(1 / 4)
    assert four - one == pytest.approx(moe + head + cost._edges(4096) - cost._edges(1024), rel=0.02)
    assert cost.busiest_rank([]) is None
    _, spec1 = model_shape("mixtral-8x7b"), spec_of("h100:2")
    single = configure(shape, spec1, parallel=dict(tp=2), precision="fp8", prefill=None, decode=None,
                       engine=Engine(), workload=workload)
    tp_cost = price_pool(shape, spec1, single.pools[0], "fp8", single.engine, workload, name="parallel").cost
    assert tp_cost.busiest_rank([(4096, 0)]) is None
    assert tp_cost.prefill([(4096, 0)], 1) == tp_cost.seconds(4096, pairs, 0, 0, 1)
