"""Which values of an exported block carry a gradient: autograd's rule, read off the block's graph.

A block's trace (:meth:`~interop.live.exported_blocks.ExportedBlocks.profile`) runs its forward and backward on
the meta device. An input that the executed step would not differentiate (a rotary table moved from a buffer,
an attention mask, token ids) must not require a gradient there either, or the trace records a backward the
runner never runs (the broadcast reductions of a rotary table's gradient were 15 % of a torchtitan-style
Llama's predicted step). ``torch.export`` does not keep ``requires_grad`` on its values, so it is propagated
here the way autograd does: an output requires a gradient when it is floating point and one of its inputs
does, except from the ops that make a new tensor from another's shape (``zeros_like`` ...) or detach it.
The pipeline runner sets ``requires_grad`` on the values it receives by the same rule (it asks the producing
stage's output).
"""

from __future__ import annotations

import operator
from typing import Sequence

import torch
import torch.fx as fx

# Outputs that never carry a gradient, whatever their inputs (autograd: not differentiable, or new tensors).
_NO_GRADIENT = frozenset({
    "detach", "alias_copy_detach", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "randint_like", "new_zeros", "new_ones", "new_empty", "new_full", "new_empty_strided",
    "zeros", "ones", "empty", "full", "arange", "scalar_tensor", "lift_fresh_copy", "bernoulli_", "rand",
    "randn", "randint", "empty_strided", "eye", "linspace", "logspace", "tril_indices", "triu_indices",
    "_assert_tensor_metadata", "sym_size",
})
# (floor, round, sign and the like have zero derivatives, but autograd still marks their outputs as requiring a
# gradient, so the runner does too: they are not listed.)


def _op_name(target) -> str:
    name = getattr(target, "__name__", "")
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        name = packet.__name__
    return name.split(".")[0]


def _floating(node: fx.Node) -> bool:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return val.dtype.is_floating_point or val.dtype.is_complex
    if isinstance(val, (tuple, list)):
        return any(isinstance(v, torch.Tensor) and (v.dtype.is_floating_point or v.dtype.is_complex) for v in val)
    return val is None  # unknown: as autograd would for a floating result


def outputs_requiring_grad(module: torch.nn.Module, inputs: Sequence[bool]) -> list[bool]:
    """Per flattened output of ``module``, whether it requires a gradient when its placeholders' tensors do
    as ``inputs`` says (parameters: their own ``requires_grad``; buffers and constants: no). Nested graph
    modules are followed output by output."""
    flags: dict[fx.Node, bool | list[bool]] = {}

    def flag(a) -> bool:
        value = flags.get(a, False) if isinstance(a, fx.Node) else False
        return any(value) if isinstance(value, list) else value

    placeholders = iter(inputs)
    out: list[bool] = []
    for node in module.graph.nodes:
        if node.op == "placeholder":
            flags[node] = bool(next(placeholders, False))
        elif node.op == "get_attr":
            value = _attribute(module, node.target)
            flags[node] = isinstance(value, torch.Tensor) and value.requires_grad
        elif node.op in ("call_function", "call_method"):
            source = node.args[0] if node.args else None
            if node.target is operator.getitem and isinstance(flags.get(source), list):
                parts, index = flags[source], node.args[1]
                flags[node] = parts[index] if isinstance(index, int) and -len(parts) <= index < len(parts) \
                    else any(parts)
            else:
                upstream = any(flag(a) for a in node.all_input_nodes)
                plain = node.target is operator.getitem or _op_name(node.target) not in _NO_GRADIENT
                flags[node] = upstream and plain and _floating(node)
        elif node.op == "call_module":
            sub = module.get_submodule(node.target)
            args = [flag(a) for a in node.args]
            if isinstance(getattr(sub, "graph", None), fx.Graph):  # a GraphModule, export's InterpreterModule
                flags[node] = outputs_requiring_grad(sub, args)
            else:
                flags[node] = any(args) or any(p.requires_grad for p in sub.parameters())
        elif node.op == "output":
            flat = torch.utils._pytree.tree_flatten(node.args[0])[0]
            out = [flag(a) for a in flat]
    return out


def _attribute(module: torch.nn.Module, target: str):
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


__all__ = ["outputs_requiring_grad"]
