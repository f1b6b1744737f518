"""A plan's step handed to the what-if (``plan.whatif_config()``), and the what-if's kernel choice (``kernels=``).

With ``kernels="eager"`` the what-if traces the model's ops as written, as a slot runs them, and prices them op by
op: the plan's prediction does the same on the graph torch.export cut, so on the plan's own layout the two must
agree on every chip kind of the catalogue (within 3 %, the issue's bound; measured 0.00-0.01 % on float32 Qwen2,
Mistral and Phi-3, 0.3 % on bfloat16, where the what-if's optimizer keeps a float32 master copy the plan's does
not). ``kernels="fused"`` prices a production stack: about half the eager step on these small models.
"""

from __future__ import annotations

import dataclasses

import pytest

import devices
import interop

pytest.importorskip("transformers", reason="the model is a transformers Qwen2")

from tests.support import model_families  # noqa: E402


@pytest.fixture(scope="module")
def qwen2_plan():
    model = model_families.build("qwen2")
    x, y = model_families.tokens()
    return model, interop.plan(model, (x,), rack="h100:1", microbatches=2, example_targets=y)


def _replanned(plan, rack: str):
    """``plan``'s search again on ``rack``, on the blocks it cut (one torch.export for every kind)."""
    from interop.live.plan import Plan, Prediction
    from planner.comm import CommPricer
    from planner.plan_search import search

    spec = devices.parse_rack(rack)
    problem = dataclasses.replace(plan.problem, spec=spec, slots=range(len(spec)), pricer=CommPricer(spec), kinds={},
                                  tp_options=(), _costs={})
    layout, result, stats = search(problem)
    return Plan(plan.blocks, layout, Prediction.of(result), spec, plan.objective, plan.optimizer, problem, stats,
                False)


def test_eager_whatif_equals_the_plan_on_every_kind(qwen2_plan):
    model, plan = qwen2_plan
    for kind in devices.kinds():
        p = _replanned(plan, f"{kind}:1")
        config = p.whatif_config()
        assert config["kernels"] == "eager" and config["precision"] == "float32"
        assert config["parallel"] == dict(tp=1, pp=1, cp=1, ep=1, vp=1, dp=1, zero=0, microbatch=4)
        eager = interop.whatif(model.config, **config)
        assert eager.kernels == "eager" and eager.parallel["microbatches"] == p.microbatches == 2
        assert eager.seconds == pytest.approx(p.predicted.seconds, rel=0.03), kind
        fused = interop.whatif(model.config, **{**config, "kernels": "fused"})
        # fused RMSNorm, flash attention without a mask: fewer ops, a faster step (about half on this model)
        assert fused.kernels == "fused" and fused.seconds < 0.75 * eager.seconds, kind


def test_kernels_are_printed_with_every_estimate_and_checked_by_name(qwen2_plan):
    model, plan = qwen2_plan
    config = plan.whatif_config()
    rows = dict(interop.whatif(model.config, **config).rows())
    assert rows["kernels"].startswith("eager: the ops the slot runs as written")
    assert rows["step efficiencies"].startswith("none applied")
    fused = dict(interop.whatif(model.config, **{**config, "kernels": "fused"}).rows())
    assert fused["kernels"].startswith("fused: fused production kernels")
    with pytest.raises(ValueError, match=r"kernels: expected one of 'fused', 'eager', got 'flash'"):
        interop.whatif(model.config, **{**config, "kernels": "flash"})
    # a production stack's grouped GEMMs have no float32: such experts are priced as written, or refused by name
    with pytest.raises(ValueError, match="precision: mixtral's experts in float32 are priced as written"):
        interop.whatif(model_families.hf_config("mixtral"), "h100:1", global_batch=8, seq_len=16, precision="float32")


def test_a_plan_the_whatif_cannot_express_is_refused_by_what_differs(qwen2_plan):
    from planner.layout import Layout
    from planner.stage import Stage

    plan = _replanned(qwen2_plan[1], "trn3:1+h100:1")
    two_kinds = Layout((Stage(chunks=(range(0, 2),), kind="trn3", slots=(0,)),
                        Stage(chunks=(range(2, 4),), kind="h100", slots=(1,))), "1f1b", 2, plan.global_batch)
    with pytest.raises(ValueError, match="plan: stages on h100, trn3"):
        plan.with_layout(two_kinds).whatif_config()
