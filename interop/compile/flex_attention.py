"""FlexAttention (``torch.nn.attention.flex_attention``) on the rack's slots.

torch runs FlexAttention on CUDA, CPU, XPU, HPU and MPS tensors only, and refuses the CPU's backward. On a
slot, eager and compiled, forward and backward:

- ``flex_attention`` admits the device (:func:`_admit_slots`);
- the ``flex_attention`` and ``flex_attention_backward`` higher-order ops get a kernel for the device
  (``DispatchKey.PrivateUse1``): torch's own dense implementation (``sdpa_dense``,
  ``sdpa_dense_backward``: every score computed, ``score_mod`` applied, ``mask_mod`` masking, the
  backward through ``score_mod``'s joint graph) runs on the execution device's aliases of the slot's
  bytes inside ``_C._call_on_slot`` (every allocation drawn from and counted against the slot), and the
  call is placed on the timeline as ONE kernel record, ``flex_attention`` or ``flex_attention_backward``
  (:func:`run_forward`, :func:`run_backward`), never as the dozens of ops the dense math issues;
- a graph compiled for an emulated slot calls the same two functions in place of the op
  (:mod:`interop.compile.flex_graph`): Inductor's CPU FlexAttention template is inference-only in this
  torch (no log-sum-exp, no backward lowering for the CPU).

A record is priced as the fused attention kernel FlexAttention is on a GPU (the attention family of the
cost model: the FLOPs of its matrix products, FlashAttention's efficiency curve), over the fraction of
(query block, key block) pairs its BlockMask computes, partial and full (:func:`block_fraction`); the
dense math the host ran is not what a chip would run.
"""

from __future__ import annotations

import math
import weakref

import torch
import torch.utils._pytree as pytree

from devices.dtypes import dtype_label
from interop.hybrid._utils import DEVICE_TYPE

FORWARD = "flex_attention"
BACKWARD = "flex_attention_backward"
"""The records' names (``inductor:`` in front inside a compiled graph) and the cost model's op names."""

COST_OP = "higher_order::{}"

METHOD = ("FlexAttention priced as fused attention: the FLOPs of its matrix products (FlashAttention's count) "
          "over the computed blocks of its BlockMask, {blocks} of {all_blocks} (query block, key block) pairs "
          "(partial and full: fraction {fraction:.4g}); bytes: q, k, v, outputs and gradients once each. The slot "
          "ran torch's dense FlexAttention math ({how}) on its own bytes")


def block_fraction(kv_num_blocks: torch.Tensor, full_kv_num_blocks: torch.Tensor | None, kv_len: int,
                   kv_block_size: int) -> tuple[int, int]:
    """(computed, all) (query block, key block) pairs of a BlockMask: its partial blocks plus its full ones,
    and every pair of its (batch, head, query block) rows and the ``ceil(kv_len / kv_block_size)`` key
    blocks (tensors on the host; one row's count is its number of key blocks)."""
    computed = int(kv_num_blocks.sum())
    if full_kv_num_blocks is not None:
        computed += int(full_kv_num_blocks.sum())
    every = kv_num_blocks.numel() * max(1, math.ceil(kv_len / kv_block_size))
    return min(computed, every), every


def _launch(name: str, query: torch.Tensor, ins, outs, block_mask: tuple, key_len: int, how: str):
    from interop.timelines import KernelLaunch

    computed, every = block_fraction(block_mask[2], block_mask[4], key_len, block_mask[15])
    fraction = computed / every if every else 1.0
    cost_name = name.rsplit(":", 1)[-1]
    method = METHOD.format(blocks=computed, all_blocks=every, fraction=fraction, how=how)
    return KernelLaunch(name, dtype_label(query.dtype), 0.0, method=method, aten=COST_OP.format(cost_name),
                        in_shapes=tuple(tuple(t.shape) for t in ins if t is not None),
                        out_shapes=tuple(tuple(t.shape) for t in outs if t is not None),
                        args=(("block_fraction", fraction),))


def run_forward(slot: int, name: str, how: str, query, key, value, score_mod, block_mask: tuple, scale: float,
                kernel_options: dict, score_mod_other_buffers: tuple, mask_mod_other_buffers: tuple):
    """FlexAttention's forward on the execution device's tensors of ``slot`` (inside a call on the slot),
    placed on its timeline as one kernel record named ``name``: (out, log-sum-exp in base 2, max score)."""
    from torch._higher_order_ops.flex_attention import sdpa_dense

    from interop.session import record_kernel

    refuse_flash(kernel_options)
    out, lse, max_scores = sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options,
                                      score_mod_other_buffers, mask_mod_other_buffers)
    record_kernel(slot, _launch(name, query, (query, key, value), (out, lse), block_mask, key.size(-2), how))
    return out, lse, max_scores


def run_backward(slot: int, name: str, how: str, query, key, value, out, logsumexp, grad_out, grad_logsumexp,
                 fw_graph, joint_graph, block_mask: tuple, scale: float, kernel_options: dict,
                 score_mod_other_buffers: tuple, mask_mod_other_buffers: tuple, buffer_grads: tuple):
    """FlexAttention's backward, likewise: (grad query, grad key, grad value, grads of score_mod's buffers).

    ``buffer_grads``: per buffer of score_mod, whether its gradient is wanted (the host's aliases of the
    slot's tensors carry no autograd state)."""
    from torch._higher_order_ops.flex_attention import sdpa_dense_backward

    from interop.session import record_kernel

    refuse_flash(kernel_options)
    # sdpa_dense_backward computes a buffer's gradient where the buffer requires one (nothing is recorded:
    # this runs below autograd).
    score_mod_other_buffers = tuple(b.detach().requires_grad_() if wanted else b
                                    for b, wanted in zip(score_mod_other_buffers, buffer_grads))
    grads = sdpa_dense_backward(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph,
                                block_mask, scale, kernel_options, score_mod_other_buffers, mask_mod_other_buffers)
    record_kernel(slot, _launch(name, query, (query, key, value, out, grad_out), grads[:3], block_mask,
                                key.size(-2), how))
    return grads


def backward_layouts(query, key, value) -> tuple:
    """Empty gradients of q, k and v laid out as torch's dense backward returns them (the layout of each
    input, the batch summed where k and v broadcast over it): the compiled op's description of its outputs."""
    from torch._higher_order_ops.flex_attention import _permute_strides

    batch = query.size(0)
    grads = [_permute_strides(t.new_empty((batch, *t.shape[1:])), t.stride()) for t in (query, key, value)]
    if key.size(0) != batch:
        grads[1:] = [g.sum(0, keepdim=True) for g in grads[1:]]
    return tuple(grads)


def refuse_flash(kernel_options: dict) -> None:
    """FlashAttention's backend returns a base-e log-sum-exp where the dense math gives base 2: refused."""
    if (kernel_options or {}).get("BACKEND") == "FLASH":
        raise NotImplementedError("flex_attention on a hybrid slot: kernel_options BACKEND='FLASH' (FlashAttention's "
                                  "CuTe kernels, whose log-sum-exp is in base e) does not run on a slot; use "
                                  "BACKEND='AUTO' (the default)")


# -- the eager kernels ------------------------------------------------------------------------------

_host_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def host_graph(fn, slot: int):
    """``fn`` (a score_mod, mask_mod or joint graph traced for the slot) as it runs on the slot's execution
    device: a copy whose device arguments (a factory call inside it) name the execution device."""
    copies = _host_graphs.setdefault(fn, {})
    copy = copies.get(slot)
    if copy is None:
        import copy as copying

        from interop.compile.backing import cuda_backing
        from interop.compile.slot_graph import SlotPlan, retarget

        copy = copies[slot] = copying.deepcopy(fn)
        retarget(SlotPlan(slot, cuda_backing(slot)), copy, [])
    return copy


def slot_of(query: torch.Tensor, values) -> int:
    """The slot every tensor argument is on (a 0-dim host tensor, a scalar, may ride along as in CUDA); fake
    tensors (a traced graph's values) are checked alike."""
    slot = query.device.index
    for value in values:
        if not isinstance(value, torch.Tensor):
            continue
        if value.device.type == DEVICE_TYPE and value.device.index == slot:
            continue
        if value.device.type == "cpu" and value.dim() == 0:
            continue
        raise RuntimeError(f"flex_attention: query is on {query.device} but a tensor it uses ({tuple(value.shape)}, a "
                           f"block mask's or a score_mod/mask_mod's captured tensor) is on {value.device}; move it "
                           f"to {query.device}")
    return slot


def _traced(*fns) -> bool:
    """Whether score_mod, mask_mod (and the joint graph) are graphs traced by torch.compile, as flex_attention
    hands them over; they are Python functions under ``_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG``, whose captured
    tensors are not arguments the slot could alias."""
    return all(fn is None or isinstance(fn, torch.fx.GraphModule) for fn in fns)


def _call_on_slot(slot: int, op: str, structure, run, outputs: int):
    """``run(*host structure)`` on aliases of the slot's tensors; its first ``outputs`` results (tensors or
    None) come back as the slot's tensors, a trailing tuple as it is."""
    from interop import _C

    leaves, spec = pytree.tree_flatten(structure)

    def call(host):
        results = run(*pytree.tree_unflatten(list(host), spec))
        return list(results[:outputs]) + list(results[outputs:])

    flags = [True] * outputs
    return _C._call_on_slot(slot, call, leaves, flags, op)


def _forward_kernel(query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers=(),
                    mask_mod_other_buffers=()):
    slot = slot_of(query, (key, value, *block_mask, *score_mod_other_buffers, *mask_mod_other_buffers))
    if not _traced(score_mod, block_mask[-1]):
        # torch's debugging mode: its dense math op by op on the slot, each op recorded as any eager op.
        from torch._higher_order_ops.flex_attention import sdpa_dense

        return sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
                          mask_mod_other_buffers)
    score_mod, mask_mod = host_graph(score_mod, slot), host_graph(block_mask[-1], slot)

    def run(q, k, v, mask, score_buffers, mask_buffers):
        return run_forward(slot, FORWARD, "eager", q, k, v, score_mod, (*mask[:-1], mask_mod), scale,
                           kernel_options, tuple(score_buffers), tuple(mask_buffers))

    out = _call_on_slot(slot, FORWARD, (query, key, value, list(block_mask[:-1]) + [None],
                                        list(score_mod_other_buffers), list(mask_mod_other_buffers)), run, 3)
    return tuple(out)


def _backward_kernel(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph, block_mask,
                     scale, kernel_options, score_mod_other_buffers, mask_mod_other_buffers):
    slot = slot_of(query, (key, value, out, logsumexp, grad_out, grad_logsumexp, *block_mask,
                           *score_mod_other_buffers, *mask_mod_other_buffers))
    if not _traced(fw_graph, joint_graph, block_mask[-1]):
        from torch._higher_order_ops.flex_attention import sdpa_dense_backward

        return sdpa_dense_backward(query, key, value, out, logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph,
                                   block_mask, scale, kernel_options, score_mod_other_buffers, mask_mod_other_buffers)
    fw_graph, joint_graph = host_graph(fw_graph, slot), host_graph(joint_graph, slot)
    mask_mod = host_graph(block_mask[-1], slot)
    buffer_grads = tuple(isinstance(b, torch.Tensor) and b.requires_grad for b in score_mod_other_buffers)

    def run(q, k, v, o, lse, g_out, g_lse, mask, score_buffers, mask_buffers):
        grad_q, grad_k, grad_v, captured_grads = run_backward(
            slot, BACKWARD, "eager", q, k, v, o, lse, g_out, g_lse, fw_graph, joint_graph, (*mask[:-1], mask_mod),
            scale, kernel_options, tuple(score_buffers), tuple(mask_buffers), buffer_grads)
        return (grad_q, grad_k, grad_v, *captured_grads)

    results = _call_on_slot(slot, BACKWARD, (query, key, value, out, logsumexp, grad_out, grad_logsumexp,
                                             list(block_mask[:-1]) + [None], list(score_mod_other_buffers),
                                             list(mask_mod_other_buffers)),
                            run, 3 + len(score_mod_other_buffers))
    return results[0], results[1], results[2], tuple(results[3:])


def _autocast_kernel(query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers=(),
                     mask_mod_other_buffers=()):
    """Under ``torch.autocast("hybrid")``: q, k and v in the autocast dtype, as torch does for CUDA."""
    from torch._C import DispatchKey
    from torch._higher_order_ops.flex_attention import flex_attention

    dtype = torch.get_autocast_dtype(DEVICE_TYPE)
    cast = [t.to(dtype) if t.is_floating_point() else t for t in (query, key, value)]
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(DispatchKey.AutocastPrivateUse1)):
        return flex_attention(*cast, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
                              mask_mod_other_buffers)


def _register_kernels(module) -> None:
    """``torch._higher_order_ops.flex_attention`` was imported: the two ops' kernels for the device."""
    from torch._C import DispatchKey

    for op, kernel in ((module.flex_attention, _forward_kernel), (module.flex_attention_backward, _backward_kernel)):
        if DispatchKey.PrivateUse1 not in op.py_kernels:
            op.py_impl(DispatchKey.PrivateUse1)(kernel)
    if DispatchKey.AutocastPrivateUse1 not in module.flex_attention.py_kernels:
        module.flex_attention.py_impl(DispatchKey.AutocastPrivateUse1)(_autocast_kernel)
        # The backward takes the forward's dtypes, as torch's higher-order ops fall through CUDA's autocast.
        module.flex_attention_backward.fallthrough(DispatchKey.AutocastPrivateUse1)


def _admit_slots(module) -> None:
    """``torch.nn.attention.flex_attention`` was imported: its device check lets the slots through, forward
    and backward (Dynamo reads the module's global when it traces ``flex_attention``)."""
    original = module._validate_device
    if getattr(original, "_hybrid", False):
        return

    def _validate_device(query, key, value):
        if query.device.type == DEVICE_TYPE:
            return None
        return original(query, key, value)

    _validate_device._hybrid = True
    _validate_device.__wrapped__ = original
    module._validate_device = _validate_device


def install() -> None:
    """Admit the slots and register the kernels as torch's FlexAttention modules are imported (idempotent)."""
    from interop.import_hooks import after_import

    after_import("torch._higher_order_ops.flex_attention", _register_kernels)
    after_import("torch.nn.attention.flex_attention", _admit_slots)


__all__ = ["BACKWARD", "FORWARD", "backward_layouts", "block_fraction", "host_graph", "install", "refuse_flash",
           "run_backward", "run_forward", "slot_of"]
