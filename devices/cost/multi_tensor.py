"""Multi-tensor kernels: torch's foreach ops and fused optimizers, one op over lists of tensors.

A GPU runs such an op as few launches of one kernel as its launch rule allows
(PyTorch's ``multi_tensor_apply``): each tensor is cut into chunks of
:data:`CHUNK_ELEMENTS`, one thread block per chunk, and a launch is issued
when it holds :data:`MAX_CHUNKS_PER_LAUNCH` chunks or, with the last chunk of
a tensor, :data:`MAX_TENSORS_PER_LAUNCH` tensors (fewer the more lists the
kernel reads: its argument block holds every list's addresses).  The count
here follows that rule exactly; the cost model adds one launch overhead per
launch and prices the bytes and FLOPs of every tensor in every list.

The figures are the large-kernel-argument configuration (32 KB of kernel
arguments: CUDA 12.1+, driver 530+, compute capability 7.0+), the one every
catalogued GPU runs.  Trainium has no public equivalent: its optimizer steps
run inside compiled Neuron graphs, so the same rule is assumed there (one
launch overhead per launch's worth of chunks), stated on the figures.

Tensor lists reach the cost model flattened into ``shapes``;
:func:`lists` cuts them back given the length of one list.
"""

from __future__ import annotations

import math
from typing import Sequence

from devices.cost import shapes as sh
from devices.figure import Figure
from devices.sources import PYTORCH_MULTI_TENSOR_APPLY

Shape = tuple[int, ...]

_APPLIED = ("the kernel launch rule of PyTorch's CUDA multi-tensor kernels; applied to every kind (Trainium "
            "has no public figure: its optimizer steps run inside compiled Neuron graphs)")

CHUNK_ELEMENTS = Figure(
    65536.0, "", PYTORCH_MULTI_TENSOR_APPLY.cite("kChunkSize = 65536"), "published",
    f"elements per chunk, one thread block each; {_APPLIED}")
MAX_CHUNKS_PER_LAUNCH = Figure(
    2240.0, "", PYTORCH_MULTI_TENSOR_APPLY.cite("DepthToMaxConfig<true>::depth_to_max_blocks = 2240"), "published",
    f"chunks (thread blocks) per launch with 32 KB kernel arguments; {_APPLIED}")
MAX_TENSORS_PER_LAUNCH: tuple[Figure, ...] = tuple(
    Figure(float(n), "", PYTORCH_MULTI_TENSOR_APPLY.cite(
        f"DepthToMaxConfig<true>::depth_to_max_tensors[{depth - 1}] = {n}"), "published",
        f"tensors per launch for a kernel over {depth} list(s); {_APPLIED}")
    for depth, n in enumerate((770, 448, 336, 252, 210), start=1))
"""Indexed by the number of lists the kernel walks, minus one."""
MAX_TENSORS_PER_LAUNCH_SCALAR_LIST: tuple[Figure, ...] = tuple(
    Figure(float(n), "", PYTORCH_MULTI_TENSOR_APPLY.cite(
        f"DepthToMaxConfig<true>::depth_to_max_tensors_scalarlist[{depth - 1}] = {n}"), "published",
        f"tensors per launch for a kernel over {depth} list(s) and one scalar per tensor; {_APPLIED}")
    for depth, n in enumerate((672, 448, 336, 252, 210), start=1))
REDUCTION_TENSORS_PER_CLEANUP = Figure(
    400.0, "", PYTORCH_MULTI_TENSOR_APPLY.cite(
        "ForeachReduceOp.cu: MAX_TENSORS_PER_KERNEL = 400 for the lpnorm_cleanup launches"), "published",
    f"_foreach_norm/_foreach_max finish with one cleanup launch per 400 tensors; {_APPLIED}")

FUSED_OPTIMIZERS_WITH_STEPS = ("_fused_adam", "_fused_adamw", "_fused_adagrad")
"""Fused optimizers whose last list is the 0-d step counters, read by address, not walked in chunks."""


def lists(shapes: Sequence[Shape], list_length: int | None) -> tuple[list[list[Shape]], list[Shape]]:
    """``(lists, rest)``: the flattened ``shapes`` of a multi-tensor op cut into its tensor lists of
    ``list_length`` tensors each, and the single tensors after them (a scalar ``other``, a tensor lr).

    Without ``list_length`` the first list is the shortest prefix of ``shapes`` that tiles all of them
    (exact when the lists' shapes do not repeat within a list; pass the length when they may).
    """
    if list_length is None:
        list_length = len(shapes)
        for k in range(1, len(shapes) + 1):
            if len(shapes) % k == 0 and list(shapes) == list(shapes[:k]) * (len(shapes) // k):
                list_length = k
                break
    if list_length <= 0:
        return [], list(shapes)
    count = len(shapes) // list_length
    cut = [list(shapes[i * list_length:(i + 1) * list_length]) for i in range(count)]
    return cut, list(shapes[count * list_length:])


def launches(numels: Sequence[int], depth: int, *, scalar_list: bool = False) -> int:
    """Kernel launches of ``multi_tensor_apply`` over tensors of ``numels`` elements walking ``depth`` lists
    (PyTorch's loop: empty tensors skipped, a launch when the chunks or the tensors are full, one for the rest)."""
    table = MAX_TENSORS_PER_LAUNCH_SCALAR_LIST if scalar_list else MAX_TENSORS_PER_LAUNCH
    max_tensors = int(table[min(max(depth, 1), len(table)) - 1].value)
    max_chunks, chunk = int(MAX_CHUNKS_PER_LAUNCH.value), int(CHUNK_ELEMENTS.value)
    count, blocks, tensors = 0, 0, 0
    for n in numels:
        if n == 0:
            continue
        tensors += 1
        left = -(-n // chunk)
        while left:
            room = max_chunks - blocks
            if left >= room:  # the blocks fill up: launch; an unfinished tensor opens the next launch
                left -= room
                count += 1
                blocks, tensors = 0, (1 if left else 0)
            else:
                blocks += left
                left = 0
                if tensors == max_tensors:  # the tensors fill up with this tensor's last chunk
                    count += 1
                    blocks = tensors = 0
    return count + (1 if blocks else 0)


def sources(depth: int, *, scalar_list: bool = False, reduction: bool = False) -> tuple[Figure, ...]:
    """The figures :func:`launches` used for a kernel over ``depth`` lists."""
    table = MAX_TENSORS_PER_LAUNCH_SCALAR_LIST if scalar_list else MAX_TENSORS_PER_LAUNCH
    used = (CHUNK_ELEMENTS, MAX_CHUNKS_PER_LAUNCH, table[min(max(depth, 1), len(table)) - 1])
    return used + ((REDUCTION_TENSORS_PER_CLEANUP,) if reduction else ())


def cleanup_launches(tensors: int) -> int:
    """The reduction foreach ops' second kernel: one launch per :data:`REDUCTION_TENSORS_PER_CLEANUP` tensors."""
    return math.ceil(tensors / REDUCTION_TENSORS_PER_CLEANUP.value) if tensors else 0


def numels(shapes: Sequence[Shape]) -> list[int]:
    return [sh.numel(s) for s in shapes]


__all__ = ["CHUNK_ELEMENTS", "FUSED_OPTIMIZERS_WITH_STEPS", "MAX_CHUNKS_PER_LAUNCH", "MAX_TENSORS_PER_LAUNCH",
           "MAX_TENSORS_PER_LAUNCH_SCALAR_LIST", "REDUCTION_TENSORS_PER_CLEANUP", "cleanup_launches", "launches",
           "lists", "numels", "sources"]
