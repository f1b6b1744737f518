"""The SLO search: its answer meets the objective and beats every configuration it considered that does."""

from __future__ import annotations

import pytest

from planner.serving import Workload, serving_whatif
from planner.serving.model_shape import model_shape
from planner.serving.search import candidates
from planner.serving.engine import Engine
from planner.serving.config import spec_of
from planner.serving.run import evaluate

WORKLOAD = Workload(512, 64, requests=96, rate=40)  # at most SCREEN_REQUESTS: screening is the whole workload
SLO = dict(ttft=0.2, tpot=0.03)


@pytest.fixture(scope="module")
def found():
    return serving_whatif("llama3-8b", "h100:4", workload=WORKLOAD, slo=SLO, search=True)


def test_the_answer_meets_the_slo_and_reports_goodput(found):
    assert found.slo_attainment >= 0.9
    assert found.goodput == pytest.approx(found.slo_attainment * found.requests_per_second, rel=1e-6)
    assert "search:" in found.search.summary()


def test_no_considered_configuration_that_meets_the_slo_does_better(found):
    shape, spec = model_shape("llama3-8b"), spec_of("h100:4")
    configs = candidates(shape, spec, WORKLOAD, "bfloat16", Engine())
    assert found.search.considered == len(configs) > 20
    best = found.output_tokens_per_second_per_chip
    for config in configs[::7]:  # a spread of them, run independently of the search
        try:
            est = evaluate(shape, spec, config, WORKLOAD, slo=SLO, record=False)
        except ValueError:
            continue
        if est.slo_attainment >= 0.9:
            assert est.output_tokens_per_second_per_chip <= best * (1 + 1e-9)


def test_cost_objective_and_a_mixed_rack():
    est = serving_whatif("llama3-8b", "h100:4", workload=WORKLOAD, slo=SLO, search=True, objective="cost")
    assert est.cost_per_million_output_tokens is not None
    mixed = serving_whatif("llama3-8b", "h100:2+b200:2", workload=Workload(512, 64, requests=64), search=True)
    assert {"prefill", "decode"} <= set(mixed.parallel)


def test_an_slo_nothing_meets_is_refused_with_the_closest():
    with pytest.raises(ValueError, match=r"slo: no configuration of llama3-8b on h100:4 meets .* closest"):
        serving_whatif("llama3-8b", "h100:4", workload=WORKLOAD, slo=dict(ttft=1e-6), search=True)


def test_search_chooses_the_pools_itself():
    with pytest.raises(ValueError, match="search: the search chooses the pools"):
        serving_whatif("llama3-8b", "h100:4", workload=WORKLOAD, parallel=dict(tp=2), search=True)
    with pytest.raises(ValueError, match="objective: 'cost' needs prices"):
        serving_whatif("llama3-8b", "trn2:4", workload=WORKLOAD, search=True, objective="cost")
