"""FlexAttention inside a graph compiled for an emulated slot: one call of the slot's FlexAttention kernel.

Inductor lowers ``flex_attention`` for the CPU with a C++ template that, in this torch, computes inference
only (no log-sum-exp, so nothing to train with) and has no CPU lowering of ``flex_attention_backward`` (its
backward lowering emits Triton templates). A graph on an emulated slot, compiled for the host CPU
(:mod:`.inductor`), would therefore fail to compile wherever it trains. Before Inductor sees such a graph,
:func:`route_flex_attention` replaces each of the two higher-order ops with ``hybrid_flex::forward`` or
``hybrid_flex::backward``, ops Inductor calls as extern kernels, which run the slot's own implementation
(:func:`interop.compile.flex_attention.run_forward` / :func:`~interop.compile.flex_attention.run_backward`: torch's dense
FlexAttention math on the slot's bytes) and place one record each, ``inductor:flex_attention`` and
``inductor:flex_attention_backward``, priced as FlexAttention (the record's sources say so). The rest of the
graph is compiled as usual.

The ops carry ``score_mod``, ``mask_mod`` and the joint graph as one pickled string argument, so a compiled
graph served from Inductor's caches in another process is complete in itself.
"""

from __future__ import annotations

import base64
import functools
import operator
import pickle

import torch
from torch.fx import GraphModule, Node

from interop.compile.records import INDUCTOR_PREFIX

NAMESPACE = "hybrid_flex"
SELF_RECORDING = (f"{NAMESPACE}::forward", f"{NAMESPACE}::backward")
"""The ops that place their own record (Inductor's wrapper does not record them again)."""

HOW = ("compiled: the graph calls this kernel as one extern kernel, as Inductor's CPU FlexAttention template "
       "computes inference only")

# The block-mask tuple of the higher-order ops: sizes at these positions, tensors (or None) at 2..13, the
# mask_mod last.
_MASK_INTS = (0, 1, 14, 15)
_MASK_TENSORS = range(2, 14)

_library = None


def define_ops() -> None:
    """Define ``hybrid_flex::forward`` and ``hybrid_flex::backward`` (idempotent)."""
    global _library
    if _library is not None:
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    arguments = "(Tensor?[] tensors, SymInt[] sizes, float scale, str graphs, int slot)"
    lib.define(f"forward{arguments} -> (Tensor, Tensor, Tensor)")
    lib.define(f"backward{arguments} -> Tensor[]")
    for name, kernel in (("forward", _forward), ("backward", _backward)):
        lib.impl(name, kernel, "CPU")
    torch.library.register_fake(f"{NAMESPACE}::forward", _forward_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::backward", _backward_fake, lib=lib)
    _library = lib


# -- what the ops carry -----------------------------------------------------------------------------


def _pack(graphs: tuple, score_kinds: str, mask_kinds: str, buffer_grads: tuple = ()) -> str:
    """``score_kinds:mask_kinds:buffer_grads:graphs``: the buffers' kinds (``t`` a tensor, ``s`` a size), which
    score_mod buffers get a gradient (``1``/``0``), then the pickled graphs (read only where the op runs: a
    graph's constants unpickled under the compiler's fake mode would be fake)."""
    grads = "".join("1" if g else "0" for g in buffer_grads)
    return f"{score_kinds}:{mask_kinds}:{grads}:" + base64.b64encode(pickle.dumps(graphs)).decode("ascii")


def _header(text: str) -> tuple[str, str, tuple]:
    score_kinds, mask_kinds, grads, _ = text.split(":", 3)
    return score_kinds, mask_kinds, tuple(g == "1" for g in grads)


@functools.lru_cache(maxsize=256)
def _graphs(text: str) -> tuple:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return pickle.loads(base64.b64decode(text.split(":", 3)[3]))


def _split(values, tensors: list, sizes: list) -> str:
    """Each value to ``tensors`` ("t") or ``sizes`` ("s"); their kinds in order."""
    kinds = []
    for value in values:
        if _is_tensor(value):
            tensors.append(value)
            kinds.append("t")
        else:
            sizes.append(value)
            kinds.append("s")
    return "".join(kinds)


def _is_tensor(value) -> bool:
    if isinstance(value, Node):
        return isinstance(value.meta.get("val"), torch.Tensor)
    return isinstance(value, torch.Tensor)


def _join(kinds: str, tensors, sizes) -> tuple:
    out = []
    for kind in kinds:
        out.append(next(tensors) if kind == "t" else next(sizes))
    return tuple(out)


def _block_mask(tensors, sizes, mask_mod) -> tuple:
    mask = [None] * 17
    for i in _MASK_TENSORS:
        mask[i] = next(tensors)
    for i in _MASK_INTS:
        mask[i] = next(sizes)
    mask[16] = mask_mod
    return tuple(mask)


# -- the ops' kernels (on the execution device's aliases, inside the compiled graph's call on its slot) --

_FUNCTORCH_KEYS = ("FuncTorchDynamicLayerFrontMode", "FuncTorchDynamicLayerBackMode", "FuncTorchBatched",
                   "FuncTorchVmapMode", "FuncTorchGradWrapper")


def _vmap_allowed():
    """The dispatcher calls an op's kernel with functorch's keys excluded; torch's dense FlexAttention math
    vmaps score_mod and mask_mod over (batch, head, query, key), which needs them."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for name in _FUNCTORCH_KEYS:
        exclude = exclude.remove(getattr(torch._C.DispatchKey, name))
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)



def _forward(tensors, sizes, scale, graphs, slot):
    from interop.compile.flex_attention import FORWARD, run_forward

    score_mod, mask_mod = _graphs(graphs)
    score_kinds, mask_kinds, _ = _header(graphs)
    t, s = iter(tensors), iter(sizes)
    query, key, value = next(t), next(t), next(t)
    mask = _block_mask(t, s, mask_mod)
    score_buffers, mask_buffers = _join(score_kinds, t, s), _join(mask_kinds, t, s)
    with _vmap_allowed():
        return run_forward(slot, INDUCTOR_PREFIX + FORWARD, HOW, query, key, value, score_mod, mask, scale, {},
                           score_buffers, mask_buffers)


def _backward(tensors, sizes, scale, graphs, slot):
    from interop.compile.flex_attention import BACKWARD, run_backward

    fw_graph, mask_mod, joint_graph = _graphs(graphs)
    score_kinds, mask_kinds, buffer_grads = _header(graphs)
    t, s = iter(tensors), iter(sizes)
    query, key, value, out, lse, grad_out, grad_lse = (next(t) for _ in range(7))
    mask = _block_mask(t, s, mask_mod)
    score_buffers, mask_buffers = _join(score_kinds, t, s), _join(mask_kinds, t, s)
    with _vmap_allowed():
        grad_q, grad_k, grad_v, captured = run_backward(
                slot, INDUCTOR_PREFIX + BACKWARD, HOW, query, key, value, out, lse, grad_out, grad_lse, fw_graph,
            joint_graph, mask, scale, {}, score_buffers, mask_buffers, buffer_grads)
    return [grad_q, grad_k, grad_v, *(g for g in captured if g is not None)]


def _permuted_like(reference: torch.Tensor, shape) -> torch.Tensor:
    from torch._higher_order_ops.flex_attention import _permute_strides

    return _permute_strides(reference.new_empty(shape), reference.stride())


def _forward_fake(tensors, sizes, scale, graphs, slot):
    query, value = tensors[0], tensors[2]
    batch, heads, q_len, _ = query.shape
    out = _permuted_like(query, (batch, heads, q_len, value.size(-1)))
    stats = query.new_empty((batch, heads, q_len), dtype=torch.float32)
    return out, stats, torch.empty_like(stats)


def _backward_fake(tensors, sizes, scale, graphs, slot):
    from interop.compile.flex_attention import backward_layouts

    score_kinds, _, buffer_grads = _header(graphs)
    query, key, value = tensors[:3]
    buffers = [b for b in tensors[19:19 + score_kinds.count("t")]]
    tensor_grads = [g for g, kind in zip(buffer_grads, score_kinds) if kind == "t"]
    grads = list(backward_layouts(query, key, value))
    grads += [torch.empty_like(b, memory_format=torch.contiguous_format) for b, g in zip(buffers, tensor_grads) if g]
    return grads


# -- the rewrite -------------------------------------------------------------------------------------


def check_devices(gm: GraphModule) -> None:
    """Refuse FlexAttention in ``gm`` (before it is retargeted to the host) whose block mask or captured tensors
    are not on its query's slot, as the eager call does (after retargeting every device is the host's)."""
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

    from interop.compile.slot_graph import graph_modules
    from interop.compile.flex_attention import slot_of

    for module in graph_modules(gm):
        for node in module.graph.nodes:
            if node.op == "call_function" and node.target in (flex_attention, flex_attention_backward):
                values = [v.meta.get("val") for v in torch.utils._pytree.tree_leaves((node.args, node.kwargs))
                          if isinstance(v, Node)]
                tensors = [v for v in values if isinstance(v, torch.Tensor)]
                slot_of(tensors[0], tensors[1:])


def _subgraph(module: GraphModule, node):
    if isinstance(node, Node) and node.op == "get_attr":
        return getattr(module, node.target)
    return node


def route_flex_attention(gm: GraphModule, slot: int) -> bool:
    """Replace FlexAttention's higher-order ops in ``gm`` (retargeted to the host CPU) by the slot's kernel.
    Returns whether any was replaced."""
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

    from interop.compile.slot_graph import graph_modules

    replaced = False
    for module in graph_modules(gm):
        for node in list(module.graph.nodes):
            if node.op != "call_function" or node.target not in (flex_attention, flex_attention_backward):
                continue
            define_ops()
            if node.target is flex_attention:
                _route_forward(module, node, slot)
            else:
                _route_backward(module, node, slot)
            replaced = True
        if replaced:
            for node in list(module.graph.nodes):
                if node.op == "get_attr" and not node.users and isinstance(getattr(module, node.target, None),
                                                                           GraphModule):
                    module.graph.erase_node(node)
            module.recompile()
    return replaced


def _route_forward(module: GraphModule, node: Node, slot: int) -> None:
    from interop.compile.flex_attention import refuse_flash

    query, key, value, score_mod, mask, scale, kernel_options, score_buffers, mask_buffers = _args(node, 9)
    refuse_flash(kernel_options)
    tensors, sizes = [query, key, value], []
    tensors += [mask[i] for i in _MASK_TENSORS]
    sizes += [mask[i] for i in _MASK_INTS]
    score_kinds = _split(score_buffers, tensors, sizes)
    mask_kinds = _split(mask_buffers, tensors, sizes)
    graphs = _pack((_subgraph(module, score_mod), _subgraph(module, mask[16])), score_kinds, mask_kinds)
    with module.graph.inserting_before(node):
        call = module.graph.call_function(torch.ops.hybrid_flex.forward.default,
                                          (tensors, sizes, float(scale), graphs, slot))
    call.meta.update(node.meta)
    node.replace_all_uses_with(call)
    module.graph.erase_node(node)


def _route_backward(module: GraphModule, node: Node, slot: int) -> None:
    from interop.compile.flex_attention import refuse_flash

    (query, key, value, out, lse, grad_out, grad_lse, fw_graph, joint_graph, mask, scale, kernel_options,
     score_buffers, mask_buffers) = _args(node, 14)
    refuse_flash(kernel_options)
    captured = node.meta["val"][3]
    buffer_grads = tuple(g is not None for g in captured)
    tensors, sizes = [query, key, value, out, lse, grad_out, grad_lse], []
    tensors += [mask[i] for i in _MASK_TENSORS]
    sizes += [mask[i] for i in _MASK_INTS]
    score_kinds = _split(score_buffers, tensors, sizes)
    mask_kinds = _split(mask_buffers, tensors, sizes)
    graphs = _pack((_subgraph(module, fw_graph), _subgraph(module, mask[16]), _subgraph(module, joint_graph)),
                   score_kinds, mask_kinds, buffer_grads)
    with module.graph.inserting_before(node):
        call = module.graph.call_function(torch.ops.hybrid_flex.backward.default,
                                          (tensors, sizes, float(scale), graphs, slot))
    # The op returns [grad q, grad k, grad v, *the buffers' grads that are not None]; the higher-order op
    # returned (grad q, grad k, grad v, (grad or None per buffer)).
    position = {j: 3 + i for i, j in enumerate(j for j, wanted in enumerate(buffer_grads) if wanted)}
    for user in list(node.users):
        if user.op != "call_function" or user.target is not operator.getitem:
            raise NotImplementedError(f"torch.compile on hybrid:{slot}: flex_attention_backward's result is used "
                                      f"by {user.format_node()}, which this rewrite does not handle")
        index = user.args[1]
        if index < 3:
            user.args = (call, index)
            continue
        for item in list(user.users):
            if item.op != "call_function" or item.target is not operator.getitem or item.args[1] not in position:
                raise NotImplementedError(f"torch.compile on hybrid:{slot}: a score_mod buffer's gradient is used "
                                          f"by {item.format_node()}, which this rewrite does not handle")
            item.args = (call, position[item.args[1]])
        module.graph.erase_node(user)
    val = node.meta.get("val")
    if val is not None:
        call.meta["val"] = [*val[:3], *(g for g in val[3] if g is not None)]
    module.graph.erase_node(node)


def _args(node: Node, count: int) -> tuple:
    args = list(node.args) + [()] * (count - len(node.args))
    if node.kwargs:
        raise NotImplementedError(f"{node.target}: keyword arguments in a traced graph ({sorted(node.kwargs)})")
    return tuple(args[:count])


__all__ = ["SELF_RECORDING", "check_devices", "define_ops", "route_flex_attention"]
