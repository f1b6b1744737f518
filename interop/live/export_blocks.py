"""Cut a model into a sequence of blocks from its own structure.

The model is traced with ``torch.export`` (batch dimension dynamic) and split
where torch.distributed.pipelining splits models: at ``pipe_split()`` markers,
placed here before every repeated layer (an ``nn.ModuleList``/``nn.Sequential``
of same-class children: HF decoder layers, ``blocks``) and after the last one,
so that the embeddings, each layer and the head come out as blocks. A model
with no such list is cut at its top-level children that own parameters; a model
with neither is refused with an error that says how to mark split points.

:func:`cut` returns :class:`ExportedBlocks`: the blocks (each an ``fx.GraphModule``
holding the model's own parameters under their own names), the values that
cross each boundary (shapes in terms of the batch size), and
:meth:`ExportedBlocks.stage_module` to run any contiguous range of blocks as one
module. The planner costs blocks, the runner runs stage modules, the export
builds ``PipelineStage``\\ s from the same stage modules.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from types import MethodType
from typing import Any, Callable, Hashable

import torch
import torch.fx as fx
import torch.nn as nn
from torch.distributed.pipelining import SplitPoint, pipe_split
from torch.utils import _pytree as pytree

from planner.blocks import ModelBlocks
from planner.profile import BlockProfile, Shard, trace_profile

ROLES = ("embedding", "layer", "head", "block")
"""What a block is: the part before the first repeated layer, one layer, the part after the last, or a
block of a model cut at its top-level children / the user's split points."""

SPLIT_SPEC_HINT = (
    "mark split points with the pipelining API's split spec, e.g. "
    "interop.plan(model, inputs, split_spec={'layers.1': SplitPoint.BEGINNING, ...}) with "
    "`from torch.distributed.pipelining import SplitPoint`, or call "
    "torch.distributed.pipelining.pipe_split() inside forward where a block should end")


class NoBlockStructure(ValueError):
    """The model has no structure to cut it at (no repeated layers, fewer than two top-level children
    with parameters, no split points)."""


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """A value that crosses a block boundary (or enters the model)."""

    name: str
    kind: str
    """``"tensor"``, ``"int"`` (a size, in terms of the batch) or ``"const"``."""
    shape: tuple = ()
    """Per dimension an int, or a sympy expression in the batch symbol."""
    dtype: torch.dtype | None = None
    batch_dim: int | None = None
    """The dimension that scales with the batch (split across microbatches and replicas); None if none."""
    expr: Any = None
    """For ``int``: the sympy expression in the batch symbol; for ``const``: the value."""

    def concrete_shape(self, batch: int, symbol) -> tuple[int, ...]:
        return tuple(_eval(d, batch, symbol) for d in self.shape)

    def nbytes(self, batch: int, symbol) -> int:
        """Bytes of this value for a (micro)batch of ``batch`` rows (0 for non-tensors)."""
        if self.kind != "tensor":
            return 0
        n = 1
        for d in self.concrete_shape(batch, symbol):
            n *= d
        return n * self.dtype.itemsize


@dataclass(slots=True)
class Block:
    """One block of the model: a pipelining submodule holding the model's own parameters."""

    index: int
    name: str
    """The layer's name (``transformer.h.3``), or ``embedding`` / ``head``."""
    role: str
    """One of :data:`ROLES`."""
    module: fx.GraphModule
    inputs: tuple[str, ...]
    """Value names it takes, in argument order."""
    outputs: tuple[str, ...]
    """Value names it produces, in output order (one name: the module returns that value itself)."""
    params: tuple[str, ...]
    """Fully qualified names (the model's own) of the parameters it uses, tied names included."""
    param_bytes: int
    """Bytes of its distinct parameters."""
    param_count: int

    def __repr__(self) -> str:
        return f"Block({self.index}, {self.name!r}, {self.role}, {self.param_count:,} params)"


class ExportedBlocks(ModelBlocks):
    """A real model cut into blocks (see the module doc); ``values`` describes every value crossing a
    boundary. As a :class:`~planner.ModelBlocks`, each block's profile for a shard is its own
    GraphModule traced on the meta device for ``shard.microbatch`` rows (the sequence length is the
    example inputs'); the last block's profile includes the loss."""

    def __init__(self, blocks: list[Block], values: dict[str, ValueSpec], inputs: tuple[str, ...],
                 outputs: tuple[str, ...], out_spec: Any, in_spec: Any, batch_symbol: Any, example_batch: int,
                 tied: dict[str, tuple[int, ...]], canonical: dict[str, str], model_name: str,
                 example_targets: Any = None, loss_fn: Callable | None = None):
        super().__init__()
        self.blocks = blocks
        self.values = values
        self.inputs = inputs
        """Names of the model's (flattened) inputs."""
        self.outputs = outputs
        """Names of the values the model returns (flattened)."""
        self.out_spec = out_spec
        """pytree spec that rebuilds the model's own output (a tensor, a tuple, an HF ModelOutput)."""
        self.in_spec = in_spec
        self.batch_symbol = batch_symbol
        """The sympy symbol of the batch dimension."""
        self.example_batch = example_batch
        self.tied = tied
        """Parameter name -> the blocks that each hold a copy (names used by more than one block)."""
        self.canonical = canonical
        """Every state-dict name of the model -> the first name of the same tensor (tied names share one)."""
        self.model_name = model_name
        self.name = model_name
        self.names = tuple(b.name for b in blocks)
        roles = [b.role for b in blocks]
        layer_idx = [i for i, r in enumerate(roles) if r == "layer"]
        self.layers = range(layer_idx[0], layer_idx[-1] + 1) if layer_idx else range(0, len(blocks))
        self.hidden_size = 0
        self.loss_fn = loss_fn
        """``loss_fn(outputs, targets)`` the last block's profile includes (default: cross-entropy over
        the last dimension, targets the outputs' leading dimensions)."""
        self.example_targets = example_targets

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> Block:
        return self.blocks[i]

    # -- dataflow ---------------------------------------------------------------------

    def live(self, boundary: int) -> tuple[str, ...]:
        """Values that cross boundary ``boundary`` (before block ``boundary``): defined earlier, used at or
        after it. Boundary 0 is the model's inputs; boundary ``len(self)`` the model's outputs."""
        if boundary <= 0:
            return self.inputs
        if boundary >= len(self.blocks):
            return self.outputs
        defined: list[str] = list(self.inputs)
        for b in self.blocks[:boundary]:
            defined.extend(b.outputs)
        used = set(self.outputs)
        for b in self.blocks[boundary:]:
            used.update(b.inputs)
        return tuple(n for n in dict.fromkeys(defined) if n in used)

    def boundary_bytes(self, boundary: int, batch: int) -> int:
        """Bytes of the tensors crossing ``boundary`` for a (micro)batch of ``batch`` rows."""
        return sum(self.values[n].nbytes(batch, self.batch_symbol) for n in self.live(boundary))

    def stage_module(self, start: int, stop: int) -> StageModule:
        """The blocks ``start..stop-1`` as one module: takes ``live(start)``, returns ``live(stop)``
        (the last stage returns the model's own output structure)."""
        if not 0 <= start < stop <= len(self.blocks):
            raise ValueError(f"blocks: expected 0 <= start < stop <= {len(self.blocks)}, got {start}..{stop}")
        return StageModule(self, start, stop)

    def param_names(self, start: int = 0, stop: int | None = None) -> list[str]:
        names: dict[str, None] = {}
        for b in self.blocks[start:stop]:
            names.update(dict.fromkeys(b.params))
        return list(names)

    def example_value(self, name: str, batch: int, device="meta", *, generator=None) -> Any:
        """A value of ``name``'s spec for ``batch`` rows (meta tensors by default), to trace a block with."""
        spec = self.values[name]
        if spec.kind == "int":
            return _eval(spec.expr, batch, self.batch_symbol)
        if spec.kind == "const":
            return spec.expr
        shape = spec.concrete_shape(batch, self.batch_symbol)
        if spec.dtype.is_floating_point:
            return torch.zeros(shape, dtype=spec.dtype, device=device)
        return torch.zeros(shape, dtype=spec.dtype, device=device)

    # -- the step model's view (ModelBlocks) ---------------------------------------------

    def tied_parameters(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Parameters held by several blocks: name -> (bytes, the blocks holding a copy)."""
        out = {}
        for name, holders in self.tied.items():
            module = self.blocks[holders[0]].module
            for pname, p in module.named_parameters(remove_duplicate=False):
                if self.canonical.get(pname, pname) == name:
                    out[name] = (p.numel() * p.element_size(), holders)
                    break
        return out

    def signature(self, index: int) -> Hashable:
        """Blocks with the same role, parameter shapes and boundary values trace alike (one trace)."""
        b = self.blocks[index]
        params = tuple((tuple(p.shape), p.dtype) for _, p in b.module.named_parameters())
        io = tuple(self._spec_key(n) for n in b.inputs) + tuple(self._spec_key(n) for n in b.outputs)
        last = index == len(self.blocks) - 1
        return (b.role, params, io, last)

    def _spec_key(self, name: str):
        v = self.values[name]
        return (v.kind, tuple(str(d) for d in v.shape), str(v.dtype), v.batch_dim)

    def check_shard(self, shard: Shard) -> None:
        for dim in ("cp", "ep"):
            if getattr(shard, dim) != 1:
                raise ValueError(f"{dim}: a model cut with torch.export runs its blocks whole on each replica; "
                                 f"{dim}={getattr(shard, dim)} is not supported for {self.name}")
        if shard.tp != 1 and shard.tp not in self.tp_degrees():
            found = self.tp_degrees()
            raise ValueError(f"tp: {self.name} splits its linear layers over {list(found) or 'no'} tensor-parallel "
                             f"degree(s), not {shard.tp}" + ("" if found else " (no column/row pair of linear "
                                                                                "layers found in its blocks)"))
        if shard.tp != 1 and shard.sequence_parallel:
            raise ValueError("sequence_parallel: the planner's tensor parallelism keeps whole activations between "
                             "its regions (Megatron without sequence parallelism); use sequence_parallel=False")

    # -- tensor parallelism (interop.live.tensor_parallel) ------------------------------

    def tp_plan(self, index: int):
        """Block ``index``'s column/row-parallel linear pairs (:class:`~interop.live.tensor_parallel.TPPlan`;
        inactive when it has none)."""
        from interop.live.tensor_parallel import analyse, flatten

        plans = self.__dict__.setdefault("_tp_plans", {})  # by block: a plan names that block's own nodes
        if index not in plans:
            plans[index] = analyse(flatten(self.blocks[index].module))
        return plans[index]

    def tp_degrees(self) -> tuple[int, ...]:
        """The tensor-parallel degrees every block with column/row pairs supports (blocks without run whole on
        every slot of a tensor-parallel stage); () when no block has any."""
        plans = [self.tp_plan(i) for i in range(len(self.blocks))]
        active = [p for p in plans if p.active]
        if not active:
            return ()
        return tuple(d for d in active[0].degrees() if all(p.supports(d) for p in active))

    def chunk_collectives(self, chunk: range, shard: Shard) -> tuple:
        """A tensor-parallel stage (the in-process runner's :class:`~interop.live.tensor_parallel.
        TensorParallelChunk`) broadcasts its inputs from its first slot to the others, and its output gradients
        back the same way (its first slot's copy of the output is the one that leaves)."""
        from planner.profile import Collective

        if shard.tp == 1:
            return ()
        rows = shard.microbatch
        out = []
        for name in self.live(chunk.start):
            spec = self.values[name]
            if spec.kind == "tensor":
                out.append(Collective("broadcast", "tp", spec.nbytes(rows, self.batch_symbol), "forward"))
        for name in self.live(chunk.stop):
            spec = self.values[name]
            if spec.kind == "tensor" and spec.dtype.is_floating_point:
                out.append(Collective("broadcast", "tp", spec.nbytes(rows, self.batch_symbol), "backward"))
        return tuple(out)

    def meta_module(self, index: int) -> nn.Module:
        """Block ``index`` with every tensor on the meta device (nothing allocated), its attention calls
        made through ``F.scaled_dot_product_attention`` so that the trace records the fused kernel a device
        runs (export records the aten op, which decomposes to the math path on meta)."""
        import torch.nn.functional as F

        module = bind(self.blocks[index].module, None, "meta", self.canonical)
        sdpa = torch.ops.aten.scaled_dot_product_attention.default
        for mod in module.modules():
            graph = getattr(mod, "graph", None)
            if not isinstance(graph, fx.Graph):
                continue
            changed = False
            for node in graph.nodes:
                if node.op == "call_function" and node.target is sdpa:
                    node.target = F.scaled_dot_product_attention
                    changed = True
            if changed and isinstance(mod, fx.GraphModule):
                mod.recompile()
        return module

    def _trace(self, index: int, shard: Shard) -> BlockProfile:
        import torch

        from planner.profile import Collective
        from interop.live.tensor_parallel import flatten, recording, shard_block

        b = self.blocks[index]
        module = self.meta_module(index)
        plan = self.tp_plan(index)
        split = shard.tp > 1 and plan.active
        if split:  # tensor rank 0's graph: its shards, its regions' sizes; the markers note the all_reduces
            module = shard_block(flatten(module), plan, shard.tp, 0, "local")
        rows = shard.microbatch
        args = [self.example_value(n, rows) for n in b.inputs]
        last = index == len(self.blocks) - 1
        if last:
            loss_fn = self.loss_fn or default_loss
            whole = tuple(b.outputs) == tuple(self.outputs)

            def model_output(out):
                flat = list(out) if isinstance(out, (tuple, list)) else [out]
                return pytree.tree_unflatten(flat, self.out_spec) if whole else out

            targets = self._meta_targets(model_output(module(*args)), rows)

            def block(*xs):
                return loss_fn(model_output(module(*xs)), targets)
        else:
            def block(*xs):
                out = module(*xs)
                flat = out if isinstance(out, (tuple, list)) else (out,)
                grads = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
                return grads[0] if grads else next(t for t in flat if isinstance(t, torch.Tensor))

        params = [p for _, p in module.named_parameters()]
        for p in params:
            # Gradients accumulate into existing buffers (DDP's bucket views; the runner's flat buffer):
            # each microbatch's backward adds into every parameter's .grad, and the trace records those adds.
            p.grad = torch.zeros_like(p)
        with recording() as notes:
            profile = trace_profile(b.name, block, args, shard=shard, params=params, hidden_size=None)
        peak = live_peak(block, args, params)
        extra = {}
        if split:
            # The runner all-reduces where the markers stand, exposed (no overlap with the GEMMs beside them);
            # model FLOPs are the whole block's, counted once.
            extra["collectives"] = tuple(Collective("all_reduce", "tp", nbytes, phase) for phase, nbytes in notes)
            extra["model_flops"] = self.profile(index, dataclasses.replace(shard, tp=1)).model_flops
        return dataclasses.replace(profile, workspace=max(0, peak - profile.saved_bytes("none")), **extra)

    def _meta_targets(self, outputs, rows: int):
        import torch

        if self.example_targets is not None:
            return pytree.tree_map(
                lambda t: torch.empty((rows,) + tuple(t.shape[1:]), dtype=t.dtype, device="meta")
                if isinstance(t, torch.Tensor) else t, self.example_targets)
        logits = _first_tensor(outputs)
        return torch.zeros(logits.shape[:-1], dtype=torch.long, device="meta")

    def describe(self) -> list[dict]:
        """One row per block: index, name, role, parameters, bytes of the activations it passes on
        (per row of the batch)."""
        return [{"index": b.index, "name": b.name, "role": b.role, "params": b.param_count,
                 "param_bytes": b.param_bytes, "out_bytes_per_row": self.boundary_bytes(b.index + 1, 1)}
                for b in self.blocks]


class StageModule(nn.Module):
    """A contiguous range of blocks run as one module (the unit a pipeline stage holds)."""

    def __init__(self, blocks: ExportedBlocks, start: int, stop: int):
        super().__init__()
        self.start, self.stop = start, stop
        self.input_names = blocks.live(start)
        self.output_names = blocks.live(stop)
        self.last = stop == len(blocks)
        self.out_spec = blocks.out_spec
        self.wiring = [(b.inputs, b.outputs) for b in blocks.blocks[start:stop]]
        self.blocks = nn.ModuleList(b.module for b in blocks.blocks[start:stop])

    def forward(self, *args):
        env = dict(zip(self.input_names, args))
        for module, (ins, outs) in zip(self.blocks, self.wiring):
            result = module(*(env[n] for n in ins))
            if len(outs) == 1 and not isinstance(result, (tuple, list)):
                env[outs[0]] = result
            else:
                env.update(zip(outs, result))
        values = [env[n] for n in self.output_names]
        if self.last:
            return pytree.tree_unflatten(values, self.out_spec)
        return tuple(values)


# -- cutting ------------------------------------------------------------------------------


def live_peak(block: Callable, inputs, params) -> int:
    """The most bytes of tensors made by ``block(*inputs)``'s forward and backward alive at once, on the meta
    device: saved activations, outputs, activation and weight-gradient temporaries (storages counted once,
    freed when their last tensor dies; the parameters, their gradients and the inputs are not counted)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    outside = {t.untyped_storage()._cdata for t in list(params) + [p.grad for p in params if p.grad is not None]}
    outside |= {t.untyped_storage()._cdata for t in inputs if isinstance(t, torch.Tensor)}

    class Live(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, list[int]] = {}
            self.current = self.peak = 0

        def _release(self, key: int) -> None:
            entry = self.live.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] == 0:
                    self.current -= entry[0]
                    del self.live[key]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in pytree.tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                key = t.untyped_storage()._cdata
                if key in outside:
                    continue
                entry = self.live.get(key)
                if entry is None:
                    entry = self.live[key] = [t.untyped_storage().nbytes(), 0]
                    self.current += entry[0]
                    self.peak = max(self.peak, self.current)
                entry[1] += 1
                weakref.finalize(t, self._release, key)
            return out

    mode = Live()
    leaves = [x.detach().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x for x in inputs]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            outside.add(x.untyped_storage()._cdata)
    # Saved tensors are held by the packed Python object until their node's backward frees them.
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), mode:
        out = block(*leaves)
        if out.requires_grad:
            torch.autograd.backward(out, torch.ones_like(out))
        del out
    return mode.peak


def default_loss(outputs, targets):
    """Cross-entropy of the outputs' first tensor over its last dimension (an LM's logits, a classifier's
    scores) against integer targets of its leading shape: the loss a plan is costed with by default."""
    import torch.nn.functional as F

    logits = _first_tensor(outputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _first_tensor(value):
    return next(t for t in pytree.tree_flatten(value)[0] if isinstance(t, torch.Tensor))


def _eval(value, batch: int, symbol) -> int:
    if isinstance(value, int):
        return value
    return int(value.subs(symbol, batch)) if symbol is not None else int(value)


def find_layers(model: nn.Module) -> tuple[str, list[str]] | None:
    """The model's repeated layers: the ``ModuleList``/``Sequential`` with the most same-class children
    that own parameters (ties: the one with more parameters). Returns (container name, layer names)."""
    best = None
    for name, mod in model.named_modules():
        if not isinstance(mod, (nn.ModuleList, nn.Sequential)):
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


def _tensor_attrs(module: nn.Module):
    """Every tensor a module holds: parameters, buffers and plain tensor attributes (lifted constants)."""
    for mod_name, mod in module.named_modules(remove_duplicate=False):
        prefix = f"{mod_name}." if mod_name else ""
        for key, value in list(mod._parameters.items()) + list(mod._buffers.items()):
            if value is not None:
                yield prefix + key, value
        for key, value in vars(mod).items():
            if isinstance(value, torch.Tensor):
                yield prefix + key, value


def cut(model: nn.Module, example_inputs, *, split_spec: dict[str, SplitPoint] | None = None,
        loss_fn: Callable | None = None) -> ExportedBlocks:
    """Cut ``model`` into blocks (see the module doc). ``example_inputs``: the positional inputs of one
    (micro)batch; dimension 0 of every tensor input is the batch. ``split_spec``: the pipelining API's
    ``{submodule name: SplitPoint}``; without it the split points come from the model's structure."""
    from torch.distributed.pipelining._IR import MultiUseParameterConfig, Pipe

    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    flat_args, _ = pytree.tree_flatten(args)
    batch_dims = [isinstance(a, torch.Tensor) and a.dim() > 0 for a in args]
    batches = {a.shape[0] for a in flat_args if isinstance(a, torch.Tensor) and a.dim() > 0}
    if len(batches) != 1:
        raise ValueError(f"example_inputs: every tensor input needs the same batch size in dimension 0, got "
                         f"{sorted(batches) or 'no tensors'}")
    example_batch = batches.pop()

    work = copy.deepcopy(model)
    canonical = canonical_names(work)
    config = getattr(work, "config", None)
    if config is not None and getattr(config, "use_cache", False):
        config.use_cache = False  # a KV cache is an inference output; training steps do not build one
    after = None
    how = "user"
    layers = None
    if split_spec is None:
        try:
            split_spec, how = auto_split_spec(work)
        except NoBlockStructure:
            ep = _export(work, args, batch_dims)  # the user may have put pipe_split() into forward
            if not any(n.target == torch.ops.pippy._pipe_split.default for n in ep.graph.nodes):
                raise
            split_spec, how = {}, "markers"
        if how == "layers":
            layers = list(split_spec)
            after = layers[-1]
    children = [n for n, c in work.named_children() if any(True for _ in c.parameters())]
    first_child = children[0] if children else None
    _annotate(work, split_spec, after=after)
    ep = _export(work, args, batch_dims)
    symbols = list(ep.range_constraints)
    symbol = symbols[0] if symbols else None
    pipe = Pipe._from_traced(work, ep, MultiUseParameterConfig.REPLICATE)
    split = pipe.split_gm
    if pipe.num_stages < 2:
        raise NoBlockStructure(f"{type(model).__name__} came out as a single block; {SPLIT_SPEC_HINT}")

    values: dict[str, ValueSpec] = {}
    inputs: list[str] = []
    for node in split.graph.nodes:
        if node.op == "placeholder":
            inputs.append(node.name)
            values[node.name] = _value_spec(node.name, node.meta.get("val"), symbol)
    calls = [n for n in split.graph.nodes if n.op == "call_module"]
    blocks: list[Block] = []
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
        for name, val in zip(out_names, outs_meta):
            values[name] = _value_spec(name, val, symbol)
        params: dict[str, None] = {}
        nbytes = count = 0
        for pname, p in module.named_parameters(remove_duplicate=False):
            name = canonical.get(pname, pname)
            if name not in params:
                params[name] = None
                nbytes += p.numel() * p.element_size()
                count += p.numel()
        name, role = _block_name(i, len(calls), layers, first_child, split_spec, how)
        blocks.append(Block(i, name, role, module, tuple(a.name for a in node.args), tuple(out_names),
                            tuple(params), nbytes, count))
    out_node = next(n for n in split.graph.nodes if n.op == "output")
    outputs = tuple(a.name for a in pytree.tree_flatten(out_node.args[0])[0] if isinstance(a, fx.Node))
    holders: dict[str, list[int]] = {}
    for b in blocks:
        for p in b.params:
            holders.setdefault(p, []).append(b.index)
    tied = {p: tuple(h) for p, h in holders.items() if len(h) > 1}
    out_spec = ep.call_spec.out_spec
    return ExportedBlocks(blocks, values, tuple(inputs), outputs, out_spec, ep.call_spec.in_spec, symbol,
                          example_batch, tied, canonical, type(model).__name__, loss_fn=loss_fn)


def _block_name(i: int, n: int, layers, first: str | None, spec, how) -> tuple[str, str]:
    if how == "layers":
        if i == 0:
            return "embedding", "embedding"
        if i == n - 1 and n == len(layers) + 2:
            return "head", "head"
        return layers[i - 1], "layer"
    starts = [k for k, v in (spec or {}).items() if v == SplitPoint.BEGINNING]
    if how == "children" and first is not None:
        starts = [first] + starts
        if i < len(starts):
            return starts[i], "block"
    elif how == "user" and 0 < i <= len(starts) and len(starts) == n - 1:
        return starts[i - 1], "block"
    return f"block{i}", "block"


def canonical_names(model: nn.Module) -> dict[str, str]:
    """Every state-dict name -> the first name of the same tensor (so tied names map to one)."""
    first: dict[int, str] = {}
    return {n: first.setdefault(id(t), n) for n, t in model.state_dict(keep_vars=True).items()}


def bind(stage: nn.Module, model: nn.Module | None, device, canonical: dict[str, str] | None = None) -> nn.Module:
    """A copy of ``stage`` on ``device`` whose tensors are the current values of ``model``'s own
    parameters and buffers (names tied in the model stay one tensor), constants moved along, and whose
    graph ops that create tensors (``arange(..., device=cpu)``) create them on ``device``. With ``model``
    None the stage keeps its own tensors (on the meta device: shapes only), tied through ``canonical``."""
    device = torch.device(device)
    state = model.state_dict(keep_vars=True) if model is not None else {}
    if canonical is None:
        canonical = canonical_names(model) if model is not None else {}
    memo: dict[int, Any] = {}
    by_name: dict[str, Any] = {}
    modules = stage.blocks if isinstance(stage, StageModule) else [stage]
    for name, t in (item for m in modules for item in _tensor_attrs(m)):
        if id(t) in memo:
            continue
        key = canonical.get(name)
        if key is not None and key in by_name:
            memo[id(t)] = by_name[key]
            continue
        source = state[key] if key is not None and key in state else t
        value = (torch.empty_like(source, device=device) if device.type == "meta"
                 else source.detach().to(device, copy=True))
        if isinstance(t, nn.Parameter):
            value = nn.Parameter(value, requires_grad=source.requires_grad)
        memo[id(t)] = value
        if key is not None:
            by_name[key] = value
    replica = copy.deepcopy(stage, memo)
    for mod in replica.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, fx.Graph):
            continue
        changed = False
        for node in graph.nodes:
            d = node.kwargs.get("device")
            if isinstance(d, torch.device) and d != device:
                node.kwargs = {**node.kwargs, "device": device}
                changed = True
        if changed and isinstance(mod, fx.GraphModule):
            mod.recompile()
    return replica


def split_rows(value, spec: ValueSpec, start: int, stop: int, symbol, total: int):
    """Rows ``start:stop`` of a boundary value of a ``total``-row batch (ints re-evaluated for the part)."""
    if spec.kind == "int":
        return _eval(spec.expr, stop - start, symbol)
    if spec.kind != "tensor" or spec.batch_dim is None:
        return value
    return value.narrow(spec.batch_dim, start, stop - start)


def flatten_inputs(inputs) -> list:
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    return pytree.tree_flatten(args)[0]


__all__ = ["Block", "ExportedBlocks", "default_loss", "NoBlockStructure", "ROLES", "SPLIT_SPEC_HINT", "StageModule", "ValueSpec",
           "auto_split_spec", "bind", "cut", "find_layers", "flatten_inputs", "split_rows"]
