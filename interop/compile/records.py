"""The timeline records of kernel launches (imported by generated wrapper code: keep it light)."""

from __future__ import annotations

from collectives import graph_capture
from devices.dtypes import dtype_label
from interop.session import record_kernel
from interop.timelines import KernelLaunch

INDUCTOR_PREFIX = "inductor:"
"""Op-name prefix of a compiled graph's kernels on the timeline (``inductor:cpp_fused_add_relu_0``)."""
TRITON_PREFIX = "triton:"
"""Op-name prefix of a Triton launch on the timeline (``triton:add_kernel``)."""
COMPILED_PREFIXES = (INDUCTOR_PREFIX, TRITON_PREFIX)

INDUCTOR_METHOD = ("bytes: Inductor's accesses of the kernel's own argument buffers (per buffer and direction, "
                   "min of its size and the elements touched); FLOPs: torch.utils.flop_counter on the FX nodes "
                   "fused into it (matrix products, convolutions, attention)")
"""How a compiled kernel's bytes and FLOPs are obtained (the record's sources say it)."""


GRAPH_CALL = "a graph compiled by torch.compile"
"""What a compiled graph's call is, in the error for a tensor of a rack that is not current."""

ATEN_METHOD = "an ATen kernel a compiled graph called (an Inductor extern kernel), priced as that op from its shapes"

_DTYPE_NAMES: dict = {}


def _shapes_and_dtype(values) -> tuple[tuple, str | None]:
    shapes, dtype = [], None
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, (tuple, list)):
            stack.extend(reversed(value))
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            shapes.append(tuple(value.shape))
            if dtype is None and value.dtype.is_floating_point:
                dtype = value.dtype
    name = None
    if dtype is not None:
        name = _DTYPE_NAMES.get(dtype)
        if name is None:
            name = _DTYPE_NAMES[dtype] = dtype_label(dtype)
    return tuple(shapes), name


def inductor_aten(slot: int, op: str, inputs, outputs, causal: bool = False) -> None:
    """Called by Inductor's wrapper code after an ATen kernel the graph calls (``extern_kernels.mm``...)."""
    in_shapes, dtype = _shapes_and_dtype(inputs)
    out_shapes, out_dtype = _shapes_and_dtype(outputs)
    record_kernel(slot, KernelLaunch(INDUCTOR_PREFIX + op, dtype or out_dtype or "float32", 0.0, method=ATEN_METHOD,
                                     aten=op, in_shapes=in_shapes, out_shapes=out_shapes, causal=causal))


def slot_entry(call, slot: int, slot_outputs: tuple):
    """A compiled graph's entry point on ``slot``: called on aliases of the slot's tensors, with every
    allocation drawn from the slot (emulated), its slot outputs returned as the slot's tensors."""
    from interop import _C

    flags = list(slot_outputs)

    def entry(args):
        record = graph_capture.recorder()
        if record is None:
            return _C._call_on_slot(slot, call, args, flags, GRAPH_CALL)
        # Inside a CUDA graph capture: Inductor's kernels run past the dispatcher the capture watches, so the graph
        # runs now to allocate its outputs and is recorded whole, to run again into them at each replay.
        # Its inputs are restored afterwards: a capture changes nothing (a graph that updates an input in place
        # makes that update at each replay only).
        from torch.utils._python_dispatch import _disable_current_modes

        kept = list(args)
        with _disable_current_modes():  # the capture's recording mode: this call is recorded whole, below
            outputs = graph_capture.without_side_effects(
                kept, lambda: _C._call_on_slot(slot, call, args, flags, GRAPH_CALL))
        record(lambda: _C._call_on_slot(slot, call, list(kept), flags, GRAPH_CALL), (), {}, outputs)
        return outputs

    return entry


def inductor_kernel(slot: int, name: str, dtype: str, nbytes, matmul_flops, matmul_outputs) -> None:
    """Called by Inductor's wrapper code after each launch of a generated kernel on a hybrid slot."""
    record_kernel(slot, KernelLaunch(name, dtype, float(nbytes), 0.0, float(matmul_flops), float(matmul_outputs),
                                     (), INDUCTOR_METHOD))
