"""A real model as exported blocks: what each block is, which values cross which boundary, and each
block's :class:`~planner.BlockProfile` for the step model.

:class:`ExportedBlocks` is what :func:`interop.live.cut.cut` returns and the
:class:`~planner.ModelBlocks` the planner prices: the blocks (each an ``fx.GraphModule``
holding the model's own parameters under their own names), the values that cross each
boundary (shapes in terms of the batch size), and :meth:`ExportedBlocks.stage_module` to run
any contiguous range of blocks as one module (:mod:`interop.live.bind`). Its profile of a block
is one trace on the meta device (:func:`planner.profile.trace_profile`: the ops, the saved
activations and the live peak together); blocks with equal signatures share it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Hashable

import torch
import torch.fx as fx
import torch.nn as nn
from torch.utils import _pytree as pytree

from interop.live.bind import StageModule, bind, copied_inputs, eval_size
from planner.blocks import ModelBlocks
from planner.profile import BlockProfile, Collective, Shard, trace_profile

ROLES = ("embedding", "layer", "head", "block")
"""What a block is: the part before the first repeated layer, one layer, the part after the last, or a
block of a model cut at its top-level children / the user's split points."""


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
    requires_grad: bool = False
    """Whether the executed step differentiates this tensor (it depends on a parameter through
    differentiable ops: :mod:`interop.live.grad_flow`); the model's inputs never are."""

    def concrete_shape(self, batch: int, symbol) -> tuple[int, ...]:
        return tuple(eval_size(d, batch, symbol) for d in self.shape)

    def nbytes(self, batch: int, symbol) -> int:
        """Bytes of this value for a (micro)batch of ``batch`` rows (0 for non-tensors)."""
        if self.kind != "tensor":
            return 0
        n = 1
        for d in self.concrete_shape(batch, symbol):
            n *= d
        return n * self.dtype.itemsize


@dataclass(slots=True)
class ExportedBlock:
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
        return f"ExportedBlock({self.index}, {self.name!r}, {self.role}, {self.param_count:,} params)"


class ExportedBlocks(ModelBlocks):
    """A real model cut into blocks (see the module doc); ``values`` describes every value crossing a
    boundary. As a :class:`~planner.ModelBlocks`, each block's profile for a shard is its own
    GraphModule traced on the meta device for ``shard.microbatch`` rows (the sequence length is the
    example inputs'); the last block's profile includes the loss."""

    def __init__(self, blocks: list[ExportedBlock], values: dict[str, ValueSpec], inputs: tuple[str, ...],
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

    def __getitem__(self, i: int) -> ExportedBlock:
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

    def example_value(self, name: str, batch: int, device="meta") -> Any:
        """A value of ``name``'s spec for ``batch`` rows (meta tensors by default), to trace a block with."""
        spec = self.values[name]
        if spec.kind == "int":
            return eval_size(spec.expr, batch, self.batch_symbol)
        if spec.kind == "const":
            return spec.expr
        return torch.zeros(spec.concrete_shape(batch, self.batch_symbol), dtype=spec.dtype, device=device)

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
        """Blocks with the same role, parameter shapes and boundary values trace alike (one trace). Computed once
        per block (the search asks for every block's profile at every candidate width)."""
        known = self.__dict__.setdefault("_signatures", {})
        if index not in known:
            known[index] = self._signature(index)
        return known[index]

    def _signature(self, index: int) -> Hashable:
        b = self.blocks[index]
        params = tuple((tuple(p.shape), p.dtype) for _, p in b.module.named_parameters())
        io = tuple(self._spec_key(n) for n in b.inputs) + tuple(self._spec_key(n) for n in b.outputs)
        last = index == len(self.blocks) - 1
        return (b.role, params, io, last)

    def _spec_key(self, name: str):
        v = self.values[name]
        return (v.kind, tuple(str(d) for d in v.shape), str(v.dtype), v.batch_dim, v.requires_grad)

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
        """One trace of block ``index`` (tensor rank 0's graph when ``shard.tp`` splits it) on the meta device:
        its ops, saved activations and live peak (:func:`~planner.profile.trace_profile` with ``workspace``)."""
        from interop.live.tensor_parallel import flatten, recording, shard_block

        b = self.blocks[index]
        module = self.meta_module(index)
        plan = self.tp_plan(index)
        split = shard.tp > 1 and plan.active
        if split:  # tensor rank 0's graph: its shards, its regions' sizes; the markers note the all_reduces
            module = shard_block(flatten(module), plan, shard.tp, 0, "local")
        args = [self.example_value(n, shard.microbatch) for n in b.inputs]
        block = self._traced_call(index, module, args, shard.microbatch)
        params = [p for _, p in module.named_parameters()]
        for p in params:
            # Gradients accumulate into existing buffers (DDP's bucket views; the runner's flat buffer):
            # each microbatch's backward adds into every parameter's .grad, and the trace records those adds.
            p.grad = torch.zeros_like(p)
        with recording() as notes:
            profile = trace_profile(b.name, block, args, shard=shard, params=params, hidden_size=None,
                                    workspace=True, grad_inputs=[self.values[n].requires_grad for n in b.inputs],
                                    composites_of="PrivateUse1")  # the ops a slot runs, as it runs them
        if not split:
            return profile
        # The runner all-reduces where the markers stand, exposed (no overlap with the GEMMs beside them);
        # model FLOPs are the whole block's, counted once.
        return dataclasses.replace(
            profile, collectives=tuple(Collective("all_reduce", "tp", nbytes, phase) for phase, nbytes in notes),
            model_flops=self.profile(index, dataclasses.replace(shard, tp=1)).model_flops)

    def writes(self, index: int) -> frozenset[str]:
        """The inputs of block ``index`` that it writes in place (a residual ``result += input`` whose ``result``
        the previous block returned): found once, by running the block on meta tensors."""
        known = self.__dict__.setdefault("_writes", {})  # by signature: blocks alike write alike
        b = self.blocks[index]
        key = self.signature(index)
        if key not in known:
            args = [self.example_value(n, self.example_batch) for n in b.inputs]
            with torch.no_grad():
                known[key] = written_arguments(self.meta_module(index), args)
        return frozenset(b.inputs[k] for k in known[key])

    def _traced_call(self, index: int, module: nn.Module, args: list, rows: int) -> Callable:
        """What the trace of block ``index`` runs: the block and, for the last, the loss on its output; otherwise
        its first output that needs a gradient (the one backward starts from). An input the block writes in
        place is copied first, as a stage whose input it is copies it (:class:`~interop.live.bind.StageModule`)."""
        copies = copied_inputs(self, index, self.blocks[index].inputs)
        written = [k for k, n in enumerate(self.blocks[index].inputs) if n in copies]
        if written:
            inner = module

            def module(*xs):
                return inner(*(x.clone() if k in written and isinstance(x, torch.Tensor) else x
                               for k, x in enumerate(xs)))
        if index < len(self.blocks) - 1:
            def block(*xs):
                out = module(*xs)
                flat = out if isinstance(out, (tuple, list)) else (out,)
                grads = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
                return grads[0] if grads else next(t for t in flat if isinstance(t, torch.Tensor))

            return block
        loss_fn = self.loss_fn or default_loss
        whole = tuple(self.blocks[index].outputs) == tuple(self.outputs)

        def model_output(out):
            flat = list(out) if isinstance(out, (tuple, list)) else [out]
            return pytree.tree_unflatten(flat, self.out_spec) if whole else out

        targets = self._meta_targets(model_output(module(*args)), rows)

        def last_block(*xs):
            return loss_fn(model_output(module(*xs)), targets)

        return last_block

    def _meta_targets(self, outputs, rows: int):
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


def parameter_names(module: nn.Module, canonical: dict[str, str]) -> tuple[tuple[str, ...], int, int]:
    """A block module's parameters by the model's own names (tied names once): (names, bytes, elements)."""
    names: dict[str, None] = {}
    nbytes = count = 0
    for pname, p in module.named_parameters(remove_duplicate=False):
        name = canonical.get(pname, pname)
        if name not in names:
            names[name] = None
            nbytes += p.numel() * p.element_size()
            count += p.numel()
    return tuple(names), nbytes, count


def default_loss(outputs, targets):
    """Cross-entropy of the outputs' first tensor over its last dimension (an LM's logits, a classifier's
    scores) against integer targets of its leading shape: the loss a plan is costed with by default."""
    import torch.nn.functional as F

    logits = _first_tensor(outputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def written_arguments(module: nn.Module, args: list) -> set[int]:
    """Positions of ``args`` that ``module(*args)`` writes in place (an op whose schema marks the argument
    written, on a tensor sharing an argument's storage)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    storages = {a.untyped_storage()._cdata: k for k, a in enumerate(args) if isinstance(a, torch.Tensor)}
    written: set[int] = set()

    class Writes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, op_args=(), kwargs=None):
            kwargs = kwargs or {}
            for i, arg in enumerate(func._schema.arguments):
                if arg.alias_info is None or not arg.alias_info.is_write:
                    continue
                value = op_args[i] if i < len(op_args) else kwargs.get(arg.name)
                if isinstance(value, torch.Tensor) and value.untyped_storage()._cdata in storages:
                    written.add(storages[value.untyped_storage()._cdata])
            return func(*op_args, **kwargs)

    with Writes():
        module(*args)
    return written


def _first_tensor(value):
    return next(t for t in pytree.tree_flatten(value)[0] if isinstance(t, torch.Tensor))


__all__ = ["ROLES", "ExportedBlock", "ExportedBlocks", "ValueSpec", "default_loss"]
