"""Finding a block's column/row pairs: the fx analysis behind :func:`analyse`.

A block cut with torch.export is flattened into one graph (:func:`flatten`); :func:`analyse` then
propagates "split along dimension d, coming from these column-parallel linears" through it, op by op
(:class:`_Propagation`), and drops every column whose region meets an op it cannot split, until the
remaining regions each end in row-parallel linears. The result is a :class:`TPPlan`: node names, the
size arguments tensor parallelism divides, and how each parameter splits (:class:`ParamShard`).
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
TRANSPOSES = (torch.ops.aten.transpose.int, torch.ops.aten.permute.default, torch.ops.aten.t.default)
ATTENTION = (torch.ops.aten.scaled_dot_product_attention.default,)
PASS_THROUGH = (torch.ops.aten.dropout.default, torch.ops.aten.clone.default, torch.ops.aten.contiguous.default,
                torch.ops.aten.alias.default, torch.ops.aten.detach.default, torch.ops.aten._to_copy.default,
                torch.ops.aten.to.dtype)
DEGREES = (2, 4, 8)
"""Tensor-parallel degrees a block is checked for."""


# -- a block as one flat graph ------------------------------------------------------------------


def fetch_attr(module: nn.Module, target: str):
    """The attribute a dotted ``get_attr`` / ``call_module`` target names."""
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
                attrs[name] = fetch_attr(mod, node.target)
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


# -- what the analysis finds ---------------------------------------------------------------------


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


def analyse(gm: fx.GraphModule) -> TPPlan:
    """The tensor-parallel pairs of a flat block graph (see the module doc); an inactive plan when there are
    none."""
    candidates = {n for n in gm.graph.nodes if _param_linear(gm, n)}
    while True:
        failed, plan = _Propagation(gm, candidates).run()
        if not failed:
            return plan
        candidates -= failed


# -- the propagation -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Split:
    """A value split along ``dim`` over the tensor ranks, by the column linears ``origins``."""

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
    ok = ok and isinstance(fetch_attr(gm, w.target), nn.Parameter)
    return ok and (b is None or (isinstance(b, fx.Node) and b.op == "get_attr" and len(b.users) == 1))


def _node_args(node: fx.Node) -> list[fx.Node]:
    return [a for a in pytree.tree_flatten((node.args, node.kwargs))[0] if isinstance(a, fx.Node)]


class _Propagation:
    """One pass over a flat graph from the candidate column linears: which values are split along which
    dimension, which linears end a region (rows), and the columns whose regions meet an op that cannot be split
    (``failed``; :func:`analyse` drops them and runs again)."""

    def __init__(self, gm: fx.GraphModule, columns: set) -> None:
        self.gm, self.columns = gm, columns
        self.state: dict[fx.Node, object] = {}
        """Node -> its :class:`_Split` (or a list of them, for an op returning several values)."""
        self.failed: set = set()
        self.plan = TPPlan()
        self.groups: dict[fx.Node, int] = {}
        """Column -> the parts its output is split into downstream."""
        self.rows: list[fx.Node] = []
        self.used_columns: set = set()

    def run(self) -> tuple[set, TPPlan]:
        for node in self.gm.graph.nodes:
            self._visit(node)
        # A column whose region reaches no row-parallel linear stays whole.
        reached = frozenset().union(*(self.state[r.args[0]].origins for r in self.rows)) if self.rows else frozenset()
        self.failed.update(c for c in self.used_columns if c not in reached)
        if self.failed:
            return self.failed, self.plan
        self._fill_plan()
        return set(), self.plan

    def _visit(self, node: fx.Node) -> None:
        ins = [self.state.get(a) for a in _node_args(node)]
        sharded = [s for x in ins for s in (x if isinstance(x, list) else [x]) if isinstance(s, _Split)]
        origins = frozenset().union(*(s.origins for s in sharded)) if sharded else frozenset()
        if node.op == "output":
            if sharded:
                self.failed.update(origins)
            return
        if not sharded and not (node.op == "call_function" and node in self.columns):
            return
        if node.op != "call_function":
            self.failed.update(origins)
            return
        target = node.target
        if target is LINEAR:
            self._linear(node, sharded, origins)
        elif target is operator.getitem:
            self._getitem(node, origins)
        elif target in SPLITS:
            self._split(node, origins)
        elif target in VIEWS:
            self._view(node, origins)
        elif target in TRANSPOSES:
            self._transpose(node)
        elif target in ATTENTION:
            self._attention(node, origins)
        elif target in PASS_THROUGH and len(sharded) == 1 and isinstance(self.state.get(node.args[0]), _Split):
            self.state[node] = self.state[node.args[0]]
        elif isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
            self._pointwise(node, ins, origins)
        else:
            self.failed.update(origins)

    def _linear(self, node: fx.Node, sharded: list, origins: frozenset) -> None:
        if node in self.columns and not sharded:  # a region starts: the output split by features
            self.state[node] = _Split(_val(node).dim() - 1, frozenset({node}))
            self.used_columns.add(node)
            return
        if _param_linear(self.gm, node):
            x = self.state.get(node.args[0])
            if isinstance(x, _Split) and x.dim == _val(node.args[0]).dim() - 1 and not isinstance(
                    self.state.get(node.args[1]), _Split):
                self.rows.append(node)  # the all_reduce after it makes its output whole
                return
        self.failed.update(origins)

    def _getitem(self, node: fx.Node, origins: frozenset) -> None:
        src = self.state.get(node.args[0])
        if isinstance(src, list):
            self.state[node] = src[node.args[1]]
        else:
            self.failed.update(origins)

    def _split(self, node: fx.Node, origins: frozenset) -> None:
        x = self.state[node.args[0]]
        xv = _val(node.args[0])
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        dim %= xv.dim()
        size = node.args[1]
        if not isinstance(size, int):
            self.failed.update(origins)
            return
        if dim != x.dim:
            self.state[node] = [x] * len(_val(node))
            return
        total = _dims(xv.shape)[dim]
        if isinstance(total, str) or total % size:
            self.failed.update(origins)
            return
        parts = total // size
        for o in x.origins:
            if self.groups.setdefault(o, parts) != parts:
                self.failed.update(origins)
        self.plan.divide.setdefault(node.name, []).append(-1)
        self.plan.sizes.append(size)
        self.state[node] = [_Split(dim, x.origins)] * parts

    def _view(self, node: fx.Node, origins: frozenset) -> None:
        x = self.state[node.args[0]]
        a, b = _dims(_val(node.args[0]).shape), _dims(_val(node).shape)
        matched = _groups(a, b)
        group = next(((ia, jb) for ia, jb in matched or () if x.dim in ia), None)
        if group is None or group[0][0] != x.dim or isinstance(b[group[1][0]], str):
            self.failed.update(origins)
            return
        out_dim = group[1][0]
        shape = node.args[1]
        if not isinstance(shape[out_dim], int) or shape[out_dim] < 0:
            self.failed.update(origins)
            return
        self.plan.divide.setdefault(node.name, []).append(out_dim)
        self.plan.sizes.append(b[out_dim])
        self.state[node] = _Split(out_dim, x.origins)

    def _transpose(self, node: fx.Node) -> None:
        x = self.state[node.args[0]]
        n = _val(node.args[0]).dim()
        if node.target is torch.ops.aten.permute.default:
            order = [d % n for d in node.args[1]]
        else:
            d0, d1 = (0, 1) if node.target is torch.ops.aten.t.default else (node.args[1] % n, node.args[2] % n)
            order = list(range(n))
            order[d0], order[d1] = order[d1], order[d0]
        self.state[node] = _Split(order.index(x.dim), x.origins)

    def _attention(self, node: fx.Node, origins: frozenset) -> None:
        # Split by heads (dimension 1) on q, k and v alike; a mask may broadcast over heads but not be split.
        q, k, v = (self.state.get(a) for a in node.args[:3])
        extra = [self.state.get(a) for a in node.args[3:4] if isinstance(a, fx.Node)]
        mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
        mask_ok = mask is None or (isinstance(mask, fx.Node) and _val(mask).dim() < 3) or \
            (isinstance(mask, fx.Node) and _val(mask).shape[-3] == 1)
        if all(isinstance(s, _Split) and s.dim == 1 for s in (q, k, v)) and mask_ok and not any(
                isinstance(s, _Split) for s in extra):
            self.state[node] = _Split(1, origins)
        else:
            self.failed.update(origins)

    def _pointwise(self, node: fx.Node, ins: list, origins: frozenset) -> None:
        # Split operands must agree on the split dimension counted from the end; whole operands must broadcast
        # along it (size 1 there).
        args = _node_args(node)
        neg = {s.dim - _val(a).dim() for a, s in zip(args, ins) if isinstance(s, _Split)}
        ok = len(neg) == 1
        if ok:
            d = neg.pop()
            for a, s in zip(args, ins):
                av = _val(a)
                if isinstance(s, _Split) or not isinstance(av, torch.Tensor):
                    continue
                at = av.dim() + d
                if at >= 0 and _dims(av.shape)[at] != 1:
                    ok = False
        if ok:
            self.state[node] = _Split(_val(node).dim() + d, origins)
        else:
            self.failed.update(origins)

    def _fill_plan(self) -> None:
        plan = self.plan
        order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        # In graph order: the plan is the same in every process (a set of nodes iterates by address), and
        # parallelize_module's collectives follow its order.
        for c in sorted(self.used_columns, key=order.__getitem__):
            g = self.groups.get(c, 1)
            plan.columns[c.name] = g
            out_features = _val(c).shape[-1]
            plan.sizes.append(int(out_features) // g)
            w, b = c.args[1], (c.args[2] if len(c.args) > 2 else None)
            plan.params[w.target] = ParamShard(0, g)
            if b is not None:
                plan.params[b.target] = ParamShard(0, g)
            if c.args[0].name not in plan.inputs:
                plan.inputs.append(c.args[0].name)
        for r in self.rows:
            plan.rows.append(r.name)
            plan.params[r.args[1].target] = ParamShard(1, 1)
            plan.sizes.append(int(_val(r.args[0]).shape[-1]))


__all__ = ["DEGREES", "ParamShard", "TPPlan", "analyse", "fetch_attr", "flatten"]
