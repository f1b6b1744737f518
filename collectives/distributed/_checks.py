"""Argument checks of the ``hybrid`` torch.distributed backend.

Two kinds: local checks (device, layout, dtype, shapes of one rank's
arguments) and checks across peers (every rank called the same collective
with matching sizes, dtype, reduce op and root).  Collectives are named in the
one vocabulary of ``collectives.ops`` (``all_reduce``, ``all_to_all``...), and
which reduce op takes which dtype is its one rule table
(``collectives.ops.REDUCE_RULES``), shared with the in-process executor; what
is added here is what the engine (Gloo) can carry.  The second needs one small
all-gather of a fixed-size descriptor per collective; every rank sees the same
descriptors and so reaches the same verdict, which is why a bad argument on
one rank makes every rank raise instead of leaving the others waiting.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch
from torch.distributed import ReduceOp

from collectives import ops
from collectives.distributed._names import DEVICE
from devices.dtypes import dtype_label

# Element types Gloo moves and reduces natively (probed on torch 2.13: int16,
# the unsigned 16/32/64-bit types and the float8 types are refused with
# "Invalid scalar type").  Data-movement ops carry any other type as bytes.
GLOO_DTYPES = frozenset({
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32,
    torch.int64, torch.bool, torch.complex64, torch.complex128,
})

GLOO_REDUCE = {
    "sum": ReduceOp.SUM, "prod": ReduceOp.PRODUCT, "min": ReduceOp.MIN, "max": ReduceOp.MAX,
    "band": ReduceOp.BAND, "bor": ReduceOp.BOR, "bxor": ReduceOp.BXOR,
    # avg and premul_sum run as a sum (with a division after, or a multiplication before).
    "avg": ReduceOp.SUM, "premul_sum": ReduceOp.SUM,
}
_REDUCE_INDEX = {name: i for i, name in enumerate(ops.REDUCE_OPS)}

# Stable codes for the descriptor: a dtype or op that is not listed gets -1
# and still compares equal to itself.
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32,
           torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_DTYPE_INDEX = {d: i for i, d in enumerate(_DTYPES)}
_OP_INDEX = {name: i for i, name in enumerate(ops.OPS)}
COALESCED = "{} (coalesced)"
"""How a coalesced call is labelled in messages: several tensors as one collective."""
_MAGIC = 0x4859_4232  # "HYB2": a descriptor of this protocol version (HYB1 carried no modelled clock)
_HEAD = 11
_READY = 10
"""Column of a descriptor row: the rank's modelled clock when it issued the call (-1: not placed)."""


class ArgumentError(ValueError):
    """A collective's arguments were refused before any output was written."""


@dataclass(slots=True)
class Call:
    """What one rank asks of a collective: enough to check peers and to model its time."""

    op: str
    """The collective, one of ``collectives.ops.OPS`` (``all_reduce``, ``all_to_all``...)."""
    dtype: torch.dtype | None = None
    reduce: str = ""
    root: int = -1
    count: int = 0
    """Elements per participant, collectives.ops convention (for all_gather: the per-rank input)."""
    itemsize: int = 1
    sizes: tuple = ()
    """Per-tensor element counts that must agree across ranks (coalesced calls)."""
    send: tuple | None = None
    """all_to_all: elements this rank sends to each peer."""
    recv: tuple | None = None
    """all_to_all: elements this rank receives from each peer."""
    modelled: bool = False
    """True when a hybrid tensor takes part: the call is placed on the timeline."""
    coalesced: bool = False
    """Several tensors as one collective (``all_reduce_coalesced``, ``all_gather_into_tensor`` in a
    coalescing block...)."""

    @property
    def label(self) -> str:
        """The name errors use."""
        return COALESCED.format(self.op) if self.coalesced else self.op


def op_timeout(opts):
    """The timeout a call's options carry (a timedelta), or None when unset (c10d's -1 ms)."""
    t = getattr(opts, "timeout", None)
    return t if t is not None and t.total_seconds() > 0 else None


def reduce_spec(op) -> tuple[str, object]:
    """(name, premul factor or None) of a ``ReduceOp`` / ``RedOpType`` / name (``collectives.ops``)."""
    try:
        return ops.parse_reduce_op(op)
    except ValueError as e:
        raise ArgumentError(str(e)) from None


def check_reduce(label: str, name: str, dtype: torch.dtype, factor=None):
    """Refuse a reduce op ``dtype`` does not take (``collectives.ops.REDUCE_RULES``) or the engine cannot carry.

    Returns premul_sum's factor as a number of the dtype's class
    (``collectives.ops.premul_factor``), None for the other ops.
    """
    ops.check_reduce(name, dtype, where=f"{label}: op")
    if dtype not in GLOO_DTYPES:
        raise ArgumentError(
            f"{label}: cannot reduce {dtype_label(dtype)} tensors (Gloo has no {dtype_label(dtype)} arithmetic); "
            f"reducible dtypes: {', '.join(sorted(dtype_label(d) for d in GLOO_DTYPES))}")
    if name == "premul_sum":
        if factor is None:
            raise ArgumentError(f"{label}: premul_sum without a factor (build it with "
                                "torch.distributed._make_nccl_premul_sum(factor))")
        return ops.premul_factor(factor, dtype, where=f"{label}: premul_sum factor")
    return None


def as_transport(t: torch.Tensor, reducing: bool) -> torch.Tensor:
    """The view of ``t`` the engine sees: complex as real pairs, foreign dtypes as bytes (movement only)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if not reducing and t.dtype not in GLOO_DTYPES:
        t = t.reshape(-1).view(torch.uint8)
    return t.reshape(-1)


def rows_view(t: torch.Tensor) -> torch.Tensor:
    """A 2-D (rows, row-elements) view keeping dim 0, for split all_to_all; foreign dtypes as bytes."""
    if t.is_complex():
        t = torch.view_as_real(t)
    rows = t.shape[0] if t.dim() else 1
    width = t.numel() // rows if rows else 0
    t = t.reshape(rows, width)
    if t.dtype not in GLOO_DTYPES:
        t = t.view(torch.uint8)
    return t


def describe(call: Call | None, error: BaseException | None, world: int, ready_ps: int = -1) -> torch.Tensor:
    """This rank's descriptor row (int64) for the peer check; an error row when local checks failed.
    ``ready_ps``: the rank's modelled clock at the call (-1: the call is not placed on a timeline)."""
    row = torch.zeros(_HEAD + 2 * world, dtype=torch.int64)
    row[0] = _MAGIC
    row[_READY] = ready_ps
    if call is None or error is not None:
        row[1] = 1
        return row
    sig = zlib.crc32(repr(call.sizes).encode()) if call.sizes else 0
    row[2:_READY] = torch.tensor([
        2 * _OP_INDEX[call.op] + call.coalesced, _DTYPE_INDEX.get(call.dtype, -1) if call.dtype is not None else -2,
        _REDUCE_INDEX.get(call.reduce, -1), call.root, call.count, call.itemsize, sig, len(call.sizes)])
    if call.send is not None:
        row[_HEAD:_HEAD + world] = torch.tensor(call.send, dtype=torch.int64)
        row[_HEAD + world:] = torch.tensor(call.recv, dtype=torch.int64)
    return row


def disagreement(rows: torch.Tensor, rank: int, call: Call | None) -> str | None:
    """The first way the ranks' descriptors disagree, as a sentence; None when they agree."""
    world = rows.shape[0]
    table = rows.tolist()
    for r, row in enumerate(table):
        if row[0] != _MAGIC:
            return f"rank {r} sent no hybrid-backend descriptor (a different backend or version on that rank?)"
    failed = [r for r, row in enumerate(table) if row[1]]
    if failed:
        others = [r for r in failed if r != rank]
        return (f"rank(s) {', '.join(map(str, others or failed))} refused their arguments "
                "(see the error on that rank); no rank has written any output")
    called = [_op_label(row[2]) for row in table]
    name = ops.OPS[table[rank][2] // 2]
    if len(set(called)) > 1:
        return "ranks called different collectives: " + ", ".join(f"rank {r}: {o}" for r, o in enumerate(called))
    labels = {3: "dtype", 4: "reduce op", 5: "root"}
    for col, label in labels.items():
        values = [row[col] for row in table]
        if len(set(values)) > 1:
            shown = {3: _dtype_label, 4: _reduce_label, 5: str}[col]
            return f"{name}: ranks disagree on the {label}: " + ", ".join(
                f"rank {r}: {shown(v)}" for r, v in enumerate(values))
    counts = [row[6] for row in table]
    if name == "all_to_all":
        send = [row[_HEAD:_HEAD + world] for row in table]
        recv = [row[_HEAD + world:] for row in table]
        for i in range(world):
            for j in range(world):
                if send[i][j] != recv[j][i]:
                    return (f"all_to_all: rank {i} sends {send[i][j]} elements to rank {j}, which expects "
                            f"{recv[j][i]} from it (split sizes do not match)")
        return None
    if len(set(counts)) > 1:
        what = {"all_gather": "input elements", "gather": "input elements", "reduce_scatter": "output elements",
                "scatter": "output elements"}.get(name, "elements")
        return f"{name}: ranks disagree on the {what} per rank: " + ", ".join(
            f"rank {r}: {c}" for r, c in enumerate(counts))
    if len({(row[8], row[9]) for row in table}) > 1:
        return f"{name}: ranks pass different lists of tensor sizes: " + ", ".join(
            f"rank {r}: {row[9]} tensors" for r, row in enumerate(table))
    return None


def latest_ready(rows) -> int:
    """The latest modelled clock among the ranks' descriptor rows (-1 when no rank's call is placed)."""
    return max((int(row[_READY]) for row in rows), default=-1)


def send_matrix(rows, world: int) -> tuple[tuple[int, ...], ...]:
    """all_to_all: elements each rank sends to each peer, from the agreed descriptor rows."""
    return tuple(tuple(int(x) for x in row[_HEAD:_HEAD + world]) for row in rows)


def _dtype_label(code: int) -> str:
    if code == -2:
        return "none"
    return dtype_label(_DTYPES[code]) if 0 <= code < len(_DTYPES) else f"dtype #{code}"


def _reduce_label(code: int) -> str:
    return ops.REDUCE_OPS[code] if 0 <= code < len(ops.REDUCE_OPS) else "none"


def _op_label(code: int) -> str:
    name = ops.OPS[code // 2] if 0 <= code // 2 < len(ops.OPS) else f"collective #{code}"
    return COALESCED.format(name) if code % 2 else name


P2P_HEADER = 6


def p2p_header(t: torch.Tensor, slot: int, start_ps: int = -1) -> torch.Tensor:
    """The header a send puts before its payload: magic, dtype, bytes, elements, sender slot, and the
    transfer's modelled start (-1: the sender did not place it)."""
    return torch.tensor([_MAGIC, _DTYPE_INDEX.get(t.dtype, -1), t.numel() * t.element_size(), t.numel(), slot,
                         start_ps], dtype=torch.int64)


def p2p_mismatch(header: torch.Tensor, t: torch.Tensor, src: int, rank: int) -> str | None:
    """Why a received header does not fit the receive buffer ``t`` (None: it fits)."""
    magic, dtype, nbytes, numel, _, _ = header.tolist()
    if magic != _MAGIC:
        return f"recv on rank {rank}: the message from rank {src} has no hybrid-backend header"
    if dtype != _DTYPE_INDEX.get(t.dtype, -1) or nbytes != t.numel() * t.element_size():
        return (f"recv on rank {rank}: rank {src} sent {_dtype_label(dtype)}[{numel}] "
                f"but the receive buffer is {dtype_label(t.dtype)}[{t.numel()}]; the buffer was left untouched")
    return None
