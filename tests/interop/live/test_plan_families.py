"""interop.plan on the model families trained today (tiny configs, built from configs: nothing downloaded).

Each family is planned on two slots of a heterogeneous rack, its plan applied and trained for two AdamW steps:
the same losses, gradients and parameters as the model trained on one slot (computed), and the executed
step on the modelled timeline within 3 % of the plan's prediction (modelled). Before graph ops that move a
tensor to a fixed device were retargeted, every rotary-embedding family failed in the meta trace
(``inv_freq.to(x.device)``: "Cannot copy out of meta tensor; no data!")."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn as nn

import interop
from interop.live.bind import bind
from interop.live.cut import cut
from tests.support import model_families

transformers = pytest.importorskip("transformers", reason="the HF families come from transformers")

LIVE_FAMILIES = ("llama", "qwen3", "gemma3", "phi3", "gpt_neox", "titan_llama", "mixtral", "falcon", "qwen2_moe",
                 "deepseek_v3")
OPEN_PREDICTION_GAPS: dict[str, str] = {}
"""Families whose executed step is known to miss the prediction, with the reason (an xfail). Mixtral's was the
experts' loop (transformers::grouped_mm_fallback) reading its offsets to the host: 16 copies and waits a step
that the prediction did not price (executed 9.6 % over), and that held the other stage back in the in-process
runner, which a deployed stage's own process does not."""


@pytest.mark.parametrize("family", LIVE_FAMILIES)
def test_family_plans_applies_as_one_slot_and_runs_as_predicted(use_rack, family):
    from interop.live.plan_models import PlanModel
    from interop.live.plan_run import run_and_check

    use_rack("trn3:2+h100:2", backing="emulated")
    model = model_families.build(family)
    x, y = model_families.tokens()
    pm = PlanModel(family, model, (x,), y, None)
    plan = interop.plan(model, pm.inputs, slots=[0, 2], optimizer="adamw", microbatches=2, example_targets=y)
    assert [b.role for b in plan.blocks] == ["embedding", "layer", "layer", "head"]
    check = run_and_check(plan, pm, 2, echo=lambda *a: None)
    assert check.matches, check.agreement
    within = check.executed_s == pytest.approx(check.predicted_s, rel=0.03)
    gc.collect()
    if not within and family in OPEN_PREDICTION_GAPS:
        pytest.xfail(OPEN_PREDICTION_GAPS[family])
    assert within, (check.time_error, plan.table())


class Rotary(nn.Module):
    """A buffer moved to the input's device in forward, and a table created on it (the class of op export
    records with the example's device as an argument)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(4, dtype=torch.float32), persistent=False)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        return self.lin(x) * (positions[:, None] * self.inv_freq.to(x.device, torch.float32)).cos()


def test_buffers_moved_and_tables_created_in_forward_follow_the_block_to_its_device():
    model = nn.Sequential(Rotary(), Rotary())
    x = torch.randn(2, 3, 4)
    blocks = cut(model, (x,))
    moves = [n for b in blocks for m in b.module.modules() if isinstance(getattr(m, "graph", None), torch.fx.Graph)
             for n in m.graph.nodes if any(isinstance(a, torch.device) for a in n.args)]
    assert moves, "export records the buffer's move with the example's device as an argument"
    whole = blocks.stage_module(0, len(blocks))
    assert bind(whole, None, "meta", blocks.canonical)(torch.empty(2, 3, 4, device="meta")).device.type == "meta"
    assert torch.equal(bind(whole, model, "cpu")(x), model(x))


class ConvNet(nn.Module):
    """A torchvision-style stem: a convolution without bias, BatchNorm, then a classifier."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(8, 10))

    def forward(self, x):
        return self.head(self.body(self.stem(x)))


@pytest.mark.parametrize("microbatches", [1, 2])
def test_a_batchnorm_cnn_plans_and_says_why_microbatches_differ(use_rack, microbatches):
    """A convolution without bias reached convolution_overrideable in the trace, which has no meta kernel: no
    torchvision CNN could be planned. With one microbatch the plan trains bit for bit as one slot; with two,
    BatchNorm normalises each microbatch over its own rows, and the check says so."""
    import torch.nn.functional as F

    from interop.live.plan_models import PlanModel
    from interop.live.plan_run import run_and_check

    use_rack("trn3:2+h100:2", backing="emulated")
    torch.manual_seed(0)
    model = ConvNet()
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    pm = PlanModel("convnet", model, (x,), y, F.cross_entropy)
    plan = interop.plan(model, pm.inputs, slots=[0, 2], optimizer="adamw", microbatches=microbatches,
                        example_targets=y)
    lines = []
    check = run_and_check(plan, pm, 2, echo=lines.append)
    assert check.executed_s == pytest.approx(check.predicted_s, rel=0.03)
    if microbatches == 1 and max(st.dp for st in plan.stages) == 1:
        assert check.bitwise and not check.by_design
    else:
        assert "BatchNorm2d normalises each of the plan's 2 microbatches" in check.by_design
        assert check.matches or check.by_design in "\n".join(lines)


def test_a_model_with_dropout_is_said_to_differ_by_design(use_rack):
    import torch.nn.functional as F

    from interop.live.plan_models import PlanModel
    from interop.live.plan_run import run_and_check

    use_rack("trn3:2+h100:2", backing="emulated")
    torch.manual_seed(0)
    model = ConvNet(dropout=0.5)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    pm = PlanModel("convnet", model, (x,), y, F.cross_entropy)
    plan = interop.plan(model, pm.inputs, slots=[0, 2], optimizer="adamw", microbatches=1, example_targets=y)
    lines = []
    check = run_and_check(plan, pm, 2, echo=lines.append)
    assert not check.bitwise and "Dropout draws its masks" in check.by_design
    assert any(line.startswith("DIFFERS from single-device, by design: Dropout") for line in lines) or check.matches


class ResidualInPlace(nn.Module):
    """Each layer's output gets the skip added in place (``h += skip``), MobileNet-style: after the cut, that
    add is the next block's first op on its own input."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        skip = self.embed(x)
        h = skip
        for layer in self.layers:
            h = layer(h)
            h += skip
        return self.out(h)


def test_a_block_that_writes_its_input_in_place_plans_and_trains_as_one_slot(use_rack):
    """A stage's input is a leaf that requires a gradient, which autograd refuses to write in place ("a leaf
    Variable that requires grad is being used in an in-place operation": torchvision's MobileNetV3 could not be
    planned). The stage copies such an input first, and the trace records the copy."""
    import torch.nn.functional as F

    from interop.live.plan_models import PlanModel
    from interop.live.plan_run import run_and_check

    use_rack("trn3:2+h100:2", backing="emulated")
    x, y = torch.randn(8, 6), torch.randint(0, 4, (8,))
    errors = []
    for cls in (ResidualInPlace, ResidualOutOfPlace):
        torch.manual_seed(0)
        model = cls()
        pm = PlanModel("residual", model, (x,), y, F.cross_entropy)
        plan = interop.plan(model, pm.inputs, slots=[0, 2], optimizer="adamw", microbatches=1, example_targets=y)
        assert any(plan.blocks.writes(i) for i in range(len(plan.blocks))) == (cls is ResidualInPlace)
        check = run_and_check(plan, pm, 2, echo=lambda *a: None)
        assert check.matches, check.agreement
        errors.append(check.time_error)
    # The copies are predicted as they run: the prediction misses by what it misses without them.
    assert errors[0] == pytest.approx(errors[1], abs=0.005)
    # And that is little: the skip's gradient reaches two inputs of the traced block as one tensor, which the
    # trace once copied into each leaf's .grad where the stage passes it on (4.6 % over, against 0.0 % now).
    assert abs(errors[1]) < 0.03, errors


class ResidualOutOfPlace(ResidualInPlace):
    def forward(self, x):
        skip = self.embed(x)
        h = skip
        for layer in self.layers:
            h = layer(h) + skip
        return self.out(h)
