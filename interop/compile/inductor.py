"""Inductor's code generation for the ``hybrid`` device.

The pattern is PyTorch's own for out-of-tree devices (``register_backend_for_device``
plus device op overrides; OpenReg's test backend, IPEX, torch_npu):

- An **emulated** slot's memory is host memory, so its kernels are the CPU's
  C++ kernels (``CppScheduling``), called on the slot's own bytes: buffers are
  allocated with ``empty_strided(..., device="hybrid:<slot>")`` (drawn from and
  counted against the slot) and their data pointers handed to the kernel.
- A slot **backed by a real GPU** generates what CUDA would: Triton kernels
  (``TritonScheduling``), compiled for that GPU (``device.patch_device_properties``)
  and launched on its current CUDA stream.

Either way every launch of a generated kernel is followed, in the wrapper, by
one call that queues a kernel record on the slot's timeline with the kernel's
own bytes and FLOPs (:mod:`interop.compile.kernel_work`), evaluated for the
sizes the call runs with. Kernels Inductor hands to ATen (``extern_kernels.mm``
and the like) run through the device's ATen dispatch and are recorded as ops.
"""

from __future__ import annotations

import warnings

import sympy
import torch
from torch._inductor import config
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.utils import free_unbacked_symbols
from torch._inductor.virtualized import NullHandler, V

from interop.compile.backing import cuda_backing
from interop.compile.kernel_work import kernel_work
from interop.compile.records import INDUCTOR_PREFIX
from interop.hybrid._utils import DEVICE_TYPE

_RECORD = "hybrid_record_kernel"


def _graph_slots() -> set[int]:
    """The hybrid slots the graph being compiled runs on (the current slot outside a graph)."""
    graph = V.graph
    slots: set[int] = set()
    if not isinstance(graph, NullHandler):  # inside a graph's compilation
        devices = list(graph.device_node_mapping)
        if graph.current_device is not None:
            devices.append(graph.current_device)
        for device in devices:
            if device.type == DEVICE_TYPE and device.index is not None:
                slots.add(device.index)
    if not slots:
        slots.add(torch.hybrid.current_device())
    return slots


def scheduling_class():
    """C++ kernels for emulated slots, Triton for GPU-backed ones; one graph may not mix the two."""
    slots = sorted(_graph_slots())
    backed = {slot: cuda_backing(slot) is not None for slot in slots}
    if len(set(backed.values())) > 1:
        raise RuntimeError(
            "torch.compile: one graph spans emulated slots ("
            + ", ".join(f"hybrid:{s}" for s in slots if not backed[s]) + ") and GPU-backed slots ("
            + ", ".join(f"hybrid:{s}" for s in slots if backed[s]) + "), whose kernels are C++ and Triton "
            "respectively; compile the parts that run on each kind of slot separately")
    return BackedScheduling if backed[slots[0]] else EmulatedScheduling


def _hand_over(node_schedule, args) -> None:
    nodes = [n for n in node_schedule if hasattr(n, "get_nodes")]
    V.graph.wrapper_code.pending_kernel_work = kernel_work(nodes, args)


class EmulatedScheduling(CppScheduling):
    """C++ kernels for an emulated slot: the CPU's code generation over the slot's host memory."""

    def __init__(self, scheduler):
        super().__init__(scheduler)
        if scheduler is not None:
            _warn_cudagraphs(backed=False)

    def define_kernel(self, src_code, nodes, kernel_args=None):
        name = super().define_kernel(src_code, nodes, kernel_args)
        _hand_over(nodes, self.kernel_group.args if kernel_args is None else kernel_args)
        return name


class BackedScheduling(TritonScheduling):
    """Triton kernels for a GPU-backed slot: what Inductor generates for CUDA."""

    def __init__(self, scheduler):
        super().__init__(scheduler)
        if scheduler is not None:
            _warn_cudagraphs(backed=True)

    def define_kernel(self, src_code, node_schedule, kernel):
        name = super().define_kernel(src_code, node_schedule, kernel)
        _hand_over(node_schedule, kernel.args)
        return name


_warned_cudagraphs: set[str] = set()


def _warn_cudagraphs(backed: bool) -> None:
    if not config.triton.cudagraphs:
        return
    key = "backed" if backed else "emulated"
    if key in _warned_cudagraphs:
        return
    _warned_cudagraphs.add(key)
    what = ("CUDA graphs over a GPU-backed slot's memory are not captured (the slot's allocator is not CUDA's "
            "graph pool)" if backed else "CUDA graphs do not exist on an emulated slot")
    slots = ", ".join(f"hybrid:{s}" for s in sorted(_graph_slots()))
    warnings.warn(f"torch.compile on {slots}: this mode asks for CUDA graphs (mode='reduce-overhead' or "
                  f"'max-autotune'); {what}. Compiling without them: every kernel launches, and is recorded, on "
                  "its own. mode='max-autotune-no-cudagraphs' gives the same kernels without this warning.",
                  stacklevel=2)


def _symbols_known(expr: sympy.Expr) -> sympy.Expr:
    """Data-dependent (unbacked) sizes have no value in the wrapper: use their hints."""
    unbacked = free_unbacked_symbols(expr)
    if not unbacked:
        return expr
    sizevars = V.graph.sizevars
    return expr.subs({s: sizevars.optimization_hint(s, fallback=0) for s in unbacked})


class _KernelRecords:
    """Wrapper-code behaviour shared by the main graph's and subgraphs' wrappers."""

    pending_kernel_work = None

    def generate_kernel_call(self, kernel_name, call_args, *, device=None, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        work, self.pending_kernel_work = self.pending_kernel_work, None
        super().generate_kernel_call(kernel_name, call_args, device=device, **kwargs)
        if device.type != DEVICE_TYPE or work is None:
            return
        exprs = []
        for expr in (work.bytes, work.matmul_flops, work.matmul_outputs):
            expr = _symbols_known(expr)
            for sym in expr.free_symbols:
                self.ensure_size_computed(sym)
            exprs.append(self.codegen_python_sizevar(expr))
        dtype = str(work.dtype).removeprefix("torch.")
        self.writeline(f"{_RECORD}({device.index}, '{INDUCTOR_PREFIX}{kernel_name}', '{dtype}', "
                       f"{', '.join(exprs)})")

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == DEVICE_TYPE and not triton:
            device = torch.device("cpu")  # an emulated slot's C++ kernel is a host call on host memory
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == DEVICE_TYPE and device.index is not None:
            # Inductor names only the device type here (a GPU's index comes from the device guard it
            # emits, which non-GPU types do not get): name the slot, or the buffer lands on the current one.
            line = line.replace(f"device='{DEVICE_TYPE}'", f"device='{DEVICE_TYPE}:{device.index}'")
        return line


class HybridWrapperCodegen(_KernelRecords, PythonWrapperCodegen):
    """The Python wrapper of a graph compiled for hybrid slots."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return HybridSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return HybridWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.header.splice(f"from interop.compile.records import inductor_kernel as {_RECORD}")


class HybridSubgraphWrapperCodegen(_KernelRecords, SubgraphPythonWrapperCodegen):
    """A subgraph's wrapper (control flow); the record function is imported by the main graph's header."""
