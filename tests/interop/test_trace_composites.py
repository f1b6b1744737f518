"""The planner's trace records an op the way a slot runs it (devices.cost.trace_ops(composites_of=...)): an ATen
op that the hybrid backend has no kernel of its own for runs its composite, so the trace records the composite's
parts (``select_backward`` as ``zero_`` and ``copy_``) as the slot's timeline does; an op the backend implements
stays one record, and a library's own composite (which may need data) is left to its meta kernel."""

from __future__ import annotations

import collections

import torch

import interop  # noqa: F401  (registers the backend's kernels, whose presence the expansion reads)
from devices.cost import HOST_READ, trace_ops


def _select_backward(x):
    (x.select(-1, 0) * 2).sum().backward()


def _ops(records):
    return collections.Counter(r.op for r in records)


def test_a_composite_the_slot_expands_is_recorded_as_its_parts():
    x = torch.randn(4, 8, 2, requires_grad=True)
    plain = _ops(trace_ops(_select_backward, x))
    expanded = _ops(trace_ops(_select_backward, x, composites_of="PrivateUse1"))
    assert plain["aten::select_backward"] == 1
    assert expanded["aten::select_backward"] == 0
    assert expanded["aten::zero_"] == 1 and expanded["aten::copy_"] == 1  # copy_ has a meta shortcut: kept whole


def test_the_expansion_matches_the_slots_own_timeline(fresh_timeline):
    """Reference: the records the slot placed for the same code (ops with a cost: views and allocations
    excluded on both sides)."""
    x = torch.randn(4, 8, 2)
    traced = [r.op for r in trace_ops(_select_backward, x.requires_grad_(), composites_of="PrivateUse1")
              if r.op in ("aten::zero_", "aten::copy_", "aten::mul.Tensor", "aten::sum.dim_IntList")]
    xs = x.detach().to("hybrid:0").requires_grad_()
    interop.reset_timeline()  # the upload is no part of the comparison
    _select_backward(xs)
    torch.hybrid.synchronize()
    placed = [("aten::copy_" if r.kind == "copy" else r.op) for r in interop.timeline()
              if r.op in ("aten::zero_", "aten::mul.Tensor", "aten::sum.dim_IntList")
              or (r.kind == "copy" and r.slot == r.peer)]
    assert collections.Counter(traced) == collections.Counter(placed)


def test_an_op_the_backend_implements_stays_one_record():
    def softmax(x):
        return torch.log_softmax(x, -1)  # the CPU's kernel on a slot (CPU parity), one op

    records = trace_ops(softmax, torch.randn(3, 5), composites_of="PrivateUse1")
    assert [r.op for r in records] == ["aten::_log_softmax"]


def _grouped_loop(input, weight, offs):
    # A library's grouped matmul as transformers' fallback writes it: one mm per group, by offs read to the host.
    out = torch.zeros(input.shape[0], weight.shape[2], dtype=input.dtype, device=input.device)
    start = 0
    for i, end in enumerate(offs.tolist()):
        if end > start:
            torch.mm(input[start:end], weight[i], out=out[start:end])
        start = end
    return out


torch.library.custom_op("hybrid_tests::grouped_loop", _grouped_loop, mutates_args=(),
                        schema="(Tensor input, Tensor weight, Tensor offs) -> Tensor")
torch.library.register_fake("hybrid_tests::grouped_loop",
                            lambda input, weight, offs: input.new_empty(input.shape[0], weight.shape[2]))


def _grouped(x, w, offs):
    return torch.ops.hybrid_tests.grouped_loop(x, w, offs)


def test_a_librarys_grouped_matmul_loop_is_traced_as_the_slot_runs_it_with_balanced_groups(fresh_timeline):
    """The meta trace has no routed counts, so it runs the loop with the rows split evenly (balanced routing);
    reference: the slot's own timeline for the same op with balanced offsets."""
    x, w = torch.randn(12, 8), torch.randn(4, 8, 5)
    offs = torch.tensor([3, 6, 9, 12], dtype=torch.int32)
    plain = [r.op for r in trace_ops(_grouped, x, w, offs)]
    assert plain == ["hybrid_tests::grouped_loop"]  # only the slot's trace expands it
    traced = [(r.op, r.shapes) for r in trace_ops(_grouped, x, w, offs, composites_of="PrivateUse1")
              if r.op == "aten::mm.out"]
    slot = [t.to("hybrid:0") for t in (x, w, offs)]
    interop.reset_timeline()
    out = _grouped(*slot)
    torch.hybrid.synchronize()
    placed = [r.op for r in interop.timeline() if r.op == "aten::mm.out"]
    copies = [r.bytes for r in interop.timeline() if r.kind == "copy" and r.peer == -1]
    assert len(traced) == len(placed) == 4
    assert {shapes for _, shapes in traced} == {((3, 8), (8, 5), (3, 5))}
    torch.testing.assert_close(out.cpu(), torch.cat([x[3 * i:3 * i + 3] @ w[i] for i in range(4)]))
    # offs.tolist() is a copy to the host on the slot: the trace records it, with its bytes, as a host read
    reads = [r.shapes for r in trace_ops(_grouped, x, w, offs, composites_of="PrivateUse1") if r.op == HOST_READ]
    assert reads == [((offs.numel() * offs.element_size(),),)] and copies == [offs.numel() * offs.element_size()]


def test_a_loop_that_needs_more_than_its_offsets_stays_one_record():
    def needs_data(input, weight, offs):
        scale = float(input.abs().max())  # data a meta tensor does not have
        return _grouped_loop(input * scale, weight, offs)

    torch.library.custom_op("hybrid_tests::grouped_needs_data", needs_data, mutates_args=(),
                            schema="(Tensor input, Tensor weight, Tensor offs) -> Tensor")
    torch.library.register_fake("hybrid_tests::grouped_needs_data",
                                lambda input, weight, offs: input.new_empty(input.shape[0], weight.shape[2]))
    records = trace_ops(lambda x, w, o: torch.ops.hybrid_tests.grouped_needs_data(x, w, o), torch.randn(4, 3),
                        torch.randn(2, 3, 5), torch.tensor([2, 4]), composites_of="PrivateUse1")
    assert [r.op for r in records] == ["hybrid_tests::grouped_needs_data"]


def _broadcast_heads_attention(q, k, v):
    # Falcon's multi-query attention: one key/value head broadcast over the query's, without enable_gqa
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_whose_heads_broadcast_is_traced_as_the_math_path_the_slot_runs(fresh_timeline):
    """No fused kernel takes key heads that differ from the query's without enable_gqa (CUDA's and the CPU's
    choosers alike), so the trace records the math path; reference: the slot's own timeline."""
    q, kv = torch.randn(2, 4, 8, 16), torch.randn(2, 1, 8, 16)
    traced = {r.op for r in trace_ops(_broadcast_heads_attention, q, kv, kv, composites_of="PrivateUse1")}
    interop.reset_timeline()
    out = _broadcast_heads_attention(q.to("hybrid:0"), kv.to("hybrid:0"), kv.to("hybrid:0"))
    torch.hybrid.synchronize()
    placed = {r.op for r in interop.timeline() if r.kind != "copy"}
    assert not any("scaled_dot_product" in op for op in traced | placed)
    assert "aten::bmm" in traced and "aten::bmm" in placed and "aten::isneginf" in traced & placed
    torch.testing.assert_close(out.cpu(), _broadcast_heads_attention(q, kv, kv))
    grouped = {r.op for r in trace_ops(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True), q, kv, kv)}
    assert any("scaled_dot_product" in op for op in grouped)  # with enable_gqa a fused kernel takes it


def _conv_step(x, w):
    torch.nn.functional.conv2d(x, w, stride=2, padding=1).sum().backward()


def test_a_convolution_is_traced_as_the_slot_runs_it(fresh_timeline):
    """On a slot, conv2d's composite reaches convolution_overrideable (the path of a backend that is neither
    CPU nor CUDA), which has no meta kernel: the trace records the convolution whole, as the slot's timeline
    does (it failed with NotImplementedError, so no torchvision CNN could be planned)."""
    x, w = torch.randn(2, 3, 8, 8, requires_grad=True), torch.randn(4, 3, 3, 3, requires_grad=True)
    traced = [r.op for r in trace_ops(_conv_step, x, w, composites_of="PrivateUse1")
              if r.op.startswith("aten::convolution")]
    xs, ws = (t.detach().to("hybrid:0").requires_grad_() for t in (x, w))
    interop.reset_timeline()
    _conv_step(xs, ws)
    torch.hybrid.synchronize()
    placed = [r.op for r in interop.timeline() if r.op.startswith("aten::convolution")]
    assert traced == placed == ["aten::convolution", "aten::convolution_backward"]
