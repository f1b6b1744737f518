"""A graph on a hybrid slot, seen by Inductor as a graph on the slot's execution device.

Which slots a graph names (inputs, device arguments, traced values,
constants); the plan for compiling it; and the rewrite of its devices and fake
tensors from ``hybrid:<slot>`` to ``cpu`` (emulated) or ``cuda:<N>`` (backed)
so that Inductor compiles it exactly as it would a graph on that device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor

from interop.hybrid._utils import DEVICE_TYPE


@dataclass(frozen=True)
class SlotPlan:
    """How one graph on one slot is compiled."""

    slot: int
    cuda: int | None
    """The CUDA ordinal behind the slot; None when it is emulated."""
    slot_outputs: tuple[bool, ...] = ()
    """Per graph output: is it one of the slot's tensors (else a host tensor, returned as it is)."""

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.cuda is None else torch.device("cuda", self.cuda)


def graph_modules(gm):
    return [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule)]


def _slots_in(value, slots: set[int]) -> None:
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.device) and leaf.type == DEVICE_TYPE:
            slots.add(torch.hybrid.current_device() if leaf.index is None else leaf.index)
        elif isinstance(leaf, torch.Tensor) and leaf.device.type == DEVICE_TYPE:
            slots.add(leaf.device.index)


def graph_slots(gm, example_inputs) -> set[int]:
    """Every hybrid slot named by the graph: its inputs, device arguments, values and constants."""
    slots: set[int] = set()
    _slots_in(list(example_inputs), slots)
    for module in graph_modules(gm):
        for node in module.graph.nodes:
            _slots_in((node.args, node.kwargs, node.meta.get("val")), slots)
            if node.op == "get_attr":
                _slots_in(getattr(module, node.target, None), slots)
    return slots


def output_on_slot(gm) -> tuple[bool, ...]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flags = []
    for item in output.args[0]:
        val = item.meta.get("val") if isinstance(item, torch.fx.Node) else item
        flags.append(isinstance(val, torch.Tensor) and val.device.type == DEVICE_TYPE)
    return tuple(flags)


def calls_triton(gm) -> bool:
    from torch._higher_order_ops.triton_kernel_wrap import (
        triton_kernel_wrapper_functional,
        triton_kernel_wrapper_mutation,
    )

    return any(node.target in (triton_kernel_wrapper_functional, triton_kernel_wrapper_mutation)
               for module in graph_modules(gm) for node in module.graph.nodes)


def _fake_twin(t: FakeTensor, device: torch.device) -> FakeTensor:
    """A fake tensor like ``t`` (sizes, strides, offset, dtype; symbolic sizes kept) on ``device``, built
    from its meta description directly (dispatching a factory through the fake mode costs ~50x more)."""
    if t.storage_offset() == 0:
        meta = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
    else:
        extent = t.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(t.size(), t.stride()))
        meta = torch.empty((extent,), dtype=t.dtype, device="meta").as_strided(t.size(), t.stride(),
                                                                                t.storage_offset())
    return FakeTensor(t.fake_mode, meta, device)


def retarget(plan: SlotPlan, gm, example_inputs) -> list:
    """Rewrite ``gm`` (in place) and its example inputs from the slot's device to its execution device."""
    from interop import _C

    device, memo = plan.device, {}

    def convert(value):
        if isinstance(value, torch.device) and value.type == DEVICE_TYPE:
            return device
        if isinstance(value, FakeTensor) and value.device.type == DEVICE_TYPE:
            twin = memo.get(id(value))
            if twin is None:
                twin = memo[id(value)] = (value, _fake_twin(value, device))
            return twin[1]
        if isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE:
            return _C._execution_alias(value, "a constant of a graph compiled by torch.compile")  # keeps it alive
        return value

    for module in graph_modules(gm):
        for node in module.graph.nodes:
            node.args = pytree.tree_map(convert, node.args)
            node.kwargs = pytree.tree_map(convert, node.kwargs)
            if "val" in node.meta:
                node.meta["val"] = pytree.tree_map(convert, node.meta["val"])
            if node.op == "get_attr":
                value = getattr(module, node.target, None)
                if isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE:
                    setattr(module, node.target, convert(value))
        module.recompile()
    return [convert(x) for x in example_inputs]
