"""Export a model's repeated layers once: a 98-layer model is exported with three of its layers, and the others are
copies of one exported layer bound to their own parameters.

torch.export traces every layer of a model through Python (about 0.3 s a layer for a transformers decoder
here), so cutting a 100-block model took 33 s of a 36 s ``interop.plan``. Layers built alike run alike: when
every layer between the first and the last has the same structure as the second (classes, parameter and buffer
shapes and dtypes, and every plain attribute but its index), the model is exported with only its first, second
and last layers; the second layer's block is copied for each layer in between, its submodule path and parameters
renamed to that layer's, and the chain of values re-linked. Any difference (Gemma 2 alternates sliding and global
attention by an attribute) and the model is exported whole, as before. The first and last layers are kept in
case they are special; the model's forward must not depend on how many layers it holds (transformers' and
torchtitan's do not).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections import OrderedDict
from typing import Any

import torch.fx as fx
import torch.nn as nn

from interop.live.exported_blocks import ExportedBlock, parameter_names

MIN_LAYERS = 6
"""Below this many repeated layers the whole model is exported (little to save)."""

_INDEX_ATTRIBUTE = re.compile(r"(^|_)(idx|id|index|number|num)$|init")
"""Plain attributes that say which layer a module is, or how it was initialised, not how it runs."""


def fingerprint(layer: nn.Module) -> tuple:
    """What decides a layer's program: its modules' classes, parameters and buffers (shape, dtype,
    requires_grad) and plain attributes, its index and initialisation constants left out."""
    out = []
    for name, sub in layer.named_modules():
        plain = tuple(sorted((k, v) for k, v in vars(sub).items()
                             if not k.startswith("_") and k != "training" and not _INDEX_ATTRIBUTE.search(k)
                             and isinstance(v, (bool, int, float, str, type(None)))))
        params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in sub.named_parameters(recurse=False))
        buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in sub.named_buffers(recurse=False))
        out.append((name, type(sub).__module__, type(sub).__qualname__, plain, params, buffers))
    return tuple(out)


def kept_layers(model: nn.Module, layers: list[str]) -> list[str] | None:
    """The layers to export (first, second, last) when every layer in between is built like the second;
    None when the model should be exported whole."""
    if len(layers) < MIN_LAYERS:
        return None
    template = fingerprint(model.get_submodule(layers[1]))
    if any(fingerprint(model.get_submodule(name)) != template for name in layers[2:-1]):
        return None
    return [layers[0], layers[1], layers[-1]]


class Truncated:
    """The model with only ``kept`` of its repeated layers in their container (names kept), restored on exit."""

    def __init__(self, model: nn.Module, container: str, kept: list[str]) -> None:
        self.parent = model.get_submodule(container) if container else model
        self.keys = {name.rsplit(".", 1)[-1] for name in kept}

    def __enter__(self) -> Truncated:
        self.saved = self.parent._modules
        self.parent._modules = OrderedDict((k, v) for k, v in self.saved.items() if k in self.keys)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.parent._modules = self.saved


def _shallow_clone(module: nn.Module) -> nn.Module:
    """A copy of a module tree that shares its graphs, generated code and tensors but has its own module,
    parameter and buffer tables (deep-copying an exported block regenerates every graph's code: 5 s for a
    98-layer model)."""
    clone = module.__class__.__new__(module.__class__)
    clone.__dict__ = dict(module.__dict__)
    clone.__dict__["_modules"] = OrderedDict((k, None if v is None else _shallow_clone(v))
                                            for k, v in module._modules.items())
    clone.__dict__["_parameters"] = OrderedDict(module._parameters)
    clone.__dict__["_buffers"] = OrderedDict(module._buffers)
    return clone


def _rename_layer(module: nn.Module, old: str, new: str) -> None:
    """In a clone of a block, the submodule at path ``old`` moved to ``new`` (same parent), with every graph
    reference to it (call_module and get_attr targets, relative to the module holding the graph) renamed; a
    graph that changes is copied first (the template keeps its own)."""
    parent_path, old_key = old.rsplit(".", 1) if "." in old else ("", old)
    new_key = new.rsplit(".", 1)[-1]
    parent = module.get_submodule(parent_path) if parent_path else module
    parent._modules = OrderedDict((new_key if k == old_key else k, v) for k, v in parent._modules.items())
    for path, sub in module.named_modules():
        graph = getattr(sub, "graph", None)
        if not isinstance(graph, fx.Graph):
            continue
        prefix = f"{path}." if path else ""

        def renamed(node):
            full = prefix + node.target
            return (new + full[len(old):])[len(prefix):] if full == old or full.startswith(old + ".") else None

        hits = [n for n in graph.nodes if n.op in ("call_module", "get_attr") and isinstance(n.target, str)
                and renamed(n) is not None]
        if not hits:
            continue
        copied = copy.deepcopy(graph)
        for node in copied.nodes:
            if node.op in ("call_module", "get_attr") and isinstance(node.target, str):
                target = renamed(node)
                if target is not None:
                    node.target = target
        if isinstance(sub, fx.GraphModule):
            sub.graph = copied  # regenerates its code
        else:  # export's InterpreterModule: runs its graph; its codegen twin is rebuilt for the new one
            sub.__dict__["graph"] = copied
            copied.owning_module = sub
            if hasattr(sub, "finalize"):
                sub.finalize()


def _bind_own_tensors(block: nn.Module, model: nn.Module) -> None:
    """The copied block's parameters and buffers replaced by the model's own under the same names (shared,
    nothing copied)."""
    for name, _ in list(block.named_parameters(remove_duplicate=False)):
        owner_path, leaf = name.rsplit(".", 1) if "." in name else ("", name)
        owner = block.get_submodule(owner_path) if owner_path else block
        owner._parameters[leaf] = model.get_parameter(name)
    for name, _ in list(block.named_buffers(remove_duplicate=False)):
        owner_path, leaf = name.rsplit(".", 1) if "." in name else ("", name)
        owner = block.get_submodule(owner_path) if owner_path else block
        try:
            owner._buffers[leaf] = model.get_buffer(name)
        except AttributeError:
            pass  # a buffer export lifted under its own name: the template's (alike in every layer)


def expand(blocks: list, values: dict, model: nn.Module, layers: list[str], canonical: dict[str, str]):
    """The blocks of the truncated export (whatever comes before the layers, the first, second and last layer,
    whatever comes after: ``blocks``) expanded to every layer of ``layers``: the second layer's block copied
    for each layer in between. Returns the new block list and values (the copies' outputs are named afresh; the
    chain is re-linked)."""
    names = [b.name for b in blocks]
    kept = [layers[0], layers[1], layers[-1]]
    if kept[0] not in names or names[names.index(kept[0]):names.index(kept[0]) + 3] != kept:
        raise _NotAlike("the truncated export did not cut at the kept layers, one block each")
    at = names.index(kept[0])
    before, (first, second, last), rest = blocks[:at], blocks[at:at + 3], blocks[at + 3:]
    # The chain: where the last layer takes what the second layer gave (the layers in between pass it on);
    # every other input is shared by the layers alike (the embedding's tables, what the first layer computed
    # once for all of them).
    chain = {k: second.outputs.index(n) for k, n in enumerate(last.inputs) if n in second.outputs}
    shared_alike = len(last.inputs) == len(second.inputs) and all(
        last.inputs[k] == second.inputs[k] for k in range(len(last.inputs)) if k not in chain)
    if not chain or not shared_alike:
        raise _NotAlike("the second and last layers do not take values alike")
    out = list(before) + [first, second]
    previous = second.outputs
    for name in layers[2:-1]:
        module = _shallow_clone(second.module)
        _rename_layer(module, layers[1], name)
        _bind_own_tensors(module, model)
        inputs = list(second.inputs)
        for k, q in chain.items():
            inputs[k] = previous[q]
        outputs = tuple(f"{o}_{name.replace('.', '_')}" for o in second.outputs)
        for o, new in zip(second.outputs, outputs):
            values[new] = dataclasses.replace(values[o], name=new)
        params, nbytes, count = parameter_names(module, canonical)
        out.append(ExportedBlock(0, name, "layer", module, tuple(inputs), outputs, params, nbytes, count))
        previous = outputs
    relinked = tuple(previous[second.outputs.index(n)] if n in second.outputs else n for n in last.inputs)
    out.append(dataclasses.replace(last, inputs=relinked))
    out.extend(rest)
    for i, b in enumerate(out):
        b.index = i
    return out, values


class _NotAlike(ValueError):
    """The truncated export does not have the shape expansion needs: export the model whole."""


__all__ = ["MIN_LAYERS", "Truncated", "expand", "fingerprint", "kept_layers"]
