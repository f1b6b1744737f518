"""torch's foreach ops on a slot: one op on the timeline, priced as the multi-tensor kernel a GPU launches,
computing exactly what the per-tensor loop computes (the CPU's numbers, bit for bit)."""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import devices
import interop
from devices.cost import multi_tensor
from interop.timelines import PS

SHAPES = [(4, 4), (3,), (2, 5), (4, 4), (7, 1, 3)]  # shapes repeat within a list: lengths must be recorded


pytestmark = pytest.mark.usefixtures("fresh_timeline")


class OpLog(TorchDispatchMode):
    """The ops torch issues at the top of the dispatcher, before any backend sees them (the reference)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, kwargs or {}, out))
        return out


def _on_hybrid(call) -> bool:
    _, args, kwargs, out = call
    return any(isinstance(t, torch.Tensor) and t.device.type == "hybrid"
               for t in tree_leaves((args, kwargs, out)))


def _bytes(call) -> int:
    """Every tensor argument read once; an in-place op writes its first list, another op its outputs."""
    func, args, kwargs, out = call
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    written = list(args[0]) if func._schema.name.endswith("_") else [t for t in tree_leaves(out)]
    return sum(t.numel() * t.element_size() for t in tensors + written)


def _params(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in SHAPES]


def _grads(step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s in SHAPES]


@pytest.mark.parametrize("options", [dict(foreach=True), dict(fused=True)], ids=["foreach", "fused"])
def test_an_adamw_step_is_one_record_per_foreach_op_and_equals_the_cpu_bit_for_bit(options):
    cpu, hyb = _params("cpu"), _params("hybrid:5")
    opt_cpu = torch.optim.AdamW(cpu, lr=1e-2, weight_decay=0.1, **options)
    opt_hyb = torch.optim.AdamW(hyb, lr=1e-2, weight_decay=0.1, **options)
    for step in range(3):
        for pc, ph, g in zip(cpu, hyb, _grads(step)):
            pc.grad, ph.grad = g, g.to("hybrid:5")
        opt_cpu.step()
        interop.reset_timeline()
        with OpLog() as log:
            opt_hyb.step()
        records = [r for r in interop.timeline() if r.kind == "op"]
        issued = [c for c in log.calls if _on_hybrid(c) and c[0]._schema.name.startswith("aten::_foreach_")]
        foreach = [r for r in records if r.op.startswith("aten::_foreach_")]
        assert issued, "torch's AdamW issued no foreach op on the slot"
        # One record per foreach op torch issued, in order.
        assert [r.op.split(".")[0] for r in foreach] == [c[0]._schema.name for c in issued]
        if step:  # the state exists: nothing but the multi-tensor ops ran on the slot, nothing per tensor
            assert {r.op for r in records} - {r.op for r in foreach} <= {"aten::_fused_adamw_"}
        for record, call in zip(foreach, issued):
            assert record.bytes == _bytes(call), record.op
            assert record.slot == 5 and not record.estimated_by_default
    for pc, ph in zip(cpu, hyb):
        assert torch.equal(ph.detach().cpu(), pc.detach()), "parameters differ from the CPU's"
        for key, value in opt_cpu.state[pc].items():
            assert torch.equal(opt_hyb.state[ph][key].cpu(), value), key


def test_a_foreach_record_is_priced_as_its_kernel_launches():
    xs = [torch.zeros(()).to("hybrid:4") for _ in range(800)]  # 800 step counters on a b200 slot
    interop.reset_timeline()
    torch._foreach_add_(xs, 1)
    (record,) = [r for r in interop.timeline() if r.kind == "op"]
    assert record.op == "aten::_foreach_add_.Scalar" and len(record.in_shapes) == 800
    est = devices.estimate("b200", "aten::_foreach_add_.Scalar", [()] * 800, "float32", list_length=800)
    # 770 tensors fill a launch of a one-list kernel (32 KB kernel arguments): two launches.
    assert est.launches == 2
    launch = devices.cost.efficiency.params_for("b200", "gpu").launch_overhead.value
    assert est.overhead_seconds == pytest.approx(2 * launch)
    assert record.duration_ps == round(est.seconds * PS)
    assert record.bytes == est.bytes == 800 * 4 * 2
    assert any("MultiTensorApply.cuh" in getattr(f, "source", "") for f in record.sources)
    assert all(x.item() == 1 for x in xs)


def _cuda_launch_loop(numels, depth, scalar_list=False):
    """PyTorch's multi_tensor_apply host loop, transcribed chunk by chunk (the reference for the count)."""
    table = (672, 448, 336, 252, 210) if scalar_list else (770, 448, 336, 252, 210)
    max_tensors, max_blocks, chunk = table[depth - 1], 2240, 65536
    launches = blocks = tensors = 0
    for n in numels:
        if n == 0:
            continue
        tensors += 1
        chunks = n // chunk + (n % chunk != 0)
        for c in range(chunks):
            blocks += 1
            if (tensors == max_tensors and c == chunks - 1) or blocks == max_blocks:
                launches += 1
                blocks = 0
                tensors = 0 if c == chunks - 1 else 1
    return launches + (1 if blocks else 0)


def test_the_launch_count_follows_pytorchs_multi_tensor_apply_loop():
    rng = random.Random(0)
    for _ in range(400):
        numels = [rng.choice([0, 1, 65536, 65537, rng.randint(1, 400_000), rng.randint(1, 1 << 28)])
                  for _ in range(rng.randint(0, 900))]
        depth, scalar_list = rng.randint(1, 5), rng.random() < 0.3
        assert multi_tensor.launches(numels, depth, scalar_list=scalar_list) == \
            _cuda_launch_loop(numels, depth, scalar_list)
    # GPT-2's 124 M parameters in one fused AdamW: 1,995 chunks fit one launch of 2,240.
    assert multi_tensor.launches([38_597_376] + [589_824] * 24, 4) == 1
    assert multi_tensor.launches([2240 * 65536 + 1], 4) == 2
    assert multi_tensor.launches([], 1) == 0


def test_fused_adamw_is_priced_over_its_lists_with_the_step_counters_read_not_walked():
    shapes = [(1000,), (10,)]
    flat = shapes * 4 + [(), ()]  # params, grads, exp_avgs, exp_avg_sqs, (no max_exp_avg_sqs), state_steps
    est = devices.estimate("h100", "aten::_fused_adamw_", flat, "float32", list_length=2)
    read = 4 * 1010 + 2
    written = 3 * 1010  # params and both moments
    assert est.bytes == 4 * (read + written)
    assert est.flops == 12 * 1010 and est.launches == 1


def test_foreach_over_several_slots_or_host_tensors_takes_the_per_tensor_path():
    a, b = torch.ones(3, device="hybrid:1"), torch.ones(3, device="hybrid:2")
    interop.reset_timeline()
    torch._foreach_mul_([a, b], 3.0)  # CUDA leaves the fast route for tensors on several devices too
    records = [r for r in interop.timeline() if r.kind == "op"]
    assert [r.slot for r in records] == [1, 2] and not any(r.op.startswith("aten::_foreach_") for r in records)
    assert torch.equal(a.cpu(), torch.full((3,), 3.0)) and torch.equal(b.cpu(), torch.full((3,), 3.0))
    dst = [torch.zeros(2, device="hybrid:3"), torch.zeros(5, device="hybrid:3")]
    src = [torch.arange(2.0), torch.arange(5.0)]  # host tensors in a list: copied one by one
    torch._foreach_copy_(dst, src)
    assert all(torch.equal(d.cpu(), s) for d, s in zip(dst, src))
    mixed = [torch.ones(2, device="hybrid:3"), torch.ones(2, device="hybrid:3", dtype=torch.float64)]
    interop.reset_timeline()
    torch._foreach_add_(mixed, 1)
    assert len([r for r in interop.timeline() if r.kind == "op"]) == 2  # mixed dtypes: per tensor, as CUDA
    assert all(torch.equal(t.cpu(), torch.full((2,), 2.0, dtype=t.dtype)) for t in mixed)


def test_clip_grad_norm_foreach_matches_the_cpu_and_is_one_norm_record():
    cpu, hyb = _params("cpu", seed=3), _params("hybrid:6", seed=3)
    for pc, ph, g in zip(cpu, hyb, _grads(7)):
        pc.grad, ph.grad = g, g.to("hybrid:6")
    total_cpu = torch.nn.utils.clip_grad_norm_(cpu, 0.5, foreach=True)
    interop.reset_timeline()
    total_hyb = torch.nn.utils.clip_grad_norm_(hyb, 0.5, foreach=True)
    assert torch.equal(total_hyb.cpu(), total_cpu)
    assert all(torch.equal(ph.grad.cpu(), pc.grad) for pc, ph in zip(cpu, hyb))
    norms = [r for r in interop.timeline() if r.op.startswith("aten::_foreach_norm")]
    assert len(norms) == 1 and norms[0].in_shapes == tuple(SHAPES)
    est = devices.estimate("h200", "aten::_foreach_norm.Scalar", SHAPES, "float32", out_shapes=[()] * 5,
                           list_length=5)
    assert est.launches == 2  # the norm kernel and its cleanup kernel
    assert math.isclose(est.flops, 2 * sum(math.prod(s) for s in SHAPES))


def test_a_foreach_op_on_a_retired_racks_tensors_is_refused(use_rack):
    small = use_rack("h100:2")
    xs = [torch.ones(2, device="hybrid:0") for _ in range(3)]
    use_rack("trn3:2")
    with pytest.raises(RuntimeError, match="h100:2"):
        torch._foreach_add_(xs, 1)
    with small:
        torch._foreach_add_(xs, 1)
        assert all(torch.equal(x.cpu(), torch.full((2,), 2.0)) for x in xs)


def test_list_length_is_validated():
    with pytest.raises(ValueError, match="list_length"):
        devices.estimate("h100", "aten::_foreach_add_.Scalar", [(2,)], "float32", list_length=-1)


def test_fsdp2s_copy_out_and_copy_in_are_one_record_each_and_exact():
    # FSDP2 splits its all-gather output into the parameters with split_with_sizes_copy and packs gradients for
    # its reduce-scatter with _chunk_cat: one kernel each on CUDA, a copy per tensor in their composite kernels.
    src = torch.randn(30)
    x = src.to("hybrid:4")
    outs = [torch.empty(n, device="hybrid:4") for n in (5, 10, 15)]
    interop.reset_timeline()
    torch.split_with_sizes_copy(x, [5, 10, 15], out=outs)
    records = interop.timeline()
    assert [r.op for r in records] == ["aten::split_with_sizes_copy.out"]
    assert all(torch.equal(o.cpu(), ref) for o, ref in zip(outs, torch.split(src, [5, 10, 15])))
    grads = [torch.randn(4, 3), torch.randn(8)]
    packed = torch.empty(2, 10, device="hybrid:4")
    interop.reset_timeline()
    torch._chunk_cat([g.to("hybrid:4") for g in grads], 0, 2, out=packed)
    assert [r.op for r in interop.timeline() if "chunk_cat" in r.op] == ["aten::_chunk_cat.out"]
    assert torch.equal(packed.cpu(), torch._chunk_cat(grads, 0, 2))
