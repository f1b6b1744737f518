"""interop.plan's arguments at the edges (issue 17): each bad one a ValueError or TypeError naming it and what
is accepted, before any work; 0 is not "not given"; a one-row example is a valid input; a layout's stage must
be its slots' kind."""

from __future__ import annotations

import pytest
import torch

import interop
from interop.models import GPT, GPTConfig, token_batch
from planner.layout import Layout
from planner.stage import Stage

RACK = "trn3:2+h100:2"


@pytest.fixture(scope="module")
def tiny():
    cfg = GPTConfig(vocab_size=64, seq_len=8, dim=32, heads=2, layers=2)
    return GPT(cfg), cfg


@pytest.mark.parametrize("kwargs, error, message", [
    ({"microbatches": "2"}, TypeError, "microbatches: expected a positive int or None, got '2' (str)"),
    ({"microbatches": 0}, ValueError, "microbatches: expected a positive int or None (None: searched), got 0"),
    ({"global_batch": float("nan")}, TypeError, "global_batch: expected a positive int or None, got nan (float)"),
    ({"global_batch": "8"}, TypeError, "global_batch: expected a positive int or None, got '8' (str)"),
    ({"global_batch": 0}, ValueError, "global_batch: expected a positive int or None (None: the example batch), got 0"),
    ({"global_batch": 8.0}, TypeError, "global_batch: expected a positive int or None, got 8.0 (float)"),
    ({"slots": ["a"]}, TypeError, "slots: expected slot indices (ints), got 'a' (str)"),
    ({"slots": [1.5]}, TypeError, "slots: expected slot indices (ints), got 1.5 (float)"),
    ({"slots": "01"}, TypeError, "slots: expected a list of slot indices (ints), got str"),
    ({"slots": 3}, TypeError, "slots: expected a list of slot indices (ints), got int"),
    ({"max_seconds": "5"}, TypeError, "max_seconds: expected a number of seconds or None, got '5' (str)"),
    ({"max_seconds": 0}, ValueError, "max_seconds: expected a positive, finite number of seconds or None"),
    ({"max_seconds": float("inf")}, ValueError, "max_seconds: expected a positive, finite number"),
    ({"split_spec": 42}, TypeError, "split_spec: expected a dict of submodule name -> SplitPoint"),
])
def test_bad_arguments_name_themselves_before_any_work(tiny, monkeypatch, kwargs, error, message):
    model, cfg = tiny
    import interop.live.cut as cut

    monkeypatch.setattr(cut, "cut", lambda *a, **k: pytest.fail("the model was cut"))
    with pytest.raises(error) as raised:
        interop.plan(model, (token_batch(cfg, 4)[0],), RACK, **kwargs)
    assert message in str(raised.value)


def test_numpy_integers_are_integers(tiny):
    np = pytest.importorskip("numpy")
    model, cfg = tiny
    plan = interop.plan(model, (token_batch(cfg, 4)[0],), RACK, slots=[np.int64(0), np.int64(2)],
                        global_batch=np.int64(4), microbatches=np.int64(2))
    assert plan.global_batch == 4 and plan.microbatches == 2


def test_an_example_of_one_row_plans_and_runs(tiny, use_rack):
    model, cfg = tiny
    rack = use_rack(RACK)
    x, y = token_batch(cfg, 1)
    plan = interop.plan(model, (x,), rack)
    assert plan.global_batch == 1 and plan.microbatches == 1
    runner = plan.apply(model, optimizer=lambda params: torch.optim.SGD(params, lr=0.1))
    loss = runner.step(x, y, lambda logits, t: torch.nn.functional.cross_entropy(logits.flatten(0, 1), t.flatten()))
    reference = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    assert float(loss) == pytest.approx(float(reference), rel=1e-5)


def test_a_layout_whose_stage_kind_is_not_its_slots_kind_is_refused(tiny):
    model, cfg = tiny
    plan = interop.plan(model, (token_batch(cfg, 4)[0],), RACK, microbatches=2, schedule="1f1b")
    n = len(plan.blocks)
    # Slot 0 is a Trn3; the stage says H100: it would be priced as an H100 and run on a Trn3.
    wrong = Layout((Stage(chunks=(range(0, n),), kind="h100", slots=(0,)),), "1f1b", 2, plan.global_batch)
    with pytest.raises(ValueError, match=r"layout: stage 0 is a 'h100' stage on slots \[0\], which are trn3"):
        plan.with_layout(wrong)
    right = Layout((Stage(chunks=(range(0, n),), kind="trn3", slots=(0,)),), "1f1b", 2, plan.global_batch)
    assert plan.with_layout(right).predicted.seconds > 0
