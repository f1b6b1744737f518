"""Inductor on hybrid slots: each graph is compiled for its slot's execution device.

A slot executes on the host CPU (emulated) or on the GPU behind it (backed);
eager ops already run the execution device's kernels on aliases of the slot's
bytes. A compiled graph does the same: Inductor compiles it *for the execution
device*, so it gets exactly the kernels, fusions and heuristics it would get on
``cpu`` or ``cuda:N`` (Inductor makes ~140 decisions on ``device.type ==
"cpu"``, and ``is_gpu`` knows only built-in types), and the compiled graph is
called on the slot's memory:

- :func:`compile_for_slot` intercepts Inductor's per-graph compile
  (``compile_fx._compile_fx_inner``, once AOTAutograd has split forward and
  backward), rewrites the graph's hybrid devices and fake tensors to the
  execution device, and compiles it with the code generation below;
- the generated wrapper records each kernel launch on the slot's timeline
  (its own bytes and FLOPs, :mod:`.kernel_work`), and its entry point calls the
  graph through ``_C._call_on_slot``: inputs aliased, every allocation on an
  emulated slot (buffers, outputs, kernel workspace) drawn from and counted
  against the slot, outputs returned as the slot's tensors.

Kernels Inductor hands to ATen (``extern_kernels.mm``, fallback ops) run on the
aliases as the execution device's ATen kernels; each is recorded too
(``inductor:aten::mm``), priced as that ATen op from its runtime shapes.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import sympy
import torch
from torch._inductor import config, ir
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.utils import free_unbacked_symbols
from torch._inductor.virtualized import V

from devices.dtypes import dtype_label
from interop.compile.backing import cuda_backing
from interop.compile.flex_graph import SELF_RECORDING, route_flex_attention
from interop.compile.flex_graph import check_devices as check_flex_devices
from interop.compile.kernel_work import kernel_work
from interop.compile.records import INDUCTOR_PREFIX
from interop.compile.slot_graph import SlotPlan, calls_triton, graph_slots, output_on_slot, retarget
from interop.compile.slot_random import SLOT_RANDOM, redirect

_RECORD = "hybrid_record_kernel"
_RECORD_ATEN = "hybrid_record_aten"
_ENTRY = "hybrid_slot_entry"


# -- code generation for a slot -----------------------------------------------------------------

_compiling = threading.local()


def _plan() -> SlotPlan | None:
    return getattr(_compiling, "plan", None)


def _hand_over(node_schedule, args) -> None:
    nodes = [n for n in node_schedule if hasattr(n, "get_nodes")]
    V.graph.wrapper_code.pending_kernel_work = kernel_work(nodes, args)


class EmulatedScheduling(CppScheduling):
    """The CPU's C++ kernels, each handing its own bytes and FLOPs to the wrapper that records its launches."""

    def define_kernel(self, src_code, nodes, kernel_args=None):
        name = super().define_kernel(src_code, nodes, kernel_args)
        _hand_over(nodes, self.kernel_group.args if kernel_args is None else kernel_args)
        return name


class BackedScheduling(TritonScheduling):
    """CUDA's Triton kernels, likewise (a GPU-backed slot; unverified: no GPU where this was written)."""

    def define_kernel(self, src_code, node_schedule, kernel):
        name = super().define_kernel(src_code, node_schedule, kernel)
        _hand_over(node_schedule, kernel.args)
        return name


def _symbols_known(expr: sympy.Expr) -> sympy.Expr:
    """Data-dependent (unbacked) sizes have no value in the wrapper: their hints stand in."""
    unbacked = free_unbacked_symbols(expr)
    if not unbacked:
        return expr
    sizevars = V.graph.sizevars
    return expr.subs({s: sizevars.optimization_hint(s, fallback=0) for s in unbacked})


class _KernelRecords:
    """Wrapper code of a graph compiled for a slot: a record after every generated kernel's launch."""

    pending_kernel_work = None
    plan: SlotPlan | None = None

    def push_codegened_graph(self, graph):
        super().push_codegened_graph(graph)
        if self.plan is not None and self.plan.cuda is None:
            for operation in graph.operations:  # before any is generated: random ATen calls draw from the slot
                redirect(operation, self.plan.slot)

    def generate_kernel_call(self, kernel_name, call_args, *, device=None, **kwargs):
        work, self.pending_kernel_work = self.pending_kernel_work, None
        super().generate_kernel_call(kernel_name, call_args, device=device, **kwargs)
        if self.plan is None or work is None:
            return
        exprs = []
        for expr in (work.bytes, work.matmul_flops, work.matmul_outputs):
            expr = _symbols_known(expr)
            for sym in expr.free_symbols:
                self.ensure_size_computed(sym)
            exprs.append(self.codegen_python_sizevar(expr))
        dtype = dtype_label(work.dtype)
        self.writeline(f"{_RECORD}({self.plan.slot}, '{INDUCTOR_PREFIX}{kernel_name}', '{dtype}', "
                       f"{', '.join(exprs)})")


    # Kernels Inductor hands to ATen: one record each, priced as the op from its runtime shapes.

    def generate_extern_kernel_out(self, node) -> None:
        super().generate_extern_kernel_out(node)
        self._record_aten(node)

    def generate_extern_kernel_alloc(self, node) -> None:
        super().generate_extern_kernel_alloc(node)
        self._record_aten(node)

    def generate_extern_kernel_multi_out(self, node) -> None:
        super().generate_extern_kernel_multi_out(node)
        self._record_aten(node)

    def generate_fallback_kernel(self, node) -> None:
        super().generate_fallback_kernel(node)
        self._record_aten(node)

    def generate_scatter_fallback(self, node) -> None:
        super().generate_scatter_fallback(node)
        self._record_aten(node)

    def generate_index_put_fallback(self, node) -> None:
        super().generate_index_put_fallback(node)
        self._record_aten(node)

    def _record_aten(self, node) -> None:
        if self.plan is None or _aten_name(node) in SELF_RECORDING:
            return
        inputs = ", ".join(_references(node.inputs))
        outputs = "" if isinstance(node.layout, ir.NoneLayout) else node.get_name()
        self.writeline(f"{_RECORD_ATEN}({self.plan.slot}, {_aten_name(node)!r}, ({inputs}{',' if inputs else ''}), "
                       f"({outputs}{',' if outputs else ''}), {_causal(node)})")


def _references(values) -> list[str]:
    out = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out += _references(value)
        elif isinstance(value, ir.IRNode) and not isinstance(value, (ir.ShapeAsConstantBuffer, ir.TorchBindObject)):
            try:
                out.append(value.codegen_reference())
            except (NotImplementedError, AttributeError, AssertionError):
                pass
    return out


def _aten_name(node) -> str:
    op = getattr(node, "op_overload", None)
    if isinstance(op, torch._ops.OpOverload):
        return op.name()
    kernel = getattr(node, "python_kernel_name", None) or getattr(node, "get_kernel_name", lambda: "kernel")()
    return "aten::" + str(kernel).rsplit(".", 1)[-1]


def _causal(node) -> bool:
    """The op's is_causal argument, where it has one (attention FLOPs halve)."""
    op = getattr(node, "op_overload", None)
    schema = getattr(op, "_schema", None)
    if schema is None:
        return False
    names = [a.name for a in schema.arguments]
    if "is_causal" not in names:
        return False
    kwargs = getattr(node, "kwargs", None) or {}
    if "is_causal" in kwargs:
        return bool(kwargs["is_causal"])
    try:
        args, _ = node.unflatten_args(node.inputs, node.constant_args)
    except Exception:  # noqa: BLE001 - best effort: an unreadable flag costs the op as non-causal
        return False
    index = names.index("is_causal")
    return index < len(args) and args[index] is True


class SlotWrapperCodegen(_KernelRecords, PythonWrapperCodegen):
    """The Python wrapper of a graph compiled for a slot."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        wrapper = (SlotSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures) if is_subgraph
                   else SlotWrapperCodegen())
        wrapper.plan = _plan()
        return wrapper

    def write_header(self) -> None:
        super().write_header()
        self.header.splice(f"from interop.compile.records import inductor_kernel as {_RECORD}, "
                           f"inductor_aten as {_RECORD_ATEN}, slot_entry as {_ENTRY}\n"
                           f"from interop.compile.slot_random import slot_random as {SLOT_RANDOM}")

    def generate_end(self, result) -> None:
        super().generate_end(result)
        if self.plan is not None:
            result.writeline(f"call = {_ENTRY}(call, {self.plan.slot}, {self.plan.slot_outputs!r})")


class SlotSubgraphWrapperCodegen(_KernelRecords, SubgraphPythonWrapperCodegen):
    """A subgraph's wrapper (control flow); the main graph's header imports the record function."""


@contextlib.contextmanager
def _slot_codegen(plan: SlotPlan):
    """For one compile: the execution device's code generation records kernels and enters through the slot."""
    from torch._inductor.codegen import common

    common.init_backend_registration()
    key = plan.device.type
    saved = common.device_codegens[key]
    scheduling = EmulatedScheduling if plan.cuda is None else BackedScheduling
    previous_plan = _plan()
    common.device_codegens[key] = common.DeviceCodegen(scheduling, SlotWrapperCodegen, saved.cpp_wrapper_codegen,
                                                       saved.fx_wrapper_codegen)
    _compiling.plan = plan
    try:
        yield
    finally:
        common.device_codegens[key] = saved
        _compiling.plan = previous_plan


class SlotCodegenKey(CustomGraphPass):
    """Keys Inductor's FX graph cache: a graph compiled for a slot must not be served to, or from, a plain
    CPU/CUDA compile of the same graph, nor across slots or versions of this code generation."""

    def __init__(self, plan: SlotPlan, previous):
        self.plan, self.previous = plan, previous

    def __call__(self, graph) -> None:
        if self.previous is not None:
            self.previous(graph)

    def uuid(self):
        from interop.compile.op_overrides import CodegenVersion

        previous = self.previous.uuid() if isinstance(self.previous, CustomGraphPass) else self.previous
        return ("hybrid-slot", self.plan.slot, self.plan.cuda, self.plan.slot_outputs, CodegenVersion().uuid(),
                previous)


# -- the compile ------------------------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def _eager(gm):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(gm.forward)


def compile_for_slot(original, gm, example_inputs, compile_region_name=None, **graph_kwargs):
    """Inductor's per-graph compile, for graphs on hybrid slots (others go to ``original`` unchanged)."""
    slots = graph_slots(gm, example_inputs)
    if not slots:
        return original(gm, example_inputs, compile_region_name=compile_region_name, **graph_kwargs)
    if len(slots) > 1:
        _warn_once("slots", f"torch.compile: a graph spans slots {', '.join(f'hybrid:{s}' for s in sorted(slots))}; "
                   "it runs op by op on its slots (not fused). Compile the part on each slot separately to fuse it.")
        return _eager(gm)
    slot = next(iter(slots))
    if cuda_backing(slot) is None and calls_triton(gm):
        _warn_once("triton", f"torch.compile on hybrid:{slot}: the graph calls Triton kernels, which an emulated "
                   "slot runs in Triton's interpreter, outside Inductor's C++ kernels; the graph runs op by op "
                   "(each Triton launch and ATen op recorded on its own).")
        return _eager(gm)
    if V.aot_compilation or graph_kwargs.get("cpp_wrapper") or graph_kwargs.get("fx_wrapper"):
        raise NotImplementedError("torch.compile on hybrid slots generates a Python wrapper; cpp_wrapper, "
                                  "fx_wrapper and AOTInductor outputs are not supported")
    plan = SlotPlan(slot, cuda_backing(slot), output_on_slot(gm))
    cudagraphs = graph_kwargs.get("cudagraphs")
    if cudagraphs is not None and cudagraphs.value:
        what = ("CUDA graphs do not exist on an emulated slot" if plan.cuda is None else
                "a CUDA graph's memory pool would bypass the slot's allocator")
        _warn_once("cudagraphs", f"torch.compile on hybrid:{slot}: this mode asks for CUDA graphs "
                   f"(mode='reduce-overhead' or 'max-autotune'); {what}. Compiling without them: every kernel "
                   "launches, and is recorded, on its own. mode='max-autotune-no-cudagraphs' is the same without "
                   "this warning.")
        cudagraphs.value = False
    check_flex_devices(gm)  # before retargeting, which makes every device the host's
    inputs = retarget(plan, gm, example_inputs)
    if plan.cuda is None:
        route_flex_attention(gm, slot)
    with _slot_codegen(plan), config.patch(post_grad_custom_post_pass=SlotCodegenKey(
            plan, config.post_grad_custom_post_pass)):
        return original(gm, inputs, compile_region_name=compile_region_name, **graph_kwargs)
