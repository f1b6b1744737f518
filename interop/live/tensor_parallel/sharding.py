"""One tensor rank's graph of a block: :func:`shard_block`.

The region's view and split sizes are divided by ``tp``; then either the rank's shards with the two
collectives as marker calls (``mode="local"``: :func:`tp_region_input` before a column-parallel
linear, :func:`tp_region_output` after a row-parallel one, which the in-process runner executes
jointly across the slots and which are identities in a trace on the meta device), or
``nn.Linear`` modules holding the whole weight arranged so that its contiguous shards are the
ranks' (``mode="export"``, for ``parallelize_module``: :mod:`.dtensor_export`).
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn

from interop.live.tensor_parallel.analysis import ParamShard, TPPlan, fetch_attr


def tp_region_input(x):
    """Marks a column-parallel region's input: identity in forward; its gradient is summed over the tensor ranks
    (Megatron's ``f``). Outside :class:`~.lockstep.TensorParallelChunk` (a trace on the meta device) an
    identity."""
    if _RECORDING is not None:
        _RECORDING.append(("backward", x.numel() * x.element_size()))
    return x


def tp_region_output(x):
    """Marks a row-parallel linear's partial output: summed over the tensor ranks in forward (``g``); identity in
    backward. Outside :class:`~.lockstep.TensorParallelChunk` an identity."""
    if _RECORDING is not None:
        _RECORDING.append(("forward", x.numel() * x.element_size()))
    return x


_RECORDING: list | None = None
MARKERS = (tp_region_input, tp_region_output)


class recording:
    """Within it, the markers note (phase, bytes) of each all_reduce they stand for."""

    def __enter__(self) -> list:
        global _RECORDING
        self._saved, _RECORDING = _RECORDING, []
        return _RECORDING

    def __exit__(self, *exc) -> None:
        global _RECORDING
        _RECORDING = self._saved


class RowParallelLinear(nn.Linear):
    """A row-parallel linear layer of an export-mode graph: its forward leaves the bias out, which the
    parallel style adds after the partial outputs are summed (Megatron's order: the bias once, whole, on every
    rank). Its parameters keep ``nn.Linear``'s names."""

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


def shard_block(gm: fx.GraphModule, plan: TPPlan, tp: int, rank: int, mode: str = "local") -> fx.GraphModule:
    """Tensor rank ``rank``'s graph of a flat block (see the module doc); ``gm``'s attributes are the values to
    shard (its parameters on the rank's device, or on the meta device for a trace)."""
    if mode not in ("local", "export"):
        raise ValueError(f"mode: expected 'local' or 'export', got {mode!r}")
    if not plan.supports(tp):
        raise ValueError(f"tp: {tp} does not divide the split sizes {sorted(set(plan.sizes))} of this block")
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    by_name = {old.name: new for old, new in env.items()}
    attrs: dict[str, object] = {}
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module"):
            attrs[node.target] = fetch_attr(gm, node.target)
    for name, positions in plan.divide.items():
        node = by_name[name]
        args = list(node.args)
        for pos in positions:
            if pos == -1:
                args[1] = args[1] // tp
            else:
                shape = list(args[1])
                shape[pos] = shape[pos] // tp
                args[1] = shape
        node.args = tuple(args)
    if mode == "local":
        _local_shards(graph, by_name, attrs, plan, tp, rank)
    else:
        _export_linears(graph, by_name, attrs, plan, tp)
    module = fx.GraphModule(attrs, graph)
    if module.graph.eliminate_dead_code():  # it needs the owning module (call_module purity)
        module = fx.GraphModule(attrs, module.graph)  # only the attributes the graph still reads
    module.graph.lint()
    return module


def _shard(value, spec: ParamShard, tp: int, rank: int | None):
    """Rank ``rank``'s shard of ``value``, or (``rank`` None) the whole tensor in the ranks' order."""
    data = spec.arranged(value.detach(), tp) if rank is None else spec.local(value.detach(), tp, rank)
    return nn.Parameter(data.contiguous(), requires_grad=value.requires_grad) if isinstance(
        value, nn.Parameter) else data.contiguous()


def _local_shards(graph: fx.Graph, by_name: dict, attrs: dict, plan: TPPlan, tp: int, rank: int) -> None:
    """The rank's shards, the markers around each region, each row-parallel bias added after the sum."""
    for target, spec in plan.params.items():
        attrs[target] = _shard(attrs[target], spec, tp, rank)
    for name in plan.inputs:
        x = by_name[name]
        readers = [by_name[c] for c in plan.columns if by_name[c].args[0] is x]
        with graph.inserting_after(x):
            marked = graph.call_function(tp_region_input, (x,))
        for c in readers:
            c.replace_input_with(x, marked)
    for name in plan.rows:
        node = by_name[name]
        bias = node.args[2] if len(node.args) > 2 else None
        node.args = (node.args[0], node.args[1], None)
        with graph.inserting_after(node):
            reduced = graph.call_function(tp_region_output, (node,))
        node.replace_all_uses_with(reduced, delete_user_cb=lambda u: u is not reduced)
        if bias is not None:
            with graph.inserting_after(reduced):
                added = graph.call_function(torch.ops.aten.add.Tensor, (reduced, bias))
            reduced.replace_all_uses_with(added, delete_user_cb=lambda u: u is not added)


def _export_linears(graph: fx.Graph, by_name: dict, attrs: dict, plan: TPPlan, tp: int) -> None:
    """Each pair's linears as modules holding the arranged whole weights (``parallelize_module`` shards them)."""
    for name in list(plan.columns) + plan.rows:
        node = by_name[name]
        w, b = node.args[1], (node.args[2] if len(node.args) > 2 else None)
        path = w.target.rsplit(".", 1)[0]
        weight = _shard(attrs[w.target], plan.params[w.target], tp, None)
        cls = RowParallelLinear if name in plan.rows else nn.Linear
        linear = cls(weight.shape[1], weight.shape[0], bias=b is not None, device=weight.device,
                     dtype=weight.dtype)
        linear.weight = weight
        if b is not None:
            spec_b = plan.params.get(b.target)
            linear.bias = _shard(attrs[b.target], spec_b, tp, None) if spec_b is not None else attrs[b.target]
        attrs[path] = linear
        with graph.inserting_before(node):
            call = graph.call_module(path, (node.args[0],))
        node.replace_all_uses_with(call)
        graph.erase_node(node)
        for attr in (w, b):
            if attr is not None:
                attrs.pop(attr.target, None)
                graph.erase_node(attr)


__all__ = ["MARKERS", "RowParallelLinear", "recording", "shard_block", "tp_region_input", "tp_region_output"]
