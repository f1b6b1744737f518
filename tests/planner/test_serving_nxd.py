"""NxD Inference's engine in the serving model: its MoE dispatch (neuronx-distributed's ExpertMLPs rules), its static
decode graph, the fitted entry its Trainium kinds take, and the flags that ask for them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.comm import pricer_for
from planner.serving import Engine, Workload, serving_whatif
from planner.serving import fitted
from planner.serving.config import spec_of
from planner.serving.engine import NXD_MOE_BLOCK
from planner.serving.golden_models import MODELS
from planner.serving.iteration import FusedCost, Placement
from planner.serving.model_shape import model_shape
from planner.serving.precision import resolve


def _cost(nxd: bool, static=None, kind: str = "trn2") -> FusedCost:
    shape = model_shape(MODELS["qwen3-30b-a3b"])
    return FusedCost(shape, kind, resolve("bfloat16", kind), Placement(list(range(1)), 1, 1, 1),
                     pricer_for(spec_of(f"{kind}:1")), calibrated=False, nxd_inference=nxd, static_decode=static)


def _expert_gemms(cost: FusedCost, tokens: int, generation: bool) -> set:
    """The (rows, GEMMs) of the routed experts' grouped GEMMs one layer of ``tokens`` tokens runs."""
    calls = set()
    real = cost._gemm

    def record(parts, m, k, n, times=1, quantized=True, grouped=False):
        if grouped:
            calls.add((m, times))
        real(parts, m, k, n, times=times, quantized=quantized, grouped=grouped)

    cost._gemm = record
    cost._expert_parts(tokens, generation)
    return calls


@pytest.mark.parametrize("tokens, generation, expected", [
    # Qwen3 30B A3B: 128 experts, top 8. Token generation: below one pair an expert, selective loading (a GEMM row
    # and its expert's weights per routed pair); from one pair an expert (16 x 8 = 128), every expert over every token.
    (1, True, (1, 8)), (15, True, (1, 120)), (16, True, (16, 128)), (64, True, (64, 128)),
    # Context encoding: selective loading below one pair an expert, every expert below one block of pairs
    # (63 x 8 = 504 < 512), then the blockwise kernel's ceil((pairs - 127) / 512) + 127 blocks of 512 tokens.
    (15, False, (1, 120)), (63, False, (63, 128)), (64, False, (NXD_MOE_BLOCK, 128)),
    (4096, False, (NXD_MOE_BLOCK, math.ceil((4096 * 8 - 127) / 512) + 127)),
])
def test_experts_dispatch_as_nxd_expert_mlps_does(tokens, generation, expected):
    assert _expert_gemms(_cost(True), tokens, generation) == {expected}


def test_token_generation_under_expert_parallelism_runs_every_local_expert():
    # NxD raises "Selective Loading with Expert parallelism is not supported in token generation": every one of a
    # rank's 64 experts runs the instance's 2 tokens (1 a rank), where one rank alone would load 8 pairs' experts
    shape = model_shape(MODELS["qwen3-30b-a3b"])
    cost = FusedCost(shape, "trn2", resolve("bfloat16", "trn2"), Placement(list(range(2)), 1, 2, 1),
                     pricer_for(spec_of("trn2:2")), calibrated=False, nxd_inference=True)
    assert _expert_gemms(cost, 1, True) == {(2, 64)}
    assert _expert_gemms(cost, 1, False) == {(1, 8)}  # a prompt's few tokens still load their pairs' experts


def test_the_gpu_engines_grouped_gemm_is_unchanged():
    # The grouped GEMM runs each expert the tokens reach once, its rows the pairs shared among them.
    assert _expert_gemms(_cost(False), 1, True) == {(1, 8)}
    hit = 128 * (1 - (1 - 8 / 128) ** 4096)
    assert _expert_gemms(_cost(False), 4096, False) == {(math.ceil(4096 * 8 / hit), math.ceil(hit))}


def test_selective_loading_streams_an_experts_weights_per_routed_pair():
    # Memory-bound decode: each added token's top-8 pairs stream 8 more experts' weights (the 48 layers are all MoE).
    # From one pair an expert, every expert's weights once, whatever the batch (compute stays below the stream),
    # never faster than the HBM's peak.
    cost = _cost(True)
    whole = cost._expert_parts(16, generation=True)["memory"]
    assert whole == pytest.approx(cost._expert_parts(32, generation=True)["memory"], rel=0.03)  # + activations
    assert 128 * cost._expert_weight_seconds() <= whole <= 1.25 * 128 * cost._expert_weight_seconds()
    step = cost._expert_parts(3, generation=True)["memory"] - cost._expert_parts(2, generation=True)["memory"]
    later = cost._expert_parts(11, generation=True)["memory"] - cost._expert_parts(10, generation=True)["memory"]
    assert later == pytest.approx(step, rel=1e-3)  # one stream of each pair's expert: linear in the pairs
    assert step == pytest.approx(whole * 8 / 128, rel=0.05)  # the whole stream's fixed latency aside


def test_a_static_decode_graph_runs_its_whole_batch_over_its_compiled_length():
    # optimum-neuron without bucketing: every step is the compiled batch of 16 over 4,096 tokens a line, whatever runs.
    static, plain = _cost(True, static=(16, 4096)), _cost(True)
    expected = plain.seconds(0, 0.0, 16, 16 * 4096, 1)
    assert static.decode(1, 100, 0) == expected
    assert static.seconds(0, 0.0, 3, 5000, 1) == expected
    assert static.decode_pricer(1)(np.array([100, 101, 102])) == [expected] * 3
    assert static.parts(0, 0.0, 1, 100, 1) == plain.parts(0, 0.0, 16, 16 * 4096, 1)
    # a prompt's iteration is not the decode graph
    assert static.seconds(512, 512 * 513 / 2, 0, 0, 1) == plain.seconds(512, 512 * 513 / 2, 0, 0, 1)
    with pytest.raises(ValueError, match="kv_tokens"):
        static.decode_pricer(1)(np.array([], dtype=np.int64))


def test_trainium_under_nxd_inference_takes_the_entry_fitted_under_it():
    trn1 = fitted.serving_efficiency("trn1", nxd_inference=True)
    assert trn1 is fitted.FITTED[fitted.NXD_ENTRY] and trn1.inherited("trn1")
    assert trn1.label("trn1") == "inherited from the trn2 entry (fitted on trn2 rows)"
    assert fitted.serving_efficiency("trn1") is fitted.TRAINIUM
    assert fitted.serving_efficiency("trn2", nxd_inference=True) is fitted.TRN2
    assert fitted.serving_efficiency("h100", nxd_inference=True) is fitted.serving_efficiency("h100")


@pytest.mark.parametrize("kwargs, match", [
    (dict(static_decode=4096), "static_decode: a compiled graph has a batch; give max_batch"),
    (dict(max_batch=8, static_decode=0), "static_decode: expected a positive compiled sequence length"),
    (dict(max_batch=8, static_decode=True), "static_decode: expected a positive compiled sequence length"),
    (dict(nxd_inference="yes"), "nxd_inference: expected True, False or None"),
    (dict(kernels="eager", nxd_inference=True), "static_decode, nxd_inference: the eager engine"),
    (dict(kernels="eager", max_batch=2, static_decode=64), "static_decode, nxd_inference: the eager engine"),
    (dict(kernels="eager"), r"kernels: the eager engine \(interop.serve's\) prefills one whole prompt per iteration; "
                            r"give chunked_prefill=False and prefill_requests=1, or use Engine.eager"),
])
def test_engine_refuses_bad_nxd_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Engine(**kwargs)


def test_the_estimate_names_the_nxd_engine_and_its_static_graph():
    engine = Engine(max_batch=4, nxd_inference=True, static_decode=1024)
    est = serving_whatif(MODELS["qwen3-30b-a3b"], "trn2:1", workload=Workload(256, 16, concurrency=1, requests=2),
                         engine=engine)
    text = " ".join(str(est).split())
    assert "NxD Inference's models on trn2" in text and "a static decode graph (4 lines over 1,024 cached tokens each" in text
    assert est.parallel["nxd_inference"] == ["trn2"] and est.parallel["static_decode"] == 1024
    # one request at a time, yet every step is the compiled batch's: the same TPOT at another prompt length
    other = serving_whatif(MODELS["qwen3-30b-a3b"], "trn2:1", workload=Workload(64, 16, concurrency=1, requests=2),
                           engine=engine)
    assert other.tpot.p50 == pytest.approx(est.tpot.p50, rel=1e-9)


def test_a_static_decode_graph_must_hold_its_sequences_and_its_cache():
    model = MODELS["qwen3-30b-a3b"]
    with pytest.raises(ValueError, match="static_decode: a prompt of 2,000 tokens exceeds the 1,024 tokens"):
        serving_whatif(model, "trn2:1", workload=Workload(2000, 100, requests=2),
                       engine=Engine(max_batch=4, nxd_inference=True, static_decode=1024))
    # 98,304 B a token on one chip: 1,024 lines of 4,096 tokens are 412 GB, far past a Trn2's 96 GB
    with pytest.raises(ValueError, match=r"static_decode: the decode graph's cache, 1,024 lines of 4,096 tokens, "
                                         r"needs 412\.32 GB per chip; trn2 has"):
        serving_whatif(model, "trn2:1", workload=Workload(1000, 100, requests=2),
                       engine=Engine(max_batch=1024, nxd_inference=True, static_decode=4096))


def test_trainium_pools_run_nxd_inference_by_default_and_gpu_pools_do_not():
    # Every serving stack on Trainium runs NxD Inference's models, so a what-if's default engine does there.
    engine = Engine()
    assert engine.nxd_inference is None and engine.nxd_for("trn2") and engine.nxd_for("trn1")
    assert not engine.nxd_for("h100") and not engine.nxd_for("b200")
    assert not Engine(nxd_inference=False).nxd_for("trn2") and Engine(nxd_inference=True).nxd_for("h100")
    assert not Engine.eager().nxd_for("trn2")
    model, work = MODELS["qwen3-30b-a3b"], Workload(512, 64, concurrency=4, requests=8)
    auto = serving_whatif(model, "trn2:1", workload=work)
    assert auto.tpot.p50 == serving_whatif(model, "trn2:1", workload=work, engine=Engine(nxd_inference=True)).tpot.p50
    gpu_style = serving_whatif(model, "trn2:1", workload=work, engine=Engine(nxd_inference=False))
    assert auto.parallel["nxd_inference"] == ["trn2"] and gpu_style.parallel["nxd_inference"] == []
    # 4 x top-8 = 32 pairs of 128 experts: 32 selective loads a layer where the grouped GEMM streams the ~29 distinct
    # experts the pairs reach, once
    assert auto.tpot.p50 > gpu_style.tpot.p50
    mixed = serving_whatif(model, "trn2:1+h100:1", workload=work, prefill=dict(kind="trn2", chips=1),
                           decode=dict(kind="h100", chips=1))
    assert mixed.parallel["nxd_inference"] == ["trn2"]
