"""torch.compile on hybrid slots: results equal eager on the same slot (forward and backward, the comparison
Inductor's own tests make: torch.testing's dtype tolerances), every compiled kernel one record costed from
its own bytes, compiled memory drawn from and counted against the slot.

Compiles are the expensive part of this file (Inductor builds C++ kernels): models are tiny and each test
compiles at most a few graphs."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import devices
import interop
from interop.compile import inductor as slot_inductor
from interop.timelines import PS

TRN, GPU = 2, 6  # fusion-default: hybrid:0-3 trn4, hybrid:4-7 b200


@pytest.fixture(autouse=True)
def fresh_state():
    interop.set_recording(True)
    interop.reset_timeline()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    slot_inductor._warned.clear()
    yield
    interop.set_recording(True)
    interop.reset_timeline()
    torch._dynamo.reset()


class Block(torch.nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.norm = torch.nn.LayerNorm(2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.norm(self.up(x)))) + x


def _run(model, x):
    """Output and gradients (parameters and input) of one forward + backward."""
    x = x.detach().requires_grad_(True)
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()] + [x.grad.detach().clone()]
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


def _assert_same(a, b):
    (out_a, grads_a), (out_b, grads_b) = a, b
    torch.testing.assert_close(out_a, out_b)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(ga, gb)


def _kernels(slot=None):
    return [r for r in interop.timeline() if r.kind == "kernel" and (slot is None or r.slot == slot)]


def _kernel_calls(sources) -> list[str]:
    """Inductor's own calls of its generated C++ kernels, read from the wrapper code it wrote."""
    return [m for code in sources for m in re.findall(r"^\s+(cpp_fused_\w+)\(", code, re.MULTILINE)]


@pytest.mark.parametrize("slot", [TRN, GPU], ids=["trn4", "b200"])
def test_forward_and_backward_equal_eager_on_the_same_slot(slot):
    torch.manual_seed(0)
    model = Block().to(f"hybrid:{slot}")
    x = torch.randn(4, 16, device=f"hybrid:{slot}")
    eager = _run(model, x)
    compiled = torch.compile(model)
    (_, sources) = run_and_get_code(_run, compiled, x)
    interop.reset_timeline()
    result = _run(compiled, x)
    _assert_same(result, eager)
    assert result[0].device == torch.device("hybrid", slot)
    kernels = _kernels()
    assert kernels and all(r.slot == slot for r in kernels)
    generated = sorted(r.op.removeprefix("inductor:") for r in kernels if r.op.startswith("inductor:cpp_"))
    assert generated == sorted(_kernel_calls(sources))  # one record per launch of a generated kernel
    matmuls = [r for r in kernels if r.op.startswith("inductor:aten::") and "mm" in r.op]
    assert len(matmuls) == 2 + 4  # up and down projections forward; their two gradients each backward
    assert all(r.flops > 0 and r.in_shapes for r in matmuls)


def test_a_fused_kernel_is_costed_from_its_own_inputs_and_outputs():
    n = 4096
    x = torch.randn(n, device=f"hybrid:{GPU}")
    y = torch.randn(n, device=f"hybrid:{GPU}")

    def f(x, y):
        return (x.sin() + y).relu() * 2

    interop.reset_timeline()
    expected = f(x, y)
    eager = interop.timeline()
    compiled = torch.compile(f)
    compiled(x, y)
    interop.reset_timeline()
    out = compiled(x, y)
    (record,) = interop.timeline()
    torch.testing.assert_close(out, expected)
    assert record.kind == "kernel" and record.op.startswith("inductor:cpp_fused_")
    # Two inputs read, one output written: the three intermediates fusion keeps in registers move nothing.
    assert record.bytes == 3 * n * 4 and record.flops == 0
    cost = devices.cost.estimate_kernel("b200", "float32", bytes=3 * n * 4)
    assert record.duration_ps == round(cost.seconds * PS)
    assert "argument buffers" in record.source
    # What compilation buys on this chip: one launch and 3n elements of traffic instead of four ops' worth.
    assert len([r for r in eager if r.kind == "op"]) == 4
    assert record.duration_ps < sum(r.duration_ps for r in eager if r.kind == "op")


def test_dynamic_shapes_charge_the_sizes_each_call_runs_with():
    def f(x):
        return torch.tanh(x) * x

    compiled = torch.compile(f, dynamic=True)
    for n in (100, 300):
        x = torch.randn(n, device=f"hybrid:{TRN}")
        interop.reset_timeline()
        out = compiled(x)
        torch.testing.assert_close(out, f(x))
        (record,) = _kernels()
        assert record.bytes == 2 * n * 4
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # one graph for both sizes


def test_fullgraph_and_max_autotune_without_cuda_graphs():
    # Inductor imported first: torch's own import-time deprecations (torch.utils.mkldnn's torch.jit.script_method)
    # are not the compile's warnings, and a fresh test process would otherwise meet them inside the filter.
    import torch._inductor.compile_fx  # noqa: F401

    torch.manual_seed(1)
    model = Block(8).to(f"hybrid:{GPU}")
    x = torch.randn(3, 8, device=f"hybrid:{GPU}")
    eager = _run(model, x)
    for options in ({"fullgraph": True}, {"mode": "max-autotune-no-cudagraphs"}):
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # neither mode may warn
            _assert_same(_run(torch.compile(model, **options), x), eager)


def test_cuda_graph_modes_fall_back_with_one_warning():
    torch.manual_seed(2)
    model = Block(8).to(f"hybrid:{TRN}")
    x = torch.randn(3, 8, device=f"hybrid:{TRN}")
    eager = _run(model, x)
    compiled = torch.compile(model, mode="reduce-overhead")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _run(compiled, x)  # forward and backward graphs: one warning
        _run(compiled, x)
    _assert_same(result, eager)
    messages = [str(w.message) for w in caught if "CUDA graphs" in str(w.message)]
    assert len(messages) == 1 and f"hybrid:{TRN}" in messages[0] and "max-autotune-no-cudagraphs" in messages[0]


class Broken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 8)

    def forward(self, x):
        x = torch.relu(self.first(x))
        torch._dynamo.graph_break()
        return torch.sigmoid(self.second(x))


def test_a_model_with_a_graph_break():
    torch.manual_seed(3)
    model = Broken().to(f"hybrid:{GPU}")
    x = torch.randn(5, 8, device=f"hybrid:{GPU}")
    eager = _run(model, x)
    compiled = torch.compile(model)
    _run(compiled, x)
    interop.reset_timeline()
    _assert_same(_run(compiled, x), eager)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    fused = {r.op for r in _kernels(GPU) if r.op.startswith("inductor:cpp_")}
    assert any("relu" in op for op in fused) and any("sigmoid" in op for op in fused)  # kernels of both graphs


def test_compiled_memory_is_drawn_from_the_slot():
    def f(x):
        return torch.cat([x.exp(), x.cos()]) * 3

    x = torch.randn(10_000, device=f"hybrid:{TRN}")
    compiled = torch.compile(f)
    compiled(x)
    before = {s: torch.hybrid.memory_allocated(s) for s in range(8)}
    torch.hybrid.reset_peak_memory_stats(TRN)
    out = compiled(x)
    assert out.device == torch.device("hybrid", TRN)
    assert torch.hybrid.memory_allocated(TRN) == before[TRN] + out.untyped_storage().nbytes()
    assert torch.hybrid.max_memory_allocated(TRN) >= before[TRN] + out.untyped_storage().nbytes()
    assert all(torch.hybrid.memory_allocated(s) == before[s] for s in range(8) if s != TRN)
    del out
    assert torch.hybrid.memory_allocated(TRN) == before[TRN]


def test_compiled_graph_over_capacity_raises_the_slots_out_of_memory_error(use_rack, tmp_path):
    rack_file = tmp_path / "small.toml"
    rack_file.write_text('[rack]\nname = "small"\n[[slots]]\nkind = "trn2"\ncount = 1\ncapacity = "1MiB"\n')
    use_rack(str(rack_file))
    x = torch.randn(160_000, device="hybrid:0")  # 640 KB of the 1 MiB; the 640 KB result cannot fit
    compiled = torch.compile(lambda t: t * 2 + 1)
    with pytest.raises(torch.OutOfMemoryError, match="hybrid:0"):
        compiled(x)
    assert torch.hybrid.memory_allocated(0) == x.untyped_storage().nbytes()  # nothing half-allocated is left
    del x, compiled
    torch._dynamo.reset()


def test_a_graph_spanning_two_slots_runs_op_by_op_with_a_warning():
    def f(a, b):
        return a.sin() + b.to(a.device).cos()

    a = torch.randn(32, device="hybrid:0")
    b = torch.randn(32, device="hybrid:1")
    with pytest.warns(UserWarning, match="spans slots hybrid:0, hybrid:1"):
        out = torch.compile(f)(a, b)
    torch.testing.assert_close(out, f(a, b))


def test_report_separates_compiled_kernels_from_eager_ops():
    x = torch.randn(64, device=f"hybrid:{GPU}")
    compiled = torch.compile(lambda t: (t + 1).exp())
    compiled(x)
    interop.reset_timeline()
    compiled(x)
    x.sum()  # one eager op
    slot = interop.report().slot(GPU)
    kernels = _kernels(GPU)
    assert slot.kernels == len(kernels) == 1 and slot.ops == 1
    assert slot.kernel_s == pytest.approx(sum(r.duration_ps for r in kernels) / PS, abs=0)
    assert "kernels" in interop.report().table()


def test_cpu_compiles_are_left_as_they_were():
    def f(x):
        return (x * 2).sigmoid()

    x = torch.randn(64, device=f"hybrid:{TRN}")
    torch.compile(f)(x)
    torch._dynamo.reset()
    interop.reset_timeline()
    out, sources = run_and_get_code(torch.compile(f), torch.randn(64))
    assert out.device.type == "cpu" and interop.timeline() == []
    assert sources and not any("hybrid" in code for code in sources)


def test_recording_off_places_no_kernel():
    compiled = torch.compile(lambda t: t.exp() + 1)
    x = torch.randn(16, device=f"hybrid:{TRN}")
    compiled(x)
    interop.reset_timeline()
    interop.set_recording(False)
    compiled(x)
    interop.set_recording(True)
    assert interop.timeline() == []


def test_attention_compiles_forward_and_backward():
    # SDPA picks its kernel through a per-device chooser; tracing must not record the choice as a graph op.
    torch.manual_seed(4)
    project = torch.nn.Linear(16, 48).to(f"hybrid:{TRN}")

    def attend(x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 4, 4).transpose(1, 2) for z in project(x).split(16, dim=-1))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    x = torch.randn(2, 8, 16, device=f"hybrid:{TRN}")
    eager = _run(attend_module := _Wrap(project, attend), x)
    compiled = torch.compile(attend_module)
    _run(compiled, x)  # compiles the forward and the backward graph
    interop.reset_timeline()
    _assert_same(_run(compiled, x), eager)
    # The compiled graphs ran (an eager run places aten ops, not kernels): attention forward and backward and the
    # projection are Inductor's kernels on the slot; no attention op ran eagerly.
    kernels = [r.op for r in _kernels(TRN)]
    attention = [k for k in kernels if "scaled_dot_product" in k]
    assert all(k.startswith("inductor:") for k in kernels)
    assert any("backward" not in k for k in attention) and any("backward" in k for k in attention), kernels
    assert any(k.startswith("inductor:aten::") and "mm" in k for k in kernels), kernels
    assert not [r.op for r in interop.timeline() if r.kind == "op" and "attention" in r.op]


class _Wrap(torch.nn.Module):
    def __init__(self, inner, fn):
        super().__init__()
        self.inner, self.fn = inner, fn

    def forward(self, x):
        return self.fn(x)
