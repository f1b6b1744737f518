"""Blocks bound to devices and values: what the runners run.

:class:`StageModule` runs a contiguous range of exported blocks as one module (the unit a
pipeline stage holds); :func:`bind` copies a block or a stage module onto a device with the
model's current parameters (names the model ties stay one tensor); :func:`split_rows` takes a
replica's rows of a boundary value. :func:`tensor_attrs` lists every tensor a module holds and
:func:`canonical_names` maps a model's state-dict names to one name per tensor, which the
runners use to name parameters and gradients the model's way.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
from torch.utils import _pytree as pytree


class StageModule(nn.Module):
    """A contiguous range of blocks run as one module (the unit a pipeline stage holds): takes the values
    live before its first block, returns those live after its last (the last stage returns the model's own
    output structure)."""

    def __init__(self, blocks, start: int, stop: int):
        """``blocks``: the :class:`~interop.live.exported_blocks.ExportedBlocks` whose blocks ``start..stop-1``
        it runs."""
        super().__init__()
        self.start, self.stop = start, stop
        self.input_names = blocks.live(start)
        self.output_names = blocks.live(stop)
        self.last = stop == len(blocks)
        self.out_spec = blocks.out_spec
        self.wiring = [(b.inputs, b.outputs) for b in blocks.blocks[start:stop]]
        self.blocks = nn.ModuleList(b.module for b in blocks.blocks[start:stop])
        self.copies = [copied_inputs(blocks, i, self.input_names) for i in range(start, stop)]
        """Per block, the inputs it copies before it writes them in place (:func:`copied_inputs`)."""

    def forward(self, *args):
        return lockstep([self.steps(*args)])[0]

    def steps(self, *args):
        """:meth:`forward` one block at a time: a generator that yields after each block and returns what
        ``forward`` returns (:func:`lockstep` runs several in step)."""
        env = dict(zip(self.input_names, args))
        for module, (ins, outs), copies in zip(self.blocks, self.wiring, self.copies):
            result = module(*(env[n].clone() if n in copies else env[n] for n in ins))
            if len(outs) == 1 and not isinstance(result, (tuple, list)):
                env[outs[0]] = result
            else:
                env.update(zip(outs, result))
            yield
        values = [env[n] for n in self.output_names]
        if self.last:
            return pytree.tree_unflatten(values, self.out_spec)
        return tuple(values)


def lockstep(runs) -> list:
    """Run generators (:meth:`StageModule.steps`) in step, one block of each in turn, and return what each
    returned. Data-parallel replicas run so (:mod:`interop.live.shared_replicas`) make their autograd nodes block
    by block, so that one backward over all of them runs block by block too: each replica's block ``k`` before
    any replica's block ``k - 1`` (autograd runs the latest-made node first)."""
    out: list = [None] * len(runs)
    live = dict(enumerate(runs))
    while live:
        for i, run in list(live.items()):
            try:
                next(run)
            except StopIteration as stop:
                out[i] = stop.value
                del live[i]
    return out


def copied_inputs(blocks, index: int, stage_inputs=()) -> frozenset[str]:
    """The inputs block ``index`` copies before it writes them in place: a stage's input is a leaf that requires
    a gradient, which autograd refuses to write (in the whole model it was an intermediate), so the block
    writes a copy. So does the block's trace, which cannot know the stage; the runner does the same wherever
    the block is the value's only reader, so that prediction and execution copy alike (a value another block
    also reads keeps the one tensor the model wrote, unless it enters the stage)."""
    writes = getattr(blocks, "writes", None)
    if writes is None:
        return frozenset()
    readers = [b for b in blocks.blocks if set(b.inputs) & writes(index)]
    return frozenset(n for n in writes(index)
                     if n in stage_inputs or (n not in blocks.outputs
                                              and sum(n in b.inputs for b in readers) == 1))


def canonical_names(model: nn.Module) -> dict[str, str]:
    """Every state-dict name -> the first name of the same tensor (so tied names map to one)."""
    first: dict[int, str] = {}
    return {n: first.setdefault(id(t), n) for n, t in model.state_dict(keep_vars=True).items()}


def tensor_attrs(module: nn.Module):
    """Every tensor a module holds, as (dotted name, tensor): parameters, buffers and plain tensor attributes
    (torch.export's lifted constants), shared ones once per name."""
    for mod_name, mod in module.named_modules(remove_duplicate=False):
        prefix = f"{mod_name}." if mod_name else ""
        for key, value in list(mod._parameters.items()) + list(mod._buffers.items()):
            if value is not None:
                yield prefix + key, value
        for key, value in vars(mod).items():
            if isinstance(value, torch.Tensor):
                yield prefix + key, value


def bind(stage: nn.Module, model: nn.Module | None, device, canonical: dict[str, str] | None = None,
         shared: dict[str, torch.Tensor] | None = None) -> nn.Module:
    """A copy of ``stage`` on ``device`` whose tensors are the current values of ``model``'s own
    parameters and buffers (names tied in the model stay one tensor), constants moved along, and whose
    graph ops that create tensors (``arange(..., device=cpu)``) create them on ``device``. With ``model``
    None the stage keeps its own tensors (on the meta device: shapes only), tied through ``canonical``.
    ``shared``: parameters (canonical name -> a tensor on another emulated slot, equal to the model's) that the
    copy holds over those bytes instead, charged on ``device`` (:mod:`interop.live.shared_replicas`)."""
    device = torch.device(device)
    state = model.state_dict(keep_vars=True) if model is not None else {}
    if canonical is None:
        canonical = canonical_names(model) if model is not None else {}
    memo: dict[int, Any] = {}
    by_name: dict[str, Any] = {}
    # A stage module's tensors are named as in its blocks (the model's names), not under "blocks.<k>.".
    modules = stage.blocks if isinstance(stage, StageModule) else [stage]
    for name, t in (item for m in modules for item in tensor_attrs(m)):
        if id(t) in memo:
            continue
        key = canonical.get(name)
        if key is not None and key in by_name:
            memo[id(t)] = by_name[key]
            continue
        source = state[key] if key is not None and key in state else t
        if shared and isinstance(t, nn.Parameter) and key in shared:
            from interop.live.shared_replicas import on_slot

            # A deployed replica loads its own weights: the load is made (and placed on the timeline, charged on
            # the slot) and dropped before the shared bytes are charged in its place, so that the slot's peak
            # and clocks read as with a copy of its own.
            source.detach().to(device, copy=True)
            value = on_slot(shared[key], device.index)
        else:
            value = (torch.empty_like(source, device=device) if device.type == "meta"
                     else source.detach().to(device, copy=True))
        if isinstance(t, nn.Parameter):
            value = nn.Parameter(value, requires_grad=source.requires_grad)
        memo[id(t)] = value
        if key is not None:
            by_name[key] = value
    replica = copy.deepcopy(stage, memo)
    _retarget_factories(replica, device)
    return replica


def _retarget_factories(module: nn.Module, device: torch.device) -> None:
    """Graph ops that name a fixed device create or move tensors onto ``device`` instead: factories
    (``arange(..., device=cpu)``) and moves (``aten.to.device(inv_freq, cpu)``, the rotary embeddings' move
    of their frequency buffer to the activations' device, which export records with the example's device
    as a positional argument)."""

    def moved(value):
        return device if isinstance(value, torch.device) and value != device else value

    for mod in module.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, fx.Graph):
            continue
        changed = False
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            args, kwargs = pytree.tree_map(moved, (node.args, node.kwargs))
            if args != node.args or kwargs != node.kwargs:
                node.args, node.kwargs = args, kwargs
                changed = True
        if changed and isinstance(mod, fx.GraphModule):
            mod.recompile()


def eval_size(value, batch: int, symbol) -> int:
    """A size export traced in terms of the batch (an int, or a sympy expression in ``symbol``) for a batch of
    ``batch`` rows."""
    if isinstance(value, int):
        return value
    return int(value.subs(symbol, batch)) if symbol is not None else int(value)


def split_rows(value, spec, start: int, stop: int, symbol, total: int):
    """Rows ``start:stop`` of a boundary value of a ``total``-row batch (ints re-evaluated for the part);
    ``spec``: its :class:`~interop.live.exported_blocks.ValueSpec`."""
    if spec.kind == "int":
        return eval_size(spec.expr, stop - start, symbol)
    if spec.kind != "tensor" or spec.batch_dim is None:
        return value
    return value.narrow(spec.batch_dim, start, stop - start)


__all__ = ["StageModule", "bind", "canonical_names", "eval_size", "lockstep", "split_rows", "tensor_attrs"]
