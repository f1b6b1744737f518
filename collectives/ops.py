"""Collective operations and reduce operations: names, buffer conventions, bandwidth reporting.

Conventions follow nccl-tests (reference/collectives.md):

* ``count`` is per participant: the elements of an all_reduce, broadcast, reduce
  or send/recv buffer; the per-rank input of an all_gather or gather; the
  per-rank output of a reduce_scatter or scatter; for all_to_all the elements
  each rank sends to *each* peer.
* ``S`` (the size bandwidths are reported on) is ``count * itemsize`` for
  all_reduce, broadcast, reduce, send/recv and ``count * itemsize * p`` for
  all_gather, reduce_scatter, all_to_all, gather, scatter.
* ``busbw = algbw * factor`` with the factors of :func:`busbw_factor`.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

import math

OPS: tuple[str, ...] = (
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
    "all_to_all", "gather", "scatter", "send_recv", "barrier",
)
"""Accepted collective names (see :func:`check_op` for the aliases also accepted)."""

ROOTED: frozenset[str] = frozenset({"broadcast", "reduce", "gather", "scatter"})
"""Ops with a root participant."""

REDUCING: frozenset[str] = frozenset({"all_reduce", "reduce_scatter", "reduce"})
"""Ops that combine values with a reduce op."""

SCALED: frozenset[str] = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})
"""Ops whose reported size S is ``count * itemsize * p`` (nccl-tests)."""

REDUCE_OPS: tuple[str, ...] = ("sum", "prod", "min", "max", "avg", "premul_sum", "band", "bor", "bxor")
"""Accepted reduce ops (the names of torch.distributed.ReduceOp, lower case)."""

_ALIASES = {
    "allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
    "alltoall": "all_to_all", "all_to_allv": "all_to_all", "alltoallv": "all_to_all",
    "sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv", "bcast": "broadcast",
}


def check_op(op: str) -> str:
    """The canonical name of collective ``op``; ValueError listing the accepted names.

    Dashes, case and the usual spellings (``allreduce``, ``all-reduce``,
    ``alltoallv``, ``sendrecv``) are accepted.
    """
    if not isinstance(op, str):
        raise ValueError(f"op: expected a collective name, got {op!r}; accepted: {', '.join(OPS)}")
    key = op.strip().lower().replace("-", "_")
    key = _ALIASES.get(key.replace("_", ""), _ALIASES.get(key, key))
    if key not in OPS:
        raise ValueError(f"op: unknown collective {op!r}; accepted: {', '.join(OPS)}")
    return key


def check_reduce_op(name: str) -> str:
    """The canonical name of reduce op ``name`` (``"sum"``, ``ReduceOp.SUM``...); ValueError listing them."""
    key = str(name).strip().lower()
    for prefix in ("reduceop.", "redopt."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    key = {"product": "prod", "mean": "avg", "average": "avg", "premulsum": "premul_sum"}.get(key, key)
    if key not in REDUCE_OPS:
        raise ValueError(f"reduce op: unknown {name!r}; accepted: {', '.join(REDUCE_OPS)}")
    return key


def busbw_factor(op: str, participants: int) -> float:
    """nccl-tests' bus-bandwidth factor: algbw * factor = busbw.

    all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all, gather,
    scatter (n-1)/n; broadcast, reduce, send/recv 1; barrier 0 (no bytes).
    """
    op = check_op(op)
    n = participants
    if op == "barrier":
        return 0.0
    if n <= 0:
        raise ValueError(f"participants: expected a positive count, got {n!r}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in SCALED:
        return (n - 1) / n
    return 1.0


def reported_bytes(op: str, count: int, itemsize: int, participants: int) -> int:
    """S of nccl-tests for a per-participant ``count`` of ``itemsize``-byte elements."""
    op = check_op(op)
    if op == "barrier":
        return 0
    scale = participants if op in SCALED else 1
    return count * itemsize * scale


def count_for_bytes(op: str, nbytes: int, participants: int) -> int:
    """Per-participant count of 1-byte elements whose reported S is ``nbytes``.

    For the ops whose S is per-rank count times p, a size that does not divide
    evenly is rounded up to whole bytes per participant.
    """
    op = check_op(op)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes: expected a non-negative integer, got {nbytes!r}")
    if op == "barrier":
        return 0
    if op in SCALED:
        return math.ceil(nbytes / participants)
    return nbytes
