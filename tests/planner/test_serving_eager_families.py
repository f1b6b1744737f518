"""The eager serving engine (``interop.serve``'s, priced by tracing transformers' forward on meta) on the families
whose forward does more than a dense decoder's: a mixture of experts' grouped matmul, a causal convolution, and a
family that does not run on meta at all."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers", reason="the families' configs come from transformers")

from planner.serving import Engine, Workload, serving_whatif  # noqa: E402
from planner.serving.eager import trace_slot_ops  # noqa: E402

POOLS = dict(prefill=dict(kind="h100", chips=1), decode=dict(kind="h100", chips=1))


def test_a_grouped_matmul_is_traced_as_the_slots_loop_with_balanced_groups():
    # torch._grouped_mm's composite (what a CPU-emulated slot runs) loops over the groups by offs, which a meta
    # tensor cannot give: traced with the rows split evenly (8 rows over 4 experts: 2 each), one mm a group.
    import torch

    a = torch.empty(8, 16, dtype=torch.bfloat16, device="meta")
    b = torch.empty(4, 16, 32, dtype=torch.bfloat16, device="meta")
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    records = trace_slot_ops(lambda: torch._grouped_mm(a, b, offs=offs))
    mms = [r.shapes[:2] for r in records if r.op.startswith("aten::mm")]
    assert mms == [((2, 16), (16, 32))] * 4
    assert sum(r.op == "aten::item" for r in records) == 4  # each group's end read to the host, as on the slot


def _tiny_moe():
    return transformers.Qwen3MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                       head_dim=16, num_experts=4, num_experts_per_tok=2)


def test_a_mixture_of_experts_is_served_by_the_eager_engine():
    # Before: 'Cannot copy out of meta tensor' from the grouped matmul's loop (Qwen3 MoE, OLMoE, Qwen2 MoE ...)
    work = Workload(64, 4, requests=2)
    est = serving_whatif(_tiny_moe(), "h100:2", workload=work, engine=Engine.eager(), **POOLS)
    assert est.parallel["kernels"] == "eager" and est.ttft.p50 > 0 and est.tpot.p50 > 0
    # twice the experts: the slot's loop runs twice the matmuls (one a group, empty ones too) in every decode step
    more = _tiny_moe()
    more.num_experts = 8
    assert serving_whatif(more, "h100:2", workload=work, engine=Engine.eager(), **POOLS).tpot.p50 > est.tpot.p50 * 1.1


def test_a_family_the_eager_engine_cannot_trace_is_refused_by_name():
    with pytest.raises(ValueError, match=r"kernels: the eager engine cannot trace dbrx's forward on the meta device "
                                         r"\(AttributeError: .*rope_theta'\); kernels='fused' prices"):
        serving_whatif("dbrx", "h100:2", workload=Workload(64, 4, requests=2), engine=Engine.eager(), **POOLS)


def test_a_causal_convolution_is_recorded_whole():
    # A gated delta net's depthwise causal conv (Qwen3.5, OLMo hybrid): its composite reaches
    # convolution_overrideable, which has no meta kernel (before: NotImplementedError); the slot runs the CPU's
    # convolution, recorded as one op with its input and weight shapes.
    import torch

    x = torch.empty(1, 8, 16, dtype=torch.bfloat16, device="meta")
    w = torch.empty(8, 1, 4, dtype=torch.bfloat16, device="meta")
    records = trace_slot_ops(lambda: torch.nn.functional.conv1d(x, w, groups=8, padding=3))
    assert [(r.op, r.shapes) for r in records] == [("aten::_convolution", ((1, 8, 16), (8, 1, 4)))]
