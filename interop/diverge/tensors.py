"""What a recorded tensor keeps, and how a run's tensor is set against the reference's.

A tensor of at most :data:`FULL_LIMIT` elements is kept whole (a CPU copy). A larger one keeps an exact digest
of its bytes and the elements at every ``stride``-th *global* flat index (about :data:`SAMPLES` of them), so
that a shard and the reference's full tensor sample the same positions: the memory a run's records take is
bounded by the number of points, not by the model's size.

A sharded tensor is recorded as its local part with where that part sits in the full tensor: a DTensor (FSDP2's
per-parameter shards, tensor and sequence parallelism) from its placements; a plain tensor whose shape differs
from the reference's in one dimension by a whole factor is taken as that factor's ``index``-th slice (a
data-parallel rank's rows, a tensor-parallel rank's columns: :func:`inferred_slice`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from devices.dtypes import dtype_name

FULL_LIMIT = 1 << 16
"""Tensors of at most this many elements are kept whole; larger ones as a digest and samples."""
SAMPLES = 4096
"""About how many elements of a larger tensor are kept."""


@dataclass
class Summary:
    """One recorded tensor."""

    shape: tuple
    """The local tensor's shape."""
    dtype: str
    global_shape: tuple
    """The full tensor's shape (the local shape unless the tensor is a DTensor)."""
    offset: tuple
    """Where the local part starts in the full tensor, per dimension."""
    partial: bool
    """A DTensor with a Partial placement: a pending sum, not comparable element by element."""
    values: torch.Tensor | None
    """The whole local tensor (float64, CPU) when small."""
    digest: str
    sample_index: torch.Tensor | None
    """Global flat indices of the kept elements (large tensors)."""
    sample_values: torch.Tensor | None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def sharded(self) -> bool:
        return tuple(self.shape) != tuple(self.global_shape)


def _local(t: torch.Tensor):
    """(local tensor, global shape, offset, partial) of a tensor or DTensor."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        _, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
        partial = any(p.is_partial() for p in t.placements)
        return t.to_local(), tuple(t.shape), tuple(offset), partial
    return t, tuple(t.shape), (0,) * t.dim(), False


def _global_index(shape: tuple, global_shape: tuple, offset: tuple) -> torch.Tensor:
    """The global flat index of every element of a local block (int64, the local block's shape)."""
    index = torch.zeros(shape, dtype=torch.int64)
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        view = [1] * len(shape)
        view[d] = shape[d]
        index += ((torch.arange(shape[d]) + offset[d]) * stride).view(view)
        stride *= global_shape[d]
    return index


def sample_stride(global_shape: tuple) -> int:
    return max(1, math.ceil(math.prod(global_shape) / SAMPLES))


def summarise(t: torch.Tensor, limit: int = FULL_LIMIT) -> Summary:
    """The record of ``t`` (see the module doc). Float and complex values are kept as float64, integers and
    booleans as their float64 values too (indices and masks compare exactly)."""
    local, global_shape, offset, partial = _local(t.detach())
    cpu = local.to("cpu").contiguous()
    if cpu.is_complex():
        cpu = torch.view_as_real(cpu)
    digest = hashlib.blake2b(cpu.view(-1).view(torch.uint8).numpy().tobytes() if cpu.numel() else b"",
                             digest_size=16).hexdigest()
    values = sample_index = sample_values = None
    as_float = cpu.to(torch.float64)
    if cpu.numel() <= limit:
        values = as_float
    else:
        index = _global_index(tuple(cpu.shape), global_shape, offset)
        keep = index % sample_stride(global_shape) == 0
        sample_index, sample_values = index[keep], as_float[keep]
    return Summary(tuple(local.shape), dtype_name(t.dtype), tuple(global_shape), offset, partial,
                   values, digest, sample_index, sample_values)


def inferred_slice(test: Summary, ref: Summary, index: int) -> tuple[int, int] | None:
    """(dimension, factor) when ``test``'s shape is ``ref``'s with one dimension divided by a whole factor: the
    test holds the ``index % factor``-th slice of it (a data-parallel rank's rows, a tensor-parallel rank's
    columns of a plain tensor). None when the shapes match or differ otherwise."""
    if len(test.shape) != len(ref.global_shape) or test.sharded:
        return None
    differing = [d for d, (a, b) in enumerate(zip(test.shape, ref.global_shape)) if a != b]
    if len(differing) != 1:
        return None
    d = differing[0]
    if test.shape[d] == 0 or ref.global_shape[d] % test.shape[d]:
        return None
    return d, ref.global_shape[d] // test.shape[d]


@dataclass
class Pair:
    """The same elements on both sides (float64), or why none could be set side by side."""

    test: torch.Tensor | None
    ref: torch.Tensor | None
    how: str
    """'full', 'slice ...', 'sampled ...' or why not compared."""


def pair(test: Summary, ref: Summary, index: int) -> Pair:
    """The elements of ``test`` and the matching elements of the reference's full tensor ``ref``."""
    if test.partial:
        return Pair(None, None, "not compared: a Partial DTensor (a sum not yet reduced)")
    offset, shape, how = test.offset, test.shape, "full"
    if test.sharded:
        how = f"shard at offset {list(offset)} of {list(test.global_shape)}"
        if tuple(test.global_shape) != tuple(ref.global_shape):
            return Pair(None, None, f"not compared: global shape {list(test.global_shape)}, reference "
                                    f"{list(ref.global_shape)}")
    elif tuple(test.shape) != tuple(ref.global_shape):
        inferred = inferred_slice(test, ref, index)
        if inferred is None:
            return Pair(None, None, f"not compared: shape {list(test.shape)}, reference {list(ref.global_shape)}")
        d, factor = inferred
        offset = tuple(test.shape[d] * (index % factor) if i == d else 0 for i in range(len(shape)))
        how = f"slice {index % factor} of {factor} along dim {d}"
    if test.values is not None and ref.values is not None:
        region = tuple(slice(o, o + n) for o, n in zip(offset, shape))
        return Pair(test.values, ref.values[region], how)
    # Large tensors: the positions both kept.
    if test.values is not None:
        test_index, test_values = _global_index(shape, ref.global_shape, offset).view(-1), test.values.view(-1)
    elif test.sharded or offset == (0,) * len(shape):
        test_index, test_values = test.sample_index, test.sample_values
        if not test.sharded and test.digest == ref.digest:
            return Pair(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                        "digest equal")
    else:
        local = _global_index(shape, shape, (0,) * len(shape)).view(-1)
        keep = torch.isin(local, test.sample_index)
        test_index = _global_index(shape, ref.global_shape, offset).view(-1)[keep]
        test_values = test.sample_values
    if ref.values is not None:
        return Pair(test_values, ref.values.view(-1)[test_index], how + ", sampled")
    common, test_at, ref_at = _intersect(test_index, ref.sample_index)
    if common == 0:
        return Pair(None, None, "not compared: no sampled element in common")
    return Pair(test_values[test_at], ref.sample_values[ref_at],
                f"{how}, {common} sampled elements (digest differs)")


def pair_local(test: Summary, ref: Summary) -> Pair:
    """The elements of ``test`` and the same elements of ``ref`` when both are the same rank's local tensor (a
    reference of the same parallelism: shard against shard, a rank's rows against the same rank's rows)."""
    if test.partial or ref.partial:
        return Pair(None, None, "not compared: a Partial DTensor (a sum not yet reduced)")
    if (tuple(test.shape), tuple(test.global_shape), tuple(test.offset)) != \
            (tuple(ref.shape), tuple(ref.global_shape), tuple(ref.offset)):
        return Pair(None, None, f"not compared: shape {list(test.shape)} at {list(test.offset)} of "
                                f"{list(test.global_shape)}, reference's rank {list(ref.shape)} at "
                                f"{list(ref.offset)} of {list(ref.global_shape)}")
    how = f"shard at offset {list(test.offset)} of {list(test.global_shape)}" if test.sharded else "full"
    how += ", rank against rank"
    if test.values is not None and ref.values is not None:
        return Pair(test.values, ref.values, how)
    if test.digest == ref.digest:
        return Pair(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), how + ", digest equal")
    # Large tensors: both kept the same global positions of the same block.
    return Pair(test.sample_values, ref.sample_values, f"{how}, {len(test.sample_values)} sampled elements "
                                                       f"(digest differs)")


def _intersect(a: torch.Tensor, b: torch.Tensor):
    order = torch.argsort(b)
    sorted_b = b[order]
    pos = torch.searchsorted(sorted_b, a).clamp(max=max(len(sorted_b) - 1, 0))
    hit = sorted_b[pos] == a if len(sorted_b) else torch.zeros_like(a, dtype=torch.bool)
    return int(hit.sum()), hit.nonzero().view(-1), order[pos[hit]]
