"""Tensor parallelism of a block's linear layers (Megatron's column/row pairs), found in its exported graph.

A block cut with torch.export is an fx graph whose linear layers are ``aten.linear`` calls on
its own parameters. :func:`analyse` finds the pairs tensor parallelism cuts: a *column-parallel*
linear (its weight split by output features over ``tp`` slots) whose output flows, through
element-wise ops, splits, views into heads, transposes and attention, into a *row-parallel*
linear (its weight split by input features), whose partial results are summed over the slots:
an all_reduce in forward, and the column's input gradient all-reduced in backward (Megatron-LM
without sequence parallelism). Everything else in the block runs whole on every slot. A region
that meets an op it cannot split (its value leaves the block, a reduction over the split
dimension, ...) stays whole.

:func:`shard_block` builds one tensor rank's graph: the region's view and split sizes divided by
``tp``, and either the rank's shards with the two collectives as marker calls
(:func:`tp_region_input`, :func:`tp_region_output`; ``mode="local"``, which the in-process runner
executes jointly across the slots with :class:`TensorParallelChunk`, and which are identities in a
trace on the meta device) or ``nn.Linear`` modules holding the whole weight arranged so that its
contiguous shards are the ranks' (``mode="export"``, for
``torch.distributed.tensor.parallel.parallelize_module`` with ``ColwiseParallel`` /
``RowwiseParallel``, which shard them and run the collectives).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn as nn
from torch.utils import _pytree as pytree

LINEAR = torch.ops.aten.linear.default
VIEWS = (torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default)
SPLITS = (torch.ops.aten.split.Tensor,)
ATTENTION = (torch.ops.aten.scaled_dot_product_attention.default,)
PASS_THROUGH = (torch.ops.aten.dropout.default, torch.ops.aten.clone.default, torch.ops.aten.contiguous.default,
                torch.ops.aten.alias.default, torch.ops.aten.detach.default, torch.ops.aten._to_copy.default,
                torch.ops.aten.to.dtype)
DEGREES = (2, 4, 8)
"""Tensor-parallel degrees a block is checked for."""


def tp_region_input(x):
    """Marks a column-parallel region's input: identity in forward; its gradient is summed over the tensor ranks
    (Megatron's ``f``). Outside :class:`TensorParallelChunk` (a trace on the meta device) an identity."""
    if _RECORDING is not None:
        _RECORDING.append(("backward", x.numel() * x.element_size()))
    return x


def tp_region_output(x):
    """Marks a row-parallel linear's partial output: summed over the tensor ranks in forward (``g``); identity in
    backward. Outside :class:`TensorParallelChunk` an identity."""
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


# -- a block as one flat graph ------------------------------------------------------------------


def _fetch(module: nn.Module, target: str):
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def flatten(module: nn.Module) -> fx.GraphModule:
    """``module`` (a graph module whose submodules are graph modules too, as torch.export's unflattened blocks
    are) as one flat graph: submodule calls inlined, attributes under their full dotted names (so that
    ``named_parameters`` gives the same names)."""
    graph = fx.Graph()
    attrs: dict[str, object] = {}

    def inline(mod: nn.Module, prefix: str, inputs: list) -> object:
        env: dict[fx.Node, object] = {}
        feed = iter(inputs)
        for node in mod.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(feed)
            elif node.op == "get_attr":
                name = prefix + node.target
                attrs[name] = _fetch(mod, node.target)
                new = graph.get_attr(name)
                new.meta = dict(node.meta)
                env[node] = new
            elif node.op == "call_module":
                sub = mod.get_submodule(node.target)
                args = [fx.node.map_arg(a, lambda n: env[n]) for a in node.args]
                if isinstance(getattr(sub, "graph", None), fx.Graph):
                    env[node] = inline(sub, f"{prefix}{node.target}.", args)
                else:
                    name = prefix + node.target
                    attrs[name] = sub
                    new = graph.call_module(name, tuple(args), fx.node.map_arg(node.kwargs, lambda n: env[n]))
                    new.meta = dict(node.meta)
                    env[node] = new
            elif node.op == "output":
                return fx.node.map_arg(node.args[0], lambda n: env[n])
            else:
                new = graph.node_copy(node, lambda n: env[n])
                env[node] = new
        raise RuntimeError("flatten: a graph without an output")

    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    inputs = []
    for p in placeholders:
        new = graph.placeholder(p.target)
        new.meta = dict(p.meta)
        inputs.append(new)
    graph.output(inline(module, "", inputs))
    return fx.GraphModule(attrs, graph)


# -- finding the column / row pairs ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParamShard:
    """How one parameter is split over the tensor ranks: along ``dim`` (0: a column-parallel weight's output
    features and its bias; 1: a row-parallel weight's input features), the dimension being made of ``groups``
    equal parts (a fused q|k|v weight: 3) each split into ``tp`` contiguous blocks; rank ``t`` holds block
    ``t`` of every part."""

    dim: int
    groups: int = 1

    def local(self, full: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
        parts = full.chunk(self.groups, dim=self.dim)
        return torch.cat([p.chunk(tp, dim=self.dim)[rank] for p in parts], dim=self.dim)

    def arranged(self, full: torch.Tensor, tp: int) -> torch.Tensor:
        """The whole tensor reordered so that its ``tp`` contiguous blocks along ``dim`` are the ranks' shards
        (what ``ColwiseParallel``/``RowwiseParallel`` split)."""
        return torch.cat([self.local(full, tp, t) for t in range(tp)], dim=self.dim)

    def full(self, shards: list[torch.Tensor]) -> torch.Tensor:
        """The whole tensor from every rank's shard (the inverse of :meth:`local`)."""
        pieces = [s.chunk(self.groups, dim=self.dim) for s in shards]
        return torch.cat([torch.cat([p[g] for p in pieces], dim=self.dim) for g in range(self.groups)],
                         dim=self.dim)


@dataclass(slots=True)
class TPPlan:
    """The column / row pairs of one block's flat graph (names of its nodes) and what sharding changes."""

    columns: dict[str, int] = field(default_factory=dict)
    """Column-parallel linear node -> the parts its output is split into downstream (a fused q|k|v: 3)."""
    rows: list[str] = field(default_factory=list)
    """Row-parallel linear nodes."""
    inputs: list[str] = field(default_factory=list)
    """The nodes the column-parallel linears read (one gradient all_reduce each)."""
    divide: dict[str, list[int]] = field(default_factory=dict)
    """Node -> positions of its size arguments divided by tp (a view's shape entries; -1: a split's size)."""
    params: dict[str, ParamShard] = field(default_factory=dict)
    """Parameter (attribute) name -> how it is split."""
    sizes: list[int] = field(default_factory=list)
    """Sizes tp must divide."""

    @property
    def active(self) -> bool:
        return bool(self.rows)

    def supports(self, tp: int) -> bool:
        return all(s % tp == 0 for s in self.sizes)

    def degrees(self) -> tuple[int, ...]:
        return tuple(d for d in DEGREES if self.supports(d)) if self.active else ()


@dataclass(frozen=True, slots=True)
class _Split:
    dim: int
    origins: frozenset


def _val(node):
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _dims(shape) -> list:
    return [int(d) if isinstance(d, int) or (hasattr(d, "node") and d.node.is_constant()) else str(d)
            for d in shape]


def _groups(a: list, b: list):
    """Pairs (input dims, output dims) of a view whose products agree; None when they cannot be matched."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if isinstance(a[i], str) or isinstance(b[j], str):
            if a[i] != b[j]:
                return None
            out.append(([i], [j]))
            i, j = i + 1, j + 1
            continue
        ia, jb, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a) and not isinstance(a[i], str):
                pa *= a[i]
                ia.append(i)
                i += 1
            elif pb < pa and j < len(b) and not isinstance(b[j], str):
                pb *= b[j]
                jb.append(j)
                j += 1
            else:
                return None
        out.append((ia, jb))
    if any(x != 1 for x in a[i:]) or any(x != 1 for x in b[j:]):
        return None
    return out


def _param_linear(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op != "call_function" or node.target is not LINEAR:
        return False
    w = node.args[1]
    b = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    ok = isinstance(w, fx.Node) and w.op == "get_attr" and len(w.users) == 1
    ok = ok and isinstance(_fetch(gm, w.target), nn.Parameter)
    return ok and (b is None or (isinstance(b, fx.Node) and b.op == "get_attr" and len(b.users) == 1))


def analyse(gm: fx.GraphModule) -> TPPlan:
    """The tensor-parallel pairs of a flat block graph (see the module doc); an inactive plan when there are
    none."""
    candidates = {n for n in gm.graph.nodes if _param_linear(gm, n)}
    while True:
        failed, plan = _propagate(gm, candidates)
        if not failed:
            return plan
        candidates -= failed


def _propagate(gm: fx.GraphModule, columns: set) -> tuple[set, TPPlan]:
    state: dict[fx.Node, object] = {}
    failed: set = set()
    plan = TPPlan()
    groups: dict[fx.Node, int] = {}
    rows: list[fx.Node] = []
    used_columns: set = set()

    def split_args(node):
        return [a for a in pytree.tree_flatten((node.args, node.kwargs))[0] if isinstance(a, fx.Node)]

    def fail(*origin_sets):
        for o in origin_sets:
            failed.update(o)

    for node in gm.graph.nodes:
        ins = [state.get(a) for a in split_args(node)]
        sharded = [s for x in ins for s in (x if isinstance(x, list) else [x]) if isinstance(s, _Split)]
        origins = frozenset().union(*(s.origins for s in sharded)) if sharded else frozenset()
        val = _val(node)
        if node.op == "output":
            if sharded:
                fail(origins)
            continue
        if not sharded and not (node.op == "call_function" and node in columns):
            continue
        if node.op != "call_function":
            fail(origins)
            continue
        target = node.target
        if target is LINEAR and node in columns and not sharded:
            state[node] = _Split(val.dim() - 1, frozenset({node}))
            used_columns.add(node)
            continue
        if target is LINEAR and _param_linear(gm, node):
            x = state.get(node.args[0])
            if isinstance(x, _Split) and x.dim == _val(node.args[0]).dim() - 1 and not isinstance(
                    state.get(node.args[1]), _Split):
                rows.append(node)
                continue  # the all_reduce after it makes its output whole
            fail(origins)
            continue
        if target is operator.getitem:
            src = state.get(node.args[0])
            if isinstance(src, list):
                state[node] = src[node.args[1]]
            else:
                fail(origins)
            continue
        if target in SPLITS:
            x = state[node.args[0]]
            xv = _val(node.args[0])
            dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
            dim %= xv.dim()
            size = node.args[1]
            if not isinstance(size, int):
                fail(origins)
                continue
            if dim != x.dim:
                state[node] = [x] * len(val)
                continue
            total = _dims(xv.shape)[dim]
            if isinstance(total, str) or total % size:
                fail(origins)
                continue
            parts = total // size
            for o in x.origins:
                if groups.setdefault(o, parts) != parts:
                    fail(origins)
            plan.divide.setdefault(node.name, []).append(-1)
            plan.sizes.append(size)
            state[node] = [_Split(dim, x.origins)] * parts
            continue
        if target in VIEWS:
            x = state[node.args[0]]
            a, b = _dims(_val(node.args[0]).shape), _dims(val.shape)
            matched = _groups(a, b)
            group = next(((ia, jb) for ia, jb in matched or () if x.dim in ia), None)
            if group is None or group[0][0] != x.dim or isinstance(b[group[1][0]], str):
                fail(origins)
                continue
            out_dim = group[1][0]
            shape = node.args[1]
            if not isinstance(shape[out_dim], int) or shape[out_dim] < 0:
                fail(origins)
                continue
            plan.divide.setdefault(node.name, []).append(out_dim)
            plan.sizes.append(b[out_dim])
            state[node] = _Split(out_dim, x.origins)
            continue
        if target in (torch.ops.aten.transpose.int, torch.ops.aten.permute.default, torch.ops.aten.t.default):
            x = state[node.args[0]]
            n = _val(node.args[0]).dim()
            if target is torch.ops.aten.permute.default:
                order = [d % n for d in node.args[1]]
            else:
                d0, d1 = (0, 1) if target is torch.ops.aten.t.default else (node.args[1] % n, node.args[2] % n)
                order = list(range(n))
                order[d0], order[d1] = order[d1], order[d0]
            state[node] = _Split(order.index(x.dim), x.origins)
            continue
        if target in ATTENTION:
            q, k, v = (state.get(a) for a in node.args[:3])
            extra = [state.get(a) for a in node.args[3:4] if isinstance(a, fx.Node)]
            mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
            mask_ok = mask is None or (isinstance(mask, fx.Node) and _val(mask).dim() < 3) or \
                (isinstance(mask, fx.Node) and _val(mask).shape[-3] == 1)
            if all(isinstance(s, _Split) and s.dim == 1 for s in (q, k, v)) and mask_ok and not any(
                    isinstance(s, _Split) for s in extra):
                state[node] = _Split(1, origins)
            else:
                fail(origins)
            continue
        if target in PASS_THROUGH and len(sharded) == 1 and isinstance(state.get(node.args[0]), _Split):
            state[node] = state[node.args[0]]
            continue
        if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
            out_dims = val.dim()
            neg = {s.dim - _val(a).dim() for a, s in zip(split_args(node), ins) if isinstance(s, _Split)}
            ok = len(neg) == 1
            if ok:
                d = neg.pop()
                for a, s in zip(split_args(node), ins):
                    av = _val(a)
                    if isinstance(s, _Split) or not isinstance(av, torch.Tensor):
                        continue
                    at = av.dim() + d
                    if at >= 0 and _dims(av.shape)[at] != 1:
                        ok = False
            if ok:
                state[node] = _Split(out_dims + d, origins)
            else:
                fail(origins)
            continue
        fail(origins)

    # A column whose region reaches no row-parallel linear stays whole.
    reached = frozenset().union(*(state[r.args[0]].origins for r in rows)) if rows else frozenset()
    failed.update(c for c in used_columns if c not in reached)
    if failed:
        return failed, plan
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    # In graph order: the plan is the same in every process (a set of nodes iterates by address), and
    # parallelize_module's collectives follow its order.
    for c in sorted(used_columns, key=order.__getitem__):
        g = groups.get(c, 1)
        plan.columns[c.name] = g
        out_features = _val(c).shape[-1]
        plan.sizes.append(int(out_features) // g)
        w, b = c.args[1], (c.args[2] if len(c.args) > 2 else None)
        plan.params[w.target] = ParamShard(0, g)
        if b is not None:
            plan.params[b.target] = ParamShard(0, g)
        if c.args[0].name not in plan.inputs:
            plan.inputs.append(c.args[0].name)
    for r in rows:
        plan.rows.append(r.name)
        plan.params[r.args[1].target] = ParamShard(1, 1)
        plan.sizes.append(int(_val(r.args[0]).shape[-1]))
    return set(), plan


# -- one tensor rank's graph -----------------------------------------------------------------------


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
            attrs[node.target] = _fetch(gm, node.target)
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

    def shard(target: str, spec: ParamShard, arranged: bool):
        value = attrs[target]
        data = spec.arranged(value.detach(), tp) if arranged else spec.local(value.detach(), tp, rank)
        return nn.Parameter(data.contiguous(), requires_grad=value.requires_grad) if isinstance(
            value, nn.Parameter) else data.contiguous()

    if mode == "local":
        for target, spec in plan.params.items():
            attrs[target] = shard(target, spec, arranged=False)
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
    else:
        for name in list(plan.columns) + plan.rows:
            node = by_name[name]
            w, b = node.args[1], (node.args[2] if len(node.args) > 2 else None)
            path = w.target.rsplit(".", 1)[0]
            spec_w = plan.params[w.target]
            weight = shard(w.target, spec_w, arranged=True)
            cls = RowParallelLinear if name in plan.rows else nn.Linear
            linear = cls(weight.shape[1], weight.shape[0], bias=b is not None, device=weight.device,
                         dtype=weight.dtype)
            linear.weight = weight
            if b is not None:
                spec_b = plan.params.get(b.target)
                linear.bias = shard(b.target, spec_b, arranged=True) if spec_b is not None else attrs[b.target]
            attrs[path] = linear
            with graph.inserting_before(node):
                call = graph.call_module(path, (node.args[0],))
            node.replace_all_uses_with(call)
            graph.erase_node(node)
            for attr in (w, b):
                if attr is not None:
                    attrs.pop(attr.target, None)
                    graph.erase_node(attr)
    module = fx.GraphModule(attrs, graph)
    if module.graph.eliminate_dead_code():  # it needs the owning module (call_module purity)
        module = fx.GraphModule(attrs, module.graph)  # only the attributes the graph still reads
    module.graph.lint()
    return module


class RowParallelLinear(nn.Linear):
    """A row-parallel linear layer of an export-mode graph: its forward leaves the bias out, which the
    parallel style adds after the partial outputs are summed (Megatron's order: the bias once, whole, on every
    rank). Its parameters keep ``nn.Linear``'s names."""

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


def export_styles(plan: TPPlan) -> dict[str, str]:
    """For ``parallelize_module``: each linear's module path in an export-mode graph -> ``colwise`` / ``rowwise``."""
    out = {}
    for target, spec in plan.params.items():
        if target.endswith(".weight"):
            out[target.rsplit(".", 1)[0]] = "colwise" if spec.dim == 0 else "rowwise"
    return out


# -- running a tensor-parallel chunk in one process -------------------------------------------------------


class _Broadcast(torch.autograd.Function):
    """Rank 0's tensor to every rank's slot (a broadcast on the fabric); backward: rank 0's gradient (the ranks'
    gradients of a replicated input are equal)."""

    @staticmethod
    def forward(ctx, x, slots):
        import collectives

        outs = [x.view_as(x)] + [torch.empty(x.shape, dtype=x.dtype, device=torch.device("hybrid", s))
                                 for s in slots[1:]]
        collectives.broadcast([x.contiguous()] + outs[1:], root=0)
        if not x.is_floating_point():
            ctx.mark_non_differentiable(*outs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return grads[0], None


class _Take0(torch.autograd.Function):
    """The ranks' equal copies of a replicated output -> rank 0's; backward: its gradient broadcast to every
    rank."""

    @staticmethod
    def forward(ctx, *xs):
        ctx.slots = [x.device.index for x in xs]
        return xs[0].view_as(xs[0])

    @staticmethod
    def backward(ctx, grad):
        import collectives

        grad = grad.contiguous()
        outs = [grad] + [torch.empty_like(grad, device=torch.device("hybrid", s)) for s in ctx.slots[1:]]
        collectives.broadcast(outs, root=0)
        return tuple(outs)


class _SumForward(torch.autograd.Function):
    """``g``: the row-parallel partial outputs summed over the ranks (all_reduce); backward: identity."""

    @staticmethod
    def forward(ctx, *xs):
        import collectives

        xs = [x.contiguous() for x in xs]
        outs = [torch.empty_like(x) for x in xs]
        collectives.all_reduce(xs, outputs=outs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return grads


class _SumBackward(torch.autograd.Function):
    """``f``: identity; backward: the region input's gradients summed over the ranks (all_reduce)."""

    @staticmethod
    def forward(ctx, *xs):
        ctx.like = [(x.shape, x.dtype, x.device) for x in xs]
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def backward(ctx, *grads):
        import collectives

        grads = [g.contiguous() if g is not None else torch.zeros(s, dtype=d, device=dev)
                 for g, (s, d, dev) in zip(grads, ctx.like)]
        outs = [torch.empty_like(g) for g in grads]
        collectives.all_reduce(grads, outputs=outs)
        return tuple(outs)


def run_lockstep(graphs: list[fx.GraphModule], inputs: list[list]) -> list:
    """Run the ranks' graphs of one block side by side (same structure, one node at a time across the ranks),
    the markers as joint collectives; returns each rank's output."""
    interpreters = [fx.Interpreter(g) for g in graphs]
    orders = [list(g.graph.nodes) for g in graphs]
    for interp, args in zip(interpreters, inputs):
        interp.env = {}
        interp.args_iter = iter(args)
    outputs = [None] * len(graphs)
    for k, node in enumerate(orders[0]):
        if node.op == "call_function" and node.target in MARKERS:
            values = [interp.env[orders[r][k].args[0]] for r, interp in enumerate(interpreters)]
            joint = _SumBackward if node.target is tp_region_input else _SumForward
            for r, (interp, value) in enumerate(zip(interpreters, joint.apply(*values))):
                interp.env[orders[r][k]] = value
            continue
        for r, interp in enumerate(interpreters):
            n = orders[r][k]
            value = interp.run_node(n)
            if n.op == "output":
                outputs[r] = value
            else:
                interp.env[n] = value
    return outputs


class TensorParallelChunk(nn.Module):
    """A stage's blocks on ``tp`` slots (the in-process runner's replica of a tensor-parallel stage): inputs
    arrive on the first slot and are broadcast, each block runs its ranks' graphs side by side (column/row
    regions split, the rest whole on every slot, the two all_reduces on the fabric), and the first slot's copy
    of the outputs leaves (their gradients are broadcast back)."""

    def __init__(self, ranks: list[list[fx.GraphModule]], wiring, input_names, output_names, last: bool,
                 out_spec, slots: tuple[int, ...]):
        super().__init__()
        self.ranks = nn.ModuleList(nn.ModuleList(blocks) for blocks in ranks)
        self.wiring = wiring
        self.input_names, self.output_names = input_names, output_names
        self.last, self.out_spec = last, out_spec
        self.slots = tuple(slots)

    @property
    def blocks(self) -> nn.ModuleList:
        """Rank 0's blocks."""
        return self.ranks[0]

    def forward(self, *args):
        tp = len(self.slots)
        envs = [dict() for _ in range(tp)]
        for name, value in zip(self.input_names, args):
            copies = _Broadcast.apply(value, self.slots) if isinstance(value, torch.Tensor) else (value,) * tp
            for env, c in zip(envs, copies):
                env[name] = c
        for k, (ins, outs) in enumerate(self.wiring):
            results = run_lockstep([blocks[k] for blocks in self.ranks], [[env[n] for n in ins] for env in envs])
            for env, result in zip(envs, results):
                if len(outs) == 1 and not isinstance(result, (tuple, list)):
                    env[outs[0]] = result
                else:
                    env.update(zip(outs, result))
        values = []
        for n in self.output_names:
            copies = [env[n] for env in envs]
            first = copies[0]
            if isinstance(first, torch.Tensor) and first.requires_grad:
                values.append(_Take0.apply(*copies))
            else:
                values.append(first)
        if self.last:
            return pytree.tree_unflatten(values, self.out_spec)
        return tuple(values)


__all__ = ["DEGREES", "ParamShard", "RowParallelLinear", "TPPlan", "TensorParallelChunk", "analyse", "export_styles",
           "flatten", "recording", "run_lockstep", "shard_block", "tp_region_input", "tp_region_output"]
