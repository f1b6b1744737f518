"""Triton kernels launched with hybrid tensors: computed on the slot's memory, one costed kernel record each.

The references are torch's results for the same inputs and, for bytes and FLOPs, the formulas of what each
tutorial-style kernel reads, writes and multiplies (tests/support/triton_kernels.py)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import devices
import interop

triton = pytest.importorskip("triton", reason="Triton is not installed")

from tests.support import triton_kernels as K  # noqa: E402  (needs triton)
from interop.timelines import PS  # noqa: E402

TRN, GPU = 1, 5  # fusion-default: hybrid:0-3 are trn4, hybrid:4-7 b200
SLOTS = pytest.mark.parametrize("slot", [TRN, GPU], ids=["trn4", "b200"])


pytestmark = pytest.mark.usefixtures("fresh_timeline")


def _only_record(slot):
    records = interop.timeline()
    assert [r.kind for r in records] == ["kernel"], [(r.kind, r.op) for r in records]
    record = records[0]
    assert record.slot == slot
    return record


def _kind(slot):
    return interop.current_rack().devices[slot].kind


@SLOTS
def test_vector_add_runs_on_the_slot_as_one_kernel_record(slot):
    n = 1000  # not a multiple of the block: the masked tail moves nothing
    x = torch.randn(n, device=f"hybrid:{slot}")
    y = torch.randn(n, device=f"hybrid:{slot}")
    before = torch.hybrid.memory_allocated(slot)
    interop.reset_timeline()
    out = K.add(x, y)
    record = _only_record(slot)  # no copy to the host and back: only the kernel
    assert out.device == torch.device("hybrid", slot)
    assert torch.hybrid.memory_allocated(slot) == before + n * 4  # the output only
    assert torch.equal(out.cpu(), x.cpu() + y.cpu())
    assert record.op == "triton:add_kernel" and record.grid == (4, 1, 1)
    assert record.bytes == K.add_bytes(n, 4) and record.flops == 0
    expected = devices.cost.estimate_kernel(_kind(slot), "float32", bytes=K.add_bytes(n, 4))
    assert record.duration_ps == round(expected.seconds * PS)
    assert "interpreter" in record.source  # how the bytes were obtained travels with the record


@SLOTS
def test_fused_softmax(slot):
    x = torch.randn(7, 50, device=f"hybrid:{slot}")
    interop.reset_timeline()
    y = K.softmax(x)
    record = _only_record(slot)
    torch.testing.assert_close(y.cpu(), torch.softmax(x.cpu(), dim=-1))
    assert record.op == "triton:softmax_kernel" and record.grid == (7, 1, 1)
    assert record.bytes == K.softmax_bytes(7, 50, 4)


@SLOTS
def test_layer_norm_forward(slot):
    x = torch.randn(5, 70, device=f"hybrid:{slot}")
    w = torch.randn(70, device=f"hybrid:{slot}")
    b = torch.randn(70, device=f"hybrid:{slot}")
    interop.reset_timeline()
    y, mean, rstd = K.layer_norm(x, w, b)
    record = _only_record(slot)
    ref = torch.nn.functional.layer_norm(x.cpu(), (70,), w.cpu(), b.cpu(), eps=1e-5)
    torch.testing.assert_close(y.cpu(), ref)
    torch.testing.assert_close(mean.cpu(), x.cpu().mean(-1))
    assert record.op == "triton:_layer_norm_fwd_fused"
    assert record.bytes == K.layer_norm_bytes(5, 70, 4)


@SLOTS
def test_blocked_matmul_counts_its_tl_dot_flops(slot):
    m, n, k = 64, 48, 32
    a = torch.randn(m, k, device=f"hybrid:{slot}")
    b = torch.randn(k, n, device=f"hybrid:{slot}")
    interop.reset_timeline()
    c = K.matmul(a, b)
    record = _only_record(slot)
    torch.testing.assert_close(c.cpu(), a.cpu() @ b.cpu(), atol=1e-4, rtol=1e-4)
    assert record.op == "triton:matmul_kernel" and record.grid == ((m // 16) * (n // 16), 1, 1)
    assert record.flops == K.matmul_flops(m, n, k)
    assert record.bytes == K.matmul_bytes(m, n, k, 16, 16, 4)
    expected = devices.cost.estimate_kernel(_kind(slot), "float32", bytes=record.bytes,
                                            matmul_flops=K.matmul_flops(m, n, k), matmul_outputs=m * n)
    assert record.duration_ps == round(expected.seconds * PS)


def test_half_precision_kernels_are_priced_in_their_dtype():
    x = torch.randn(256, device=f"hybrid:{GPU}", dtype=torch.float16)
    interop.reset_timeline()
    out = K.add(x, x)
    record = _only_record(GPU)
    assert torch.equal(out.cpu(), x.cpu() + x.cpu())
    assert record.dtype == "float16" and record.bytes == K.add_bytes(256, 2)


def test_bfloat16_arguments_warn_about_the_interpreter_once_per_kernel():
    from interop.compile import triton_launch

    triton_launch._warned_bfloat16.discard("triton:scale_kernel")
    x = torch.randn(64, device=f"hybrid:{TRN}", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    with pytest.warns(UserWarning, match="raw bits"):
        K.scale_kernel[(1,)](x, out, 64, BLOCK=64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K.scale_kernel[(1,)](x, out, 64, BLOCK=64)


@SLOTS
def test_autotune_ranks_configurations_by_modelled_time(slot):
    m, n, k = 64, 128, 64
    a = torch.randn(m, k, device=f"hybrid:{slot}")
    b = torch.randn(k, n, device=f"hybrid:{slot}")
    kernel = K.autotuned_matmul_kernel
    kernel.cache.clear()
    interop.reset_timeline()
    c = K.autotuned_matmul(a, b)
    record = _only_record(slot)  # the trial runs of every configuration are not on the timeline
    torch.testing.assert_close(c.cpu(), a.cpu() @ b.cpu(), atol=1e-4, rtol=1e-4)
    timings = {cfg.kwargs["BLOCK_SIZE_N"]: t[0] for cfg, t in kernel.configs_timings.items()}
    coster = interop.current_rack().timeline.coster
    for bn, ms in timings.items():  # each configuration's time is its modelled time, in ms
        launch = interop.timelines.KernelLaunch(
            "triton:autotuned_matmul_kernel", "float32", K.matmul_bytes(m, n, k, 16, bn, 4),
            matmul_flops=K.matmul_flops(m, n, k), matmul_outputs=m * n)
        assert ms == pytest.approx(coster.kernel(slot, launch).seconds * 1e3, rel=1e-12)
    # Larger column blocks re-read A fewer times: fewer bytes, less modelled time, chosen.
    assert timings[64] < timings[32] < timings[16]
    assert kernel.best_config.kwargs["BLOCK_SIZE_N"] == 64
    assert record.bytes == K.matmul_bytes(m, n, k, 16, 64, 4)
    interop.reset_timeline()
    K.autotuned_matmul(a, b)  # tuned once per key
    assert len(interop.timeline()) == 1


def test_a_launch_across_two_slots_is_refused():
    x = torch.randn(16, device="hybrid:0")
    y = torch.randn(16, device="hybrid:1")
    with pytest.raises(ValueError, match="hybrid:0 and hybrid:1"):
        K.add(x, y)


def test_recording_off_places_nothing():
    x = torch.randn(64, device=f"hybrid:{TRN}")
    interop.reset_timeline()
    interop.set_recording(False)
    out = K.add(x, x)
    interop.set_recording(True)
    assert interop.timeline() == [] and torch.equal(out.cpu(), 2 * x.cpu())


def test_triton_itself_is_left_as_it_was():
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    before = (tl.range, tl.core.range, tl.static_range, tl.max, tl.core.reduce, JITFunction.__call__)
    x = torch.randn(300, device=f"hybrid:{TRN}")
    K.softmax(x.view(3, 100))  # tl.max/tl.sum are @triton.jit helpers: called interpreted, then restored
    K.layer_norm(x.view(3, 100), x[:100], x[:100])
    assert (tl.range, tl.core.range, tl.static_range, tl.max, tl.core.reduce, JITFunction.__call__) == before
    assert "__bool__" not in vars(tl.core.tensor)  # the interpreter's patch of the language is undone
    assert "TRITON_INTERPRET" not in os.environ and not triton.knobs.runtime.interpret
    with pytest.raises(RuntimeError, match="outside of the scope of a kernel"):
        K.add_kernel(x)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the launch reaches Triton's own driver lookup, "
                    "which finds no GPU driver only on a machine without one")
def test_a_launch_without_hybrid_tensors_goes_to_triton_unchanged():
    x = torch.randn(64)
    with pytest.raises(RuntimeError, match="active drivers"):
        K.add(x, x)


def test_has_triton_is_true_where_a_slot_can_run_triton():
    from torch.utils._triton import has_triton

    assert has_triton()


def test_torch_compile_of_code_that_launches_triton_kernels():
    def f(x):
        out = torch.empty_like(x)
        K.scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
        return out + 1

    x = torch.randn(200, device=f"hybrid:{GPU}")
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend, fullgraph=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # inductor: the graph runs op by op (test_compile checks the warning)
            compiled(x)
        interop.reset_timeline()
        out = compiled(x)
        assert torch.equal(out.cpu(), 2 * x.cpu() + 1)
        kernels = [r for r in interop.timeline() if r.kind == "kernel"]
        assert [r.op for r in kernels] == ["triton:scale_kernel"]
        assert kernels[0].bytes == 2 * 200 * 4


def test_import_loads_no_compiler_and_interpreter_mode_launches_copy_nothing():
    # A fresh process with TRITON_INTERPRET=1 set by the user: importing interop imports neither Triton nor
    # Dynamo nor Inductor, and a launch with hybrid tensors (an InterpretedFunction here) runs on the slot's
    # memory: the timeline shows the kernel and no host copies (interpreted, Triton would copy each argument
    # to the host and back).
    import subprocess
    import sys

    code = (
        "import sys, torch, interop\n"
        "print(sorted(m for m in ('triton', 'torch._dynamo', 'torch._inductor') if m in sys.modules))\n"
        "from tests.support import triton_kernels as K\n"
        "x = torch.randn(1000, device='hybrid:2')\n"
        "interop.reset_timeline()\n"
        "out = K.add(x, x)\n"
        "print([(r.kind, r.op) for r in interop.timeline()])\n"
        "print(bool(torch.equal(out.cpu(), 2 * x.cpu())))\n"
    )
    from tests.support import ROOT as root

    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-3] == "[]"
    assert lines[-2] == "[('kernel', 'triton:add_kernel')]"
    assert lines[-1] == "True"


def test_kernel_records_are_compiled_kernels_in_the_gantt_and_carry_their_grid_in_the_trace():
    import dataclasses

    from interop.charts import record_class
    from interop.timeline_export import trace_events

    x = torch.randn(300, device=f"hybrid:{TRN}")
    interop.reset_timeline()
    K.add(x, x)
    (record,) = interop.timeline()
    rack = interop.current_rack()
    kinds = [d.kind for d in rack.devices]
    assert record_class(record, kinds) == "compiled kernel"
    # An ATen kernel a compiled graph called keeps its op's family.
    called = dataclasses.replace(record, op="inductor:aten::mm.out", in_shapes=((8, 8), (8, 8)))
    assert record_class(called, kinds) == "matmul / conv"
    (event,) = [e for e in trace_events([record], rack) if e["ph"] == "X"]
    assert event["cat"] == "kernel" and event["args"]["grid"] == [2, 1, 1]
