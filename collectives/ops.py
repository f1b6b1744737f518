"""Collective operations and reduce operations: the one vocabulary of names, the one rule table of
reduce op x dtype, buffer conventions, bandwidth reporting.

Every executor (the in-process one, ``collectives.executor``, and the
torch.distributed backend, ``collectives.distributed``) names collectives with
:data:`OPS` (:func:`check_op` maps the other spellings onto them), reads reduce
ops with :func:`parse_reduce_op`, and checks a reduce op against a dtype with
:func:`check_reduce` (:data:`REDUCE_RULES`) and a premul_sum factor with
:func:`premul_factor`, before anything is written.

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
import numbers
from types import MappingProxyType
from typing import Mapping

from devices.dtypes import dtype_label

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
_REDUCE_ALIASES = {"product": "prod", "mean": "avg", "average": "avg", "premulsum": "premul_sum"}


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


# -- reduce ops -----------------------------------------------------------------------------------


def parse_reduce_op(op) -> tuple[str, object]:
    """``(name, premul factor or None)`` of a reduce op given by name or as a torch.distributed object.

    Accepts ``"sum"``, ``"ReduceOp.SUM"``, ``torch.distributed.ReduceOp.SUM``
    (a ``RedOpType``), a ``ReduceOp`` instance, and the premul_sum op
    ``torch.distributed._make_nccl_premul_sum(factor)`` (its factor is
    returned).  ValueError listing the accepted names otherwise.  Torch is never
    imported: the objects are read by their ``name`` / ``__getstate__``.
    """
    factor = None
    key = op
    if not isinstance(op, str):
        state = None
        if not isinstance(getattr(op, "name", None), str):
            getstate = getattr(op, "__getstate__", None)
            try:
                state = getstate() if callable(getstate) else None
            except TypeError:
                state = None
        if isinstance(state, tuple) and len(state) == 2 and isinstance(getattr(state[0], "name", None), str):
            key, factor = state[0].name, state[1]  # a ReduceOp instance: (RedOpType, premul factor)
        elif isinstance(getattr(op, "name", None), str):
            key = op.name  # a RedOpType enum member
        else:
            raise ValueError(f"op: expected a reduce op name or torch.distributed.ReduceOp, got {op!r}; "
                             f"accepted: {', '.join(REDUCE_OPS)}")
    name = str(key).strip().lower()
    for prefix in ("reduceop.", "redoptype.", "redopt."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = _REDUCE_ALIASES.get(name, name)
    if name not in REDUCE_OPS:
        raise ValueError(f"op: unknown reduce op {op!r}; accepted: {', '.join(REDUCE_OPS)}")
    return name, factor


def check_reduce_op(op) -> str:
    """The canonical name of reduce op ``op`` (see :func:`parse_reduce_op`); ValueError listing them."""
    return parse_reduce_op(op)[0]


DTYPE_CLASSES: tuple[str, ...] = ("float", "int", "bool", "complex")
"""The classes the reduce-op rules are written in (see :func:`dtype_class`)."""


def dtype_class(dtype) -> str:
    """``float``, ``int``, ``bool`` or ``complex`` for a torch dtype or its name (``"bfloat16"``)."""
    name = dtype_label(dtype)
    if name == "bool":
        return "bool"
    if name.startswith("complex"):
        return "complex"
    if name.startswith(("float", "bfloat")) or name in ("half", "double"):
        return "float"
    if name.startswith(("int", "uint")):
        return "int"
    raise ValueError(f"dtype: unknown dtype {dtype!r}")


REDUCE_RULES: Mapping[str, frozenset[str]] = MappingProxyType({
    "sum": frozenset({"float", "int", "bool", "complex"}),
    "prod": frozenset({"float", "int", "bool"}),
    "min": frozenset({"float", "int", "bool"}),
    "max": frozenset({"float", "int", "bool"}),
    "avg": frozenset({"float", "int", "complex"}),
    "premul_sum": frozenset({"float", "int", "complex"}),
    "band": frozenset({"int", "bool"}),
    "bor": frozenset({"int", "bool"}),
    "bxor": frozenset({"int", "bool"}),
})
"""Reduce op -> the dtype classes it is defined on: the one rule, for every executor.

Where NCCL defines the op, NCCL's rule (src/enqueue.cc ``hostToDevRedOp``,
src/device/reduce_kernel.h): sum, prod, min, max, avg and premul_sum on every
integer and floating type.  Integer avg is the wrapped sum divided by the
participant count, truncated toward zero (NCCL's ``FuncSumPostDiv``); integer
premul_sum multiplies by a scalar of the tensor's own type
(``ncclRedOpCreatePreMulSum``: "Both the input values and the scalar are of
type datatype"), so the factor must be an integer that fits it.  Where NCCL
has no such type or op, torch.distributed's: bool sum/prod are logical or/and
(ProcessGroupNCCL maps bool SUM to MAX), complex takes sum, avg and premul_sum
only (torch.distributed's ``supports_complex``), the bitwise ops take integers
and bool (Gloo).
"""

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1), "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1), "uint8": (0, (1 << 8) - 1), "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1), "uint64": (0, (1 << 64) - 1),
}


def check_reduce(op: str, dtype, where: str = "op") -> None:
    """TypeError unless reduce op ``op`` is defined on ``dtype`` (:data:`REDUCE_RULES`), naming what is."""
    name = check_reduce_op(op)
    klass = dtype_class(dtype)
    if klass not in REDUCE_RULES[name]:
        ok = ", ".join(c for c in DTYPE_CLASSES if c in REDUCE_RULES[name])
        takes = sorted(o for o, classes in REDUCE_RULES.items() if klass in classes)
        raise TypeError(f"{where}: reduce op {name!r} is not defined on {dtype_label(dtype)} ({klass}) tensors; "
                        f"{name} takes {ok} dtypes; {klass} tensors take {', '.join(takes)}")


def premul_factor(factor, dtype, where: str = "factor"):
    """premul_sum's factor as a Python number of ``dtype``'s class, checked before anything is written.

    Accepted: a real number, or a tensor holding one element (0-d or
    shape (1,)), read once here.  On an integer dtype the factor must be an
    integer that fits the dtype (NCCL multiplies in the tensor's own type).
    TypeError for anything else (strings, lists, complex, bool), ValueError
    for a missing, non-finite, out-of-range factor or a tensor of the wrong
    shape; each names ``where``.
    """
    klass = dtype_class(dtype)
    if factor is None:
        raise ValueError(f"{where}: premul_sum needs a factor (a number or a one-element tensor)")
    value = factor
    if not isinstance(factor, numbers.Number) and hasattr(factor, "numel") and hasattr(factor, "dtype"):
        if factor.numel() != 1:
            raise ValueError(f"{where}: a tensor factor must be a scalar (0-d or one element), got shape "
                             f"{tuple(factor.shape)}")
        kind = dtype_class(factor.dtype)
        if kind in ("bool", "complex"):
            raise TypeError(f"{where}: a tensor factor must be real (integer or floating), got "
                            f"{dtype_label(factor.dtype)}")
        value = factor.reshape(()).item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: expected a real number or a one-element tensor, got {type(factor).__name__} "
                        f"{factor!r}")
    if klass == "int":
        if isinstance(value, numbers.Integral):
            value = int(value)
        elif math.isfinite(value) and float(value).is_integer():
            value = int(value)
        else:
            raise TypeError(f"{where}: premul_sum on {dtype_label(dtype)} needs an integer factor (NCCL multiplies in "
                            f"the tensor's own type), got {factor!r}")
        lo, hi = _INT_RANGES.get(dtype_label(dtype), (-math.inf, math.inf))
        if not lo <= value <= hi:
            raise ValueError(f"{where}: {value} does not fit {dtype_label(dtype)} ({lo}..{hi})")
        return value
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite factor, got {value}")
    return value


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
