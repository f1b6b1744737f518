"""Random numbers in a graph compiled for an emulated slot come from the slot's generator, as eager ops' do.

A graph on an emulated slot is compiled as a CPU graph (:mod:`.slot_graph`), so the ATen calls its wrapper
makes for randomness draw from the process's CPU generator: the seeds of Inductor's own random kernels
(``aten.randint.low_out``, one call per graph), ``bernoulli_`` (which Inductor leaves to ATen on the CPU) and,
under ``config.fallback_random``, every random op. On CUDA they draw from the device's generator. The wrapper
of a slot graph calls each of them through :func:`slot_random` instead, which hands the op the slot's
generator (the CPU generator behind ``torch.hybrid.default_generator(slot)``): a slot seeded with ``s``
compiles to the numbers the CPU's compiled graph gives after ``torch.manual_seed(s)``, and the CPU's generator
does not move.

Before that, AOTAutograd decomposes ``bernoulli_`` and ``bernoulli.p`` into ``rand_like(x) < p`` on every
device but the CPU (``torch._decomp.decompositions_for_rng``); on an emulated slot they stay as on the CPU
(:func:`keep_cpu_decompositions`), so a slot's compiled graph draws the numbers the CPU's does. Imported by
generated wrapper code: keep it light.
"""

from __future__ import annotations

import functools

import torch

SLOT_RANDOM = "hybrid_slot_random"
"""The name generated wrapper code calls :func:`slot_random` by."""


def _argument_names(op) -> list[str]:
    return [a.name for a in op._schema.arguments]


@functools.cache
def with_generator(op):
    """The overload of ``op`` (an ATen ``OpOverload``) that takes a ``generator``: ``op`` itself, its
    generator twin (``rand.default`` -> ``rand.generator``, ``randint.low_out`` -> ``randint.low_generator_out``),
    ``hybrid::native_dropout`` for ``aten::native_dropout`` (whose CPU kernel takes none); None for an op
    that draws no random numbers."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    names = _argument_names(op)
    if "generator" in names:
        return op
    if op is torch.ops.aten.native_dropout.default:
        return torch.ops.hybrid.native_dropout.default
    packet = op.overloadpacket
    for overload in packet.overloads():
        twin = getattr(packet, overload)
        twin_names = _argument_names(twin)
        if "generator" in twin_names and [n for n in twin_names if n != "generator"] == names:
            return twin
    return None


@functools.cache
def slot_random(slot: int, op):
    """``op`` drawing from ``slot``'s generator, unless the call names a generator of its own."""
    from interop import _C

    target = with_generator(op)
    generator = _C._slot_cpu_generator(slot)

    def draw(*args, **kwargs):
        if kwargs.get("generator") is None:
            kwargs["generator"] = generator
        return target(*args, **kwargs)

    return draw


def redirect(operation, slot: int) -> None:
    """Point an Inductor IR node (``ir.ExternKernel``) that draws random numbers at the slot's generator: its
    wrapper line calls ``hybrid_slot_random(slot, <op>)`` in place of ``<op>``."""
    name = getattr(operation, "python_kernel_name", None)
    if not name or name.startswith(SLOT_RANDOM) or with_generator(getattr(operation, "op_overload", None)) is None:
        return
    operation.python_kernel_name = f"{SLOT_RANDOM}({slot}, {name})"


_CPU_ONLY_RANDOM = ("bernoulli_.float", "bernoulli_.Tensor", "bernoulli.p")
"""Random ops whose decomposition torch skips for CPU tensors (it decomposes them on any other device)."""


def _on_emulated_slot(tensor) -> bool:
    from interop.compile.backing import cuda_backing

    device = getattr(tensor, "device", None)
    return device is not None and device.type == "hybrid" and cuda_backing(
        device.index if device.index is not None else torch.hybrid.current_device()) is None


def keep_cpu_decompositions(table: dict) -> None:
    """Make the decompositions in ``table`` (torch's ``extra_random_decomps``) of the ops the CPU keeps whole
    keep them whole on an emulated slot too (idempotent)."""
    for name in _CPU_ONLY_RANDOM:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        original = table.get(op)
        if original is None or getattr(original, "_hybrid", False):
            continue

        def decomposition(self, *args, _original=original, **kwargs):
            if _on_emulated_slot(self):
                return NotImplemented  # as torch's own decomposition answers for a CPU tensor
            return _original(self, *args, **kwargs)

        decomposition._hybrid = True
        table[op] = decomposition
