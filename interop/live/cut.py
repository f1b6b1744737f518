"""Cut a model into a sequence of blocks from its own structure.

The model is traced with ``torch.export`` (batch dimension dynamic) and split
where torch.distributed.pipelining splits models: at ``pipe_split()`` markers,
placed here before every repeated layer (an ``nn.ModuleList``/``Sequential``/``ModuleDict``
of same-class children: HF decoder layers, ``blocks``) and after the last one,
so that the embeddings, each layer and the head come out as blocks. A model
with no such list is cut at its top-level children that own parameters; a model
with neither is refused with an error that says how to mark split points.

:func:`cut` returns :class:`~interop.live.exported_blocks.ExportedBlocks`. The
planner costs its blocks, the runner runs its stage modules
(:mod:`interop.live.bind`), the export builds ``PipelineStage``\\ s from the same
stage modules.
"""

from __future__ import annotations

import copy
import dataclasses
from types import MethodType
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn as nn
from torch.distributed.pipelining import SplitPoint, pipe_split
from torch.utils import _pytree as pytree

from interop.live.bind import canonical_names
from interop.live.exported_blocks import ExportedBlock, ExportedBlocks, ValueSpec, parameter_names
from interop.live import repeated_layers
from interop.live.grad_flow import outputs_requiring_grad

SPLIT_SPEC_HINT = (
    "mark split points with the pipelining API's split spec, e.g. "
    "interop.plan(model, inputs, split_spec={'layers.1': SplitPoint.BEGINNING, ...}) with "
    "`from torch.distributed.pipelining import SplitPoint`, or call "
    "torch.distributed.pipelining.pipe_split() inside forward where a block should end")


class NoBlockStructure(ValueError):
    """The model has no structure to cut it at (no repeated layers, fewer than two top-level children
    with parameters, no split points)."""


def find_layers(model: nn.Module) -> tuple[str, list[str]] | None:
    """The model's repeated layers: the ``ModuleList``/``Sequential``/``ModuleDict`` (torchtitan keeps its layers
    in a dict) with the most same-class children that own parameters (ties: the one with more parameters).
    Returns (container name, layer names)."""
    best = None
    for name, mod in model.named_modules():
        if not isinstance(mod, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
            continue
        children = list(mod.named_children())
        if len(children) < 2:
            continue
        classes = {type(c) for _, c in children}
        if len(classes) != 1 or not all(any(True for _ in c.parameters()) for _, c in children):
            continue
        size = sum(p.numel() for p in mod.parameters())
        key = (len(children), size)
        if best is None or key > best[0]:
            prefix = f"{name}." if name else ""
            best = (key, name, [f"{prefix}{n}" for n, _ in children])
    return None if best is None else (best[1], best[2])


def auto_split_spec(model: nn.Module) -> tuple[dict[str, SplitPoint], str]:
    """Split points from the model's structure, and how they were found (``layers`` / ``children``)."""
    layers = find_layers(model)
    if layers is not None:
        names = layers[1]
        spec = {n: SplitPoint.BEGINNING for n in names}
        return spec, "layers"
    children = [n for n, c in model.named_children() if any(True for _ in c.parameters())]
    if len(children) >= 2:
        return {n: SplitPoint.BEGINNING for n in children[1:]}, "children"
    raise NoBlockStructure(
        f"no block structure found in {type(model).__name__}: it has no list of repeated layers and "
        f"{len(children)} top-level child module(s) with parameters; {SPLIT_SPEC_HINT}")


def _annotate(model: nn.Module, spec: dict[str, SplitPoint], *, after: str | None = None) -> None:
    """Put pipe_split() markers around submodules (on a copy of the user's model)."""
    marks: dict[str, set] = {}
    for name, point in spec.items():
        marks.setdefault(name, set()).add(point)
    if after is not None:
        marks.setdefault(after, set()).add(SplitPoint.END)
    for name, points in marks.items():
        try:
            mod = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"split_spec: {name!r} names no submodule of {type(model).__name__}") from None
        original = mod.forward
        before, end = SplitPoint.BEGINNING in points, SplitPoint.END in points

        def forward(self, *args, _orig=original, _before=before, _end=end, **kwargs):
            if _before:
                pipe_split()
            out = _orig(*args, **kwargs)
            if _end:
                pipe_split()
            return out

        mod.forward = MethodType(forward, mod)


def _export(model: nn.Module, args: tuple, batch_dims) -> Any:
    from torch.export import Dim

    batch = Dim("batch", min=1, max=1 << 24)
    dynamic = tuple({0: batch} if d else None for d in batch_dims)
    # torch.export specializes a dimension of size 1, so an example of one row cannot carry a dynamic batch:
    # it is exported with its row twice (the graph is the same for every batch size).
    args = tuple(torch.cat([a, a]) if d and a.shape[0] == 1 else a for a, d in zip(args, batch_dims))
    try:
        return torch.export.export(model, args, dynamic_shapes=dynamic)
    except Exception as e:  # noqa: BLE001 - export raises many types; the cause is chained
        raise RuntimeError(
            f"torch.export could not capture {type(model).__name__} as one graph with a dynamic batch "
            f"dimension ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); the planner cuts "
            "models the way torch.distributed.pipelining does and needs an exportable forward") from e


def _value_spec(name: str, val, symbol) -> ValueSpec:
    if isinstance(val, torch.Tensor):
        shape = tuple(int(d) if not isinstance(d, torch.SymInt) else d.node.expr for d in val.shape)
        batch_dim = next((i for i, d in enumerate(shape) if not isinstance(d, int) and symbol in d.free_symbols),
                         None)
        return ValueSpec(name, "tensor", shape, val.dtype, batch_dim)
    if isinstance(val, torch.SymInt):
        return ValueSpec(name, "int", expr=val.node.expr)
    return ValueSpec(name, "const", expr=val)


def _outputs_meta(module: fx.GraphModule) -> list:
    out = next(n for n in module.graph.nodes if n.op == "output")
    arg = out.args[0]
    items = arg if isinstance(arg, (tuple, list)) else [arg]
    return [n.meta.get("val") if isinstance(n, fx.Node) else n for n in items]


def cut(model: nn.Module, example_inputs, *, split_spec: dict[str, SplitPoint] | None = None,
        loss_fn: Callable | None = None) -> ExportedBlocks:
    """Cut ``model`` into blocks (see the module doc). ``example_inputs``: the positional inputs of one
    (micro)batch; dimension 0 of every tensor input is the batch. ``split_spec``: the pipelining API's
    ``{submodule name: SplitPoint}``; without it the split points come from the model's structure."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    example_batch = _example_batch(args)
    batch_dims = [isinstance(a, torch.Tensor) and a.dim() > 0 for a in args]

    work = _working_copy(model)
    canonical = canonical_names(work)
    points = _SplitPoints.find(work, args, batch_dims, split_spec)
    kept = repeated_layers.kept_layers(work, points.layers) if points.how == "layers" else None
    split = _split_repeated(work, args, batch_dims, canonical, points, kept) if kept else None
    if split is None:
        if kept:
            work = _working_copy(model)  # the attempt annotated and truncated its own copy
            canonical = canonical_names(work)
        _annotate(work, points.spec, after=points.after)
        split = _split(work, args, batch_dims, canonical, points, type(model).__name__)
    ep, symbol, blocks, values, inputs, outputs = split
    _share_replicated(blocks, work, canonical)
    holders: dict[str, list[int]] = {}
    for b in blocks:
        for p in b.params:
            holders.setdefault(p, []).append(b.index)
    tied = {p: tuple(h) for p, h in holders.items() if len(h) > 1}
    return ExportedBlocks(blocks, values, inputs, outputs, ep.call_spec.out_spec, ep.call_spec.in_spec, symbol,
                          example_batch, tied, canonical, type(model).__name__, loss_fn=loss_fn)


def _working_copy(model: nn.Module) -> nn.Module:
    """The copy of the user's model that is annotated and exported (the user's own is left as it is). Its
    modules are copies; its parameters and buffers are new tensor objects over the model's own bytes, which
    nothing here writes (the runners bind the model's current values, not the blocks'): a copy of their bytes
    would double the host memory a large model takes."""
    memo: dict[int, torch.Tensor] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in memo:
            memo[id(t)] = (nn.Parameter(t.detach(), requires_grad=t.requires_grad) if isinstance(t, nn.Parameter)
                           else t.detach())
    work = copy.deepcopy(model, memo)
    config = getattr(work, "config", None)
    if config is not None and getattr(config, "use_cache", False):
        config.use_cache = False  # a KV cache is an inference output; training steps do not build one
    return work


def _share_replicated(blocks: list[ExportedBlock], work: nn.Module, canonical: dict[str, str]) -> None:
    """Give the blocks' copies of a parameter several blocks use (a tied embedding: pipelining's REPLICATE
    deep-copies it into each block) the working copy's bytes, that is the model's, as every other block
    parameter has: each block keeps a parameter object of its own, and nothing writes them (the runners bind
    the model's current values), so the copies only doubled the host memory such a parameter takes (GPT-2: two
    copies of its 154 MB embedding)."""
    state = work.state_dict(keep_vars=True)
    shared: dict[int, tuple] = {}  # a parameter held under two names within a block stays one object
    for block in blocks:
        for mod_name, mod in block.module.named_modules(remove_duplicate=False):
            prefix = f"{mod_name}." if mod_name else ""
            for key, p in list(mod._parameters.items()):
                if p is None:
                    continue
                source = state.get(canonical.get(prefix + key, prefix + key))
                if (source is None or p.is_meta or source.shape != p.shape or source.dtype != p.dtype
                        or source.device != p.device or _same_bytes(source, p)):
                    continue
                if id(p) not in shared:
                    shared[id(p)] = (p, nn.Parameter(source.detach(), requires_grad=p.requires_grad))
                mod._parameters[key] = shared[id(p)][1]


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _split(work: nn.Module, args: tuple, batch_dims, canonical, points: _SplitPoints, model_name: str):
    from torch.distributed.pipelining._IR import MultiUseParameterConfig, Pipe

    ep = _export(work, args, batch_dims)
    symbols = list(ep.range_constraints)
    symbol = symbols[0] if symbols else None
    pipe = Pipe._from_traced(work, ep, MultiUseParameterConfig.REPLICATE)
    if pipe.num_stages < 2:
        raise NoBlockStructure(f"{model_name} came out as a single block; {SPLIT_SPEC_HINT}")
    return (ep, symbol) + _read_blocks(pipe.split_gm, canonical, symbol, points)


def _split_repeated(work: nn.Module, args: tuple, batch_dims, canonical, points: _SplitPoints, kept: list[str]):
    """The split of a model exported with only its ``kept`` layers, expanded to every layer
    (:mod:`interop.live.repeated_layers`); None when the truncated export does not come out as expected."""
    container = points.layers[0].rsplit(".", 1)[0] if "." in points.layers[0] else ""
    small = _SplitPoints({n: SplitPoint.BEGINNING for n in kept}, "layers", kept, points.first_child)
    with repeated_layers.Truncated(work, container, kept):
        _annotate(work, small.spec, after=small.after)
        try:
            ep, symbol, blocks, values, inputs, outputs = _split(work, args, batch_dims, canonical, small, "")
        except Exception:  # noqa: BLE001 - any failure of the shortcut falls back to the whole export
            return None
    try:
        blocks, values = repeated_layers.expand(blocks, values, work, points.layers, canonical)
    except ValueError:
        return None
    return ep, symbol, blocks, values, inputs, outputs


def _example_batch(args: tuple) -> int:
    flat_args, _ = pytree.tree_flatten(args)
    batches = {a.shape[0] for a in flat_args if isinstance(a, torch.Tensor) and a.dim() > 0}
    if len(batches) != 1:
        raise ValueError(f"example_inputs: every tensor input needs the same batch size in dimension 0, got "
                         f"{sorted(batches) or 'no tensors'}")
    return batches.pop()


class _SplitPoints:
    """Where a model is cut and how that was found: ``how`` is ``layers`` (its repeated layers), ``children``
    (its top-level children), ``user`` (a split spec given) or ``markers`` (pipe_split() in its forward)."""

    def __init__(self, spec: dict[str, SplitPoint], how: str, layers: list[str] | None, first_child: str | None):
        self.spec, self.how, self.layers, self.first_child = spec, how, layers, first_child
        self.after = layers[-1] if layers else None
        """The last repeated layer, after which the head starts."""

    @classmethod
    def find(cls, work: nn.Module, args: tuple, batch_dims, spec) -> _SplitPoints:
        how, layers = "user", None
        if spec is None:
            try:
                spec, how = auto_split_spec(work)
            except NoBlockStructure:
                ep = _export(work, args, batch_dims)  # the user may have put pipe_split() into forward
                if not any(n.target == torch.ops.pippy._pipe_split.default for n in ep.graph.nodes):
                    raise
                spec, how = {}, "markers"
            if how == "layers":
                layers = list(spec)
        children = [n for n, c in work.named_children() if any(True for _ in c.parameters())]
        return cls(spec, how, layers, children[0] if children else None)

    def layer_of(self, param_names) -> str | None:
        """The repeated layer whose parameters a block holds (None: not one layer's)."""
        names = list(param_names)
        owners = {layer for layer in self.layers or () for p in names if p == layer or p.startswith(layer + ".")}
        return owners.pop() if len(owners) == 1 else None

    def block_name(self, i: int, n: int, layer_blocks: dict[int, str] | None = None) -> tuple[str, str]:
        """Block ``i`` of ``n``'s name and role. With repeated layers, ``layer_blocks`` (block index -> the layer
        whose parameters it holds) names the layers; a block before them is the embedding, one after them the
        head (a plain ``Sequential`` of layers has neither)."""
        if self.how == "layers":
            layer_blocks = layer_blocks or {}
            if i in layer_blocks:
                return layer_blocks[i], "layer"
            if layer_blocks and i < min(layer_blocks):
                return ("embedding", "embedding") if i == 0 and min(layer_blocks) == 1 else (f"block{i}", "block")
            if layer_blocks and i > max(layer_blocks):
                return ("head", "head") if i == n - 1 and max(layer_blocks) == n - 2 else (f"block{i}", "block")
            return f"block{i}", "block"
        starts = [k for k, v in (self.spec or {}).items() if v == SplitPoint.BEGINNING]
        if self.how == "children" and self.first_child is not None:
            starts = [self.first_child] + starts
            if i < len(starts):
                return starts[i], "block"
        elif self.how == "user" and 0 < i <= len(starts) and len(starts) == n - 1:
            return starts[i - 1], "block"
        return f"block{i}", "block"


def _read_blocks(split: fx.GraphModule, canonical: dict[str, str], symbol, points: _SplitPoints):
    """The blocks of pipelining's split graph, every value crossing a boundary, the model's input and output
    value names."""
    values: dict[str, ValueSpec] = {}
    inputs: list[str] = []
    for node in split.graph.nodes:
        if node.op == "placeholder":
            inputs.append(node.name)
            values[node.name] = _value_spec(node.name, node.meta.get("val"), symbol)
    calls = [n for n in split.graph.nodes if n.op == "call_module"]
    layer_blocks = {}
    for i, node in enumerate(calls):
        layer = points.layer_of(n for n, _ in split.get_submodule(node.target).named_parameters())
        if layer is not None:
            layer_blocks[i] = layer
    blocks: list[ExportedBlock] = []
    differentiated: set[str] = set()  # values the executed step differentiates (none of the model's inputs)
    for i, node in enumerate(calls):
        module = split.get_submodule(node.target)
        outs_meta = _outputs_meta(module)
        getitems = sorted((u for u in node.users if u.op == "call_function"), key=lambda u: u.args[1])
        if getitems:
            out_names = [None] * len(outs_meta)
            for u in getitems:
                out_names[u.args[1]] = u.name
            out_names = [n if n is not None else f"{node.name}_unused_{k}" for k, n in enumerate(out_names)]
        else:
            out_names = [node.name]
        grads = outputs_requiring_grad(module, [a.name in differentiated for a in node.args])
        for name, val, grad in zip(out_names, outs_meta, grads + [False] * (len(out_names) - len(grads))):
            values[name] = dataclasses.replace(_value_spec(name, val, symbol), requires_grad=grad)
            if grad:
                differentiated.add(name)
        params, nbytes, count = parameter_names(module, canonical)
        name, role = points.block_name(i, len(calls), layer_blocks)
        blocks.append(ExportedBlock(i, name, role, module, tuple(a.name for a in node.args), tuple(out_names),
                                    params, nbytes, count))
    out_node = next(n for n in split.graph.nodes if n.op == "output")
    outputs = tuple(a.name for a in pytree.tree_flatten(out_node.args[0])[0] if isinstance(a, fx.Node))
    return blocks, values, tuple(inputs), outputs


__all__ = ["NoBlockStructure", "SPLIT_SPEC_HINT", "auto_split_spec", "cut", "find_layers"]
