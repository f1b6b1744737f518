"""Ops torch implements for CUDA only, on emulated slots: every one in the installed torch's registry is run by
a kernel of ours or refused by name with what to use instead (interop/cuda_only_ops.py), so a new torch cannot
open a silent hole; the fused recurrent cells, which every LSTM and GRU reaches, run and equal the CPU."""

from __future__ import annotations

import pytest
import torch

import interop
from interop import cuda_only_ops

SLOT = "hybrid:0"


def test_every_cuda_only_op_of_this_torch_is_served_or_refused():
    ops = cuda_only_ops.cuda_only_ops()
    assert "aten::_thnn_fused_lstm_cell" in ops and "aten::_cudnn_rnn" in ops  # the registry was read
    unclassified = [op for op in ops if op not in cuda_only_ops.KERNELS and cuda_only_ops.instead_for(op) is None]
    assert not unclassified, ("CUDA-only ops with neither a kernel of ours nor a refusal in "
                              f"interop/cuda_only_ops.py: {unclassified}")
    for op in cuda_only_ops.KERNELS:
        name, _, overload = op.partition(".")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), f"{op}: no PrivateUse1 kernel"


_VALUES = {"int": 1, "float": 0.5, "bool": False, "number": 1, "str": "x", "List[int]": [1],
           "List[bool]": [False] * 4}


def _value(arg, tensor):
    """A value of the argument's schema type, good enough to reach the op's kernel."""
    kind = str(arg.type)
    if kind == "Tensor" or kind == "Optional[Tensor]":
        return tensor
    if kind == "Optional[Device]":
        return torch.device(SLOT)  # a factory reaches the slot's kernel through its device
    if kind.startswith("Optional["):
        return None
    if kind == "List[Tensor]":
        return [tensor]
    if kind == "Stream":
        return torch.hybrid.current_stream(0)
    return _VALUES[kind]


def _call_on_slot(op: str):
    name, _, overload = op.removeprefix("aten::").partition(".")
    packet = getattr(torch.ops.aten, name)
    schema = next(s for s in torch._C._jit_get_schemas_for_operator("aten::" + name) if s.overload_name == overload)
    tensor = torch.ones(2, 2, device=SLOT)
    args, kwargs = [], {}
    for arg in schema.arguments:
        value = _value(arg, tensor)
        if arg.kwarg_only:
            kwargs[arg.name] = value
        else:
            args.append(value)
    return getattr(packet, overload or "default")(*args, **kwargs)


@pytest.mark.parametrize("op", [op for op in cuda_only_ops.cuda_only_ops() if op not in cuda_only_ops.KERNELS])
def test_a_refused_op_names_itself_the_slot_and_what_to_use(op):
    with pytest.raises(NotImplementedError) as err:
        _call_on_slot(op)
    message = str(err.value)
    assert message.startswith(f"{op} cannot run on hybrid:0 (")
    assert f"Instead: {cuda_only_ops.instead_for(op)}" in message


def test_instead_for_reads_overloads_and_families():
    assert "ctc_loss" in cuda_only_ops.instead_for("aten::_use_cudnn_ctc_loss.Tensor")
    assert cuda_only_ops.instead_for("aten::cudnn_convolution_transpose") == cuda_only_ops.instead_for(
        "aten::cudnn_batch_norm")
    assert cuda_only_ops.instead_for("aten::mm") is None  # mm has a CPU kernel; only mm.dtype is CUDA's
    assert cuda_only_ops.instead_for("aten::mm.dtype") is not None


def _both(factory, x, state=None):
    """(CPU result, slot result) of one module built from one seed; outputs, state and gradients."""
    def run(device):
        torch.manual_seed(0)
        module = factory().to(device)
        inputs = x.detach().clone().to(device).requires_grad_()
        args = (inputs,) if state is None else (inputs, tuple(s.to(device) for s in state)
                                               if isinstance(state, tuple) else state.to(device))
        out = module(*args)
        flat = [t for t in (out if isinstance(out, tuple) else (out,)) for t in (t if isinstance(t, tuple) else (t,))]
        sum(t.sum() * (i + 1) for i, t in enumerate(flat)).backward()
        return [t.detach().cpu() for t in flat] + [inputs.grad.cpu()] + [p.grad.cpu() for p in module.parameters()]
    return run("cpu"), run(SLOT)


@pytest.mark.parametrize("factory", [
    lambda: torch.nn.LSTM(6, 5), lambda: torch.nn.GRU(6, 5),
    lambda: torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True),
    lambda: torch.nn.LSTM(6, 5, proj_size=3), lambda: torch.nn.GRU(6, 5, num_layers=2, bias=False),
], ids=["lstm", "gru", "lstm-2-layer-bidirectional-batch-first", "lstm-projections", "gru-2-layer-no-bias"])
def test_recurrent_layers_equal_the_cpu_forward_and_backward(factory):
    cpu, slot = _both(factory, torch.randn(4, 3, 6))
    for c, s in zip(cpu, slot, strict=True):
        torch.testing.assert_close(s, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_equal_the_cpu(cls):
    hx = torch.randn(3, 5)
    cpu, slot = _both(lambda: cls(6, 5), torch.randn(3, 6), (hx, 0.5 * hx) if cls is torch.nn.LSTMCell else hx)
    for c, s in zip(cpu, slot, strict=True):
        torch.testing.assert_close(s, c, rtol=1e-5, atol=1e-6)


def test_packed_sequences_equal_the_cpu():
    lengths = torch.tensor([4, 2, 1])

    def run(device):
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(3, 4).to(device)
        packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(4, 3, 3).to(device), lengths)
        out, (h, c) = lstm(packed)
        return torch.nn.utils.rnn.pad_packed_sequence(out)[0].cpu(), h.cpu(), c.cpu()
    for c, s in zip(run("cpu"), run(SLOT)):
        torch.testing.assert_close(s, c, rtol=1e-5, atol=1e-6)


def test_each_cell_step_is_one_modelled_op(fresh_timeline):
    cell = torch.nn.LSTMCell(8, 8).to("hybrid:4")
    interop.reset_timeline()
    h = c = torch.zeros(2, 8, device="hybrid:4")
    for x in torch.randn(5, 2, 8, device="hybrid:4"):
        h, c = cell(x, (h, c))
    h.sum().backward()
    cells = [r for r in interop.timeline() if "thnn_fused" in r.op]
    assert [r.op for r in cells] == ["hybrid::_thnn_fused_lstm_cell"] * 5 + \
        ["hybrid::_thnn_fused_lstm_cell_backward_impl"] * 5
    assert all(r.flops > 0 and not r.estimated_by_default and r.slot == 4 for r in cells)
    assert cells[0].out_shapes == ((2, 8), (2, 8), (2, 32))


@pytest.mark.parametrize("kwargs", [{}, {"batch_first": True, "num_layers": 2}, {"bidirectional": True},
                                    {"bias": False, "dropout": 0.0}], ids=["plain", "batch-first-2", "bidir", "no-bias"])
def test_an_lstm_layer_runs_the_cpus_whole_sequence_kernel(fresh_timeline, kwargs):
    """The CPU runs each LSTM layer over the whole sequence as one oneDNN kernel; a slot runs that same kernel
    (one op per layer and direction, each way), not a loop of per-step ops: equal to the CPU bit for bit."""
    steps, batch, features, hidden = 7, 3, 6, 5
    cpu, slot = _both(lambda: torch.nn.LSTM(features, hidden, **kwargs), torch.randn(steps, batch, features))
    for c, s in zip(cpu, slot, strict=True):
        assert torch.equal(s, c)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    interop.reset_timeline()
    _both(lambda: torch.nn.LSTM(features, hidden, **kwargs), torch.randn(steps, batch, features))
    records = interop.timeline()
    assert not [r for r in records if "thnn_fused" in r.op or r.op == "aten::mm"]  # no per-step ops left
    forward = [r for r in records if r.op == "aten::mkldnn_rnn_layer"]
    backward = [r for r in records if r.op == "aten::mkldnn_rnn_layer_backward"]
    assert len(forward) == len(backward) == layers
    # Priced as a GPU's layer: the GEMMs of every step (2 FLOPs a multiply-add) plus the cells' arithmetic.
    first = forward[0]
    gemm = 2 * steps * batch * 4 * hidden * (features + hidden)
    assert gemm < first.flops < gemm + 40 * steps * batch * hidden
    assert not first.estimated_by_default and first.duration_ps > 0 and backward[0].flops > first.flops


def test_record_stream_on_a_slot_is_accepted():
    x = torch.ones(4, device=SLOT)
    x.record_stream(torch.hybrid.current_stream(0))
    assert x.sum().item() == 4.0


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
@pytest.mark.parametrize("bins, lo, hi", [(4, 0, 3), (3, 0, 7), (6, 2, 5), (5, 0, 0)])
def test_integer_histc_counts_as_cuda_does(dtype, bins, lo, hi):
    """CUDA counts integer tensors (transformers' MoE routing does, off the CPU); the CPU kernel refuses them.
    Reference: numpy's histogram over the same range (the top edge in the last bin, values outside ignored;
    min == max: the data's range)."""
    import numpy as np

    values = np.array([0, 1, 1, 3, 2, 3, 3, 7, 9, 5, 4, 4], dtype=np.int64)
    x = torch.tensor(values, dtype=dtype)
    got = torch.histc(x.to(SLOT), bins=bins, min=lo, max=hi)
    assert got.device == torch.device(SLOT) and got.dtype == dtype
    low, high = (values.min(), values.max()) if lo == hi else (lo, hi)
    expected, _ = np.histogram(values, bins=bins, range=(low, high))
    assert got.cpu().tolist() == expected.tolist()


def test_floating_histc_is_the_cpus_and_bad_bins_are_named():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.histc(x.to(SLOT), bins=7, min=-1, max=1).cpu(), torch.histc(x, bins=7, min=-1, max=1))
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(torch.ones(3, dtype=torch.int32, device=SLOT), bins=0)
