"""What one Inductor kernel reads, writes and computes, as expressions in the graph's sizes.

A fused kernel is costed from its own arguments, not from the ops fused into
it: an intermediate that fusion keeps in registers is not an argument, so it
moves no bytes. Per argument buffer and direction (read, write) the kernel is
charged ``min(buffer size, the elements its accesses touch)``: Inductor's own
rule for a kernel's memory traffic (``SchedulerNode.get_read_write_buffer_accesses``:
"worst-case inputs, best-case optimization"), kept symbolic here so that a
``dynamic=True`` graph is charged for the sizes it actually runs with. FLOPs are
those of the FX nodes the kernel came from that have a FLOP formula (matrix
products, convolutions, attention; ``torch.utils.flop_counter``); elementwise
arithmetic is not counted, as in Inductor's estimates.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import sympy
import torch
from torch._inductor.codegen.common import RemovedArg
from torch._inductor.dependencies import MemoryDep
from torch._inductor.fx_utils import count_flops_fx
from torch._inductor.utils import get_dtype_size
from torch._inductor.virtualized import V



@dataclass(frozen=True)
class KernelWork:
    """A kernel's traffic and arithmetic as sympy expressions in the graph's size symbols."""

    bytes: sympy.Expr
    matmul_flops: sympy.Expr
    matmul_outputs: sympy.Expr
    dtype: torch.dtype


def _argument_buffers(args) -> tuple[set[str], set[str]]:
    reads, writes = set(args.input_buffers), set()
    for name, inner in args.output_buffers.items():
        if not isinstance(inner, RemovedArg):
            writes.add(name)
    for name, buf in args.inplace_buffers.items():
        if not isinstance(buf, RemovedArg):
            reads.add(name)
            writes.add(name)
    return reads, writes


def _scheduler_nodes(nodes):
    for node in nodes:
        yield from node.get_nodes()


def _as_expr(value) -> sympy.Expr:
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return sympy.Integer(int(value))


def kernel_work(nodes, args) -> KernelWork:
    """The work of the kernel generated from scheduler ``nodes`` with arguments ``args`` (KernelArgs)."""
    graph = V.graph
    real = graph.scheduler.mutation_real_name if graph.scheduler is not None else {}
    reads, writes = _argument_buffers(args)
    touched: dict[tuple[str, str], dict] = defaultdict(dict)
    flops, outputs = sympy.Integer(0), sympy.Integer(0)
    for node in _scheduler_nodes(nodes):
        rw = node.read_writes
        for direction, deps, names in (("r", rw.reads, reads), ("w", rw.writes, writes)):
            for dep in deps:
                name = real.get(dep.name, dep.name)
                if name not in names:
                    continue
                key = dep.index if isinstance(dep, MemoryDep) else None
                numel = dep.get_numel() if isinstance(dep, MemoryDep) else graph.get_numel(name)
                seen = touched[(direction, name)].get(key)
                touched[(direction, name)][key] = numel if seen is None else sympy.Max(seen, numel)
        origin = node.node.get_origin_node() if node.node is not None else None
        if origin is not None:
            counted = count_flops_fx(origin)
            if counted:
                flops += _as_expr(counted)
                outputs += graph.get_numel(node.get_name())
    for direction, names in (("r", reads), ("w", writes)):
        for name in names:
            if (direction, name) not in touched:  # read by a template's own code, no dependency recorded
                touched[(direction, name)][None] = graph.get_numel(name)
    moved = sympy.Integer(0)
    for (_, name), accesses in touched.items():
        numel = graph.get_numel(name)
        moved += sympy.Min(numel, sympy.Add(*accesses.values())) * get_dtype_size(graph.get_dtype(name))
    sizevars = graph.sizevars
    return KernelWork(sizevars.simplify(moved), sizevars.simplify(flops), sizevars.simplify(outputs),
                      _dominant_dtype(writes or reads))


def _dominant_dtype(names) -> torch.dtype:
    """The dtype of the kernel's largest output (its inputs' when it writes nothing)."""
    graph = V.graph
    best, best_size = torch.float32, -1
    for name in sorted(names):
        hint = graph.sizevars.optimization_hint(graph.get_numel(name), fallback=0)
        dtype = graph.get_dtype(name)
        size = hint * get_dtype_size(dtype)
        if size > best_size:
            best, best_size = dtype, size
    return best
