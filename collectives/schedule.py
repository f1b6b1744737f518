"""Schedules: a collective as rounds of chunked transfers, run on data and costed on a topology alike.

A :class:`Schedule` is what an algorithm builds from a :class:`CollectiveSpec`.
Its rounds run one after another; the :class:`Transfer` s inside a round run
concurrently.  The executor (``collectives.executor``) moves and reduces real
tensors by walking the rounds; the cost model (``collectives.cost``) prices the
same rounds on a topology, so the modelled time is the time of the algorithm
that ran.

Buffers are flat element arrays per participant: ``"in"`` and ``"out"`` are the
user's (sizes from :func:`io_sizes`), ``"tmp"`` is scratch an algorithm may ask
for.  Offsets and counts are in elements.

Rules every builder keeps (checked by :func:`check`):

* inside a round no transfer reads a region another transfer of the round
  writes, except that several reduces into one region accumulate (the
  executor applies them in order; the reduce ops are commutative);
* counts are positive, except zero-byte messages of a barrier.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from typing import Iterable, Mapping, Sequence

from collectives.ops import ROOTED, check_op


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSpec:
    """What to build: one collective over ``participants`` ranks (ranks are 0..p-1)."""

    op: str
    """Collective name (see :data:`collectives.ops.OPS`)."""
    participants: int
    """Number of ranks, at least 1."""
    count: int = 0
    """Elements per participant, in the convention of :mod:`collectives.ops`."""
    itemsize: int = 1
    """Bytes per element (the cost model prices ``count * itemsize``)."""
    root: int = 0
    """Root rank of broadcast, reduce, gather, scatter."""
    splits: tuple[tuple[int, ...], ...] | None = None
    """all_to_all only: ``splits[i][j]`` elements rank i sends to rank j (None: ``count`` to each)."""
    pipeline: int = 1
    """Chunks a pipelined algorithm cuts the data into (ring broadcast/reduce, trees, in-switch)."""
    groups: tuple[tuple[int, ...], ...] | None = None
    """Hierarchical only: the ranks of each domain, equal sizes, domain after domain."""
    outer: str = "ring"
    """Hierarchical only: the algorithm run across domains."""
    torus: tuple[int, ...] | None = None
    """Torus only: the torus shape; rank i sits at row-major coordinate i."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", check_op(self.op))
        for name in ("participants", "count", "itemsize", "root", "pipeline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
        if self.participants < 1:
            raise ValueError(f"participants: expected at least 1, got {self.participants}")
        if self.itemsize < 1 or self.pipeline < 1:
            raise ValueError("itemsize and pipeline must be at least 1")
        if self.op in ROOTED and not self.root < self.participants:
            raise ValueError(f"root: {self.root} is not a rank of {self.participants} participants")
        if self.op == "send_recv" and self.participants != 2:
            raise ValueError(f"participants: send_recv takes 2 (sender, receiver), got {self.participants}")
        if self.torus is not None:
            shape = tuple(int(d) for d in self.torus)
            if not shape or min(shape) < 1 or math.prod(shape) != self.participants:
                raise ValueError(f"torus: shape {list(shape)} does not hold {self.participants} participants")
            object.__setattr__(self, "torus", shape)
        if self.splits is not None:
            if self.op != "all_to_all":
                raise ValueError(f"splits: only all_to_all takes splits, not {self.op}")
            object.__setattr__(self, "splits", check_splits(self.splits, self.participants))

    def derive(self, **changes) -> CollectiveSpec:
        """A copy with ``changes`` applied, without validating again.

        For the closed forms' own sub-problems (a pipeline depth, the
        across-domain part of a hierarchical all_reduce), which are priced
        thousands of times per million-chip estimate: the changes must keep the
        spec valid (positive counts, participants matching the other fields).
        """
        new = object.__new__(CollectiveSpec)
        for name in _SPEC_FIELDS:
            object.__setattr__(new, name, changes.pop(name) if name in changes else getattr(self, name))
        if changes:
            raise TypeError(f"derive: unknown CollectiveSpec fields {sorted(changes)}")
        return new

    def sends(self, i: int, j: int) -> int:
        """all_to_all: elements rank ``i`` sends to rank ``j``."""
        return self.count if self.splits is None else self.splits[i][j]


def check_splits(splits, participants: int) -> tuple[tuple[int, ...], ...]:
    """all_to_all's split matrix (``splits[i][j]``: elements rank i sends to rank j) as tuples of ints.

    Rows and entries are checked, never truncated: an entry must be a whole
    number of elements (``2`` or ``2.0``, not ``2.7`` or ``True``) and
    non-negative, and the matrix ``participants`` x ``participants``.
    TypeError / ValueError naming the entry otherwise.
    """
    p = participants
    shape = f"expected a {p}x{p} matrix (splits[i][j]: elements rank i sends to rank j)"
    if hasattr(splits, "tolist") and not isinstance(splits, (list, tuple)):
        splits = splits.tolist()  # a tensor or an array
    if not isinstance(splits, (list, tuple)) or len(splits) != p:
        raise ValueError(f"splits: {shape}, got {splits!r}")
    rows = []
    for i, row in enumerate(splits):
        if hasattr(row, "tolist") and not isinstance(row, (list, tuple)):
            row = row.tolist()
        if not isinstance(row, (list, tuple)) or len(row) != p:
            raise ValueError(f"splits[{i}]: {shape}, got row {row!r}")
        out = []
        for j, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, numbers.Real):
                raise TypeError(f"splits[{i}][{j}]: expected a whole number of elements, got "
                                f"{type(x).__name__} {x!r}")
            if not isinstance(x, numbers.Integral) and not (math.isfinite(x) and float(x).is_integer()):
                raise TypeError(f"splits[{i}][{j}]: expected a whole number of elements, got {x!r}")
            if x < 0:
                raise ValueError(f"splits[{i}][{j}]: element counts must be non-negative, got {x!r}")
            out.append(int(x))
        rows.append(tuple(out))
    return tuple(rows)


_SPEC_FIELDS = tuple(f.name for f in fields(CollectiveSpec))


@dataclass(frozen=True, slots=True)
class Transfer:
    """Move ``count`` elements, optionally reducing them into the destination.

    One source and one destination is a point-to-point message (``src == dst``:
    a local copy or reduce).  Several sources with ``via_switch`` is an
    in-switch reduction (NVLS ``ld_reduce``): the destination gets the
    reduction of all sources.  Several destinations with ``via_switch`` is a
    multicast.  With ``reduce`` and one source: ``dst = acc (op) data`` when
    ``acc_buf`` is set, else ``dst = dst (op) data``.
    """

    srcs: tuple[int, ...]
    dsts: tuple[int, ...]
    src_buf: str
    src_off: int
    dst_buf: str
    dst_off: int
    count: int
    reduce: bool = False
    acc_buf: str | None = None
    acc_off: int = 0
    via_switch: bool = False


@dataclass(frozen=True, slots=True)
class Schedule:
    """An algorithm's plan for one collective: rounds of concurrent transfers."""

    spec: CollectiveSpec
    """What was asked for."""
    algorithm: str
    """The registry name of the algorithm that built it."""
    rounds: tuple[tuple[Transfer, ...], ...]
    """Rounds in order; transfers inside a round run concurrently."""
    buffers: Mapping[str, tuple[int, ...]]
    """Buffer name -> elements per participant (0: the participant has none)."""
    latency_class: str = "ring"
    """Which per-collective base latency applies (``ring``, ``tree``, ``nvls``; see ``collectives.tuning``)."""

    @property
    def participants(self) -> int:
        """Number of ranks."""
        return self.spec.participants

    @property
    def transfers(self) -> int:
        """Total transfers over all rounds."""
        return sum(len(r) for r in self.rounds)


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (offset, size) pieces of ``count``: the first ``count % parts`` one larger."""
    q, r = divmod(count, parts)
    out, off = [], 0
    for i in range(parts):
        size = q + (1 if i < r else 0)
        out.append((off, size))
        off += size
    return out


def io_sizes(spec: CollectiveSpec) -> dict[str, tuple[int, ...]]:
    """Elements of each participant's ``in`` and ``out`` buffer for ``spec`` (0 = no buffer)."""
    p, c, op, root = spec.participants, spec.count, spec.op, spec.root
    full = tuple([c] * p)
    only_root = tuple(c if i == root else 0 for i in range(p))
    if op == "all_reduce":
        return {"in": full, "out": full}
    if op == "reduce_scatter":
        return {"in": tuple([c * p] * p), "out": full}
    if op == "all_gather":
        return {"in": full, "out": tuple([c * p] * p)}
    if op == "broadcast":
        return {"in": only_root, "out": full}
    if op == "reduce":
        return {"in": full, "out": only_root}
    if op == "gather":
        return {"in": full, "out": tuple(c * p if i == root else 0 for i in range(p))}
    if op == "scatter":
        return {"in": tuple(c * p if i == root else 0 for i in range(p)), "out": full}
    if op == "all_to_all":
        return {"in": tuple(sum(spec.sends(i, j) for j in range(p)) for i in range(p)),
                "out": tuple(sum(spec.sends(j, i) for j in range(p)) for i in range(p))}
    if op == "send_recv":
        return {"in": (c, 0), "out": (0, c)}
    return {"in": tuple([0] * p), "out": tuple([0] * p)}


class Rounds:
    """A growable list of rounds for builders: ``add(round, transfer)``, then :meth:`freeze`.

    Zero-count transfers are dropped (real implementations skip empty chunks),
    unless ``keep_empty`` (barrier messages).  Empty rounds vanish on freeze.
    """

    def __init__(self, keep_empty: bool = False) -> None:
        self._rounds: list[list[Transfer]] = []
        self._keep_empty = keep_empty

    def __len__(self) -> int:
        return len(self._rounds)

    def add(self, index: int, transfer: Transfer) -> None:
        """Append ``transfer`` to round ``index`` (rounds are created as needed)."""
        if transfer.count <= 0 and not self._keep_empty:
            return
        while len(self._rounds) <= index:
            self._rounds.append([])
        self._rounds[index].append(transfer)

    def send(self, index: int, src: int, dst: int, src_buf: str, src_off: int, dst_buf: str, dst_off: int,
             count: int, *, reduce: bool = False, acc_buf: str | None = None, acc_off: int = 0) -> None:
        """Shorthand for a point-to-point :class:`Transfer` (``src == dst`` is a local copy or reduce)."""
        self.add(index, Transfer((src,), (dst,), src_buf, src_off, dst_buf, dst_off, count, reduce, acc_buf, acc_off))

    def extend(self, rounds: Iterable[Sequence[Transfer]], start: int) -> int:
        """Merge ``rounds`` in from round ``start``; returns the round after the last one merged."""
        index = start
        for rnd in rounds:
            for transfer in rnd:
                self.add(index, transfer)
            index += 1
        return index

    def freeze(self) -> tuple[tuple[Transfer, ...], ...]:
        """The rounds as tuples, empty rounds removed."""
        return tuple(tuple(r) for r in self._rounds if r)


def make(spec: CollectiveSpec, algorithm: str, rounds: Rounds | tuple, extra: Mapping[str, Sequence[int]] | None = None,
         latency_class: str = "ring") -> Schedule:
    """A :class:`Schedule` with the op's in/out buffers plus ``extra`` scratch buffers."""
    buffers = dict(io_sizes(spec))
    for name, sizes in (extra or {}).items():
        buffers[name] = tuple(int(s) for s in sizes)
    frozen = rounds.freeze() if isinstance(rounds, Rounds) else tuple(tuple(r) for r in rounds)
    return Schedule(spec, algorithm, frozen, buffers, latency_class)


def local_copy(spec: CollectiveSpec, algorithm: str) -> Schedule:
    """The schedule of any collective on one participant: copy what the op asks for, locally."""
    r = Rounds()
    c = spec.count
    if spec.op == "all_to_all":
        r.send(0, 0, 0, "in", 0, "out", 0, spec.sends(0, 0))
    elif spec.op != "barrier":
        r.send(0, 0, 0, "in", 0, "out", 0, c)
    return make(spec, algorithm, r)


def embed(rounds: Iterable[Sequence[Transfer]], ranks: Sequence[int],
          buffers: Mapping[str, tuple[str, int]]) -> list[list[Transfer]]:
    """Rounds of a sub-schedule rewritten onto global ranks and buffer regions.

    ``ranks[i]`` is the global rank of sub-rank i; ``buffers[name] = (new_name, offset)``
    moves each sub-buffer to a region of a global buffer (used to compose
    hierarchical schedules from flat ones).
    """
    out: list[list[Transfer]] = []
    for rnd in rounds:
        new = []
        for t in rnd:
            sb, so = buffers[t.src_buf]
            db, do = buffers[t.dst_buf]
            if t.acc_buf is not None:
                ab, ao = buffers[t.acc_buf]
                acc_buf, acc_off = ab, ao + t.acc_off
            else:
                acc_buf, acc_off = None, 0
            new.append(Transfer(tuple(ranks[s] for s in t.srcs), tuple(ranks[d] for d in t.dsts), sb, so + t.src_off,
                                db, do + t.dst_off, t.count, t.reduce, acc_buf, acc_off, t.via_switch))
        out.append(new)
    return out


# -- checks ---------------------------------------------------------------


def _regions(t: Transfer):
    """(kind, participant, buffer, lo, hi) of everything ``t`` reads and writes."""
    n = t.count
    for s in t.srcs:
        yield "read", s, t.src_buf, t.src_off, t.src_off + n
    for d in t.dsts:
        if t.reduce and t.acc_buf is not None and (t.acc_buf, t.acc_off) != (t.dst_buf, t.dst_off):
            yield "acc", d, t.acc_buf, t.acc_off, t.acc_off + n
        elif t.reduce and (len(t.srcs) == 1 or t.acc_buf is not None):
            yield "self", d, t.dst_buf, t.dst_off, t.dst_off + n
        yield "write", d, t.dst_buf, t.dst_off, t.dst_off + n


def check(schedule: Schedule) -> None:
    """Raise AssertionError if the schedule breaks the rules of this module.

    Bounds: every region lies inside its buffer.  Hazards: inside a round, no
    region one transfer reads is written by another, except accumulating
    reduces into the same region.
    """
    p = schedule.participants
    for index, rnd in enumerate(schedule.rounds):
        touched: dict[tuple[int, str], list] = {}
        for k, t in enumerate(rnd):
            if t.count < 0 or (t.count == 0 and schedule.spec.op != "barrier"):
                raise AssertionError(f"round {index}: transfer {t} has count {t.count}")
            if t.reduce and (t.acc_buf is not None) and len(t.srcs) > 1 and not t.via_switch:
                raise AssertionError(f"round {index}: multi-source transfer without via_switch: {t}")
            for kind, who, buf, lo, hi in _regions(t):
                if not 0 <= who < p:
                    raise AssertionError(f"round {index}: rank {who} out of range in {t}")
                size = schedule.buffers.get(buf, (0,) * p)[who]
                if hi > size or lo < 0:
                    raise AssertionError(f"round {index}: {buf}[{lo}:{hi}] of rank {who} outside its {size} elements")
                touched.setdefault((who, buf), []).append((kind, lo, hi, k, t.reduce))
        for (who, buf), items in touched.items():
            writes = [x for x in items if x[0] == "write"]
            for kind, lo, hi, k, red in items:
                for _, wlo, whi, wk, wred in writes:
                    if wk == k or whi <= lo or hi <= wlo:
                        continue
                    if kind == "write" and red and wred:
                        continue  # accumulating reduces into one region
                    if kind == "self" and wred:
                        continue
                    if kind == "write" and k > wk:
                        continue  # reported once, from the earlier writer's side
                    raise AssertionError(f"round {index}: rank {who} {buf}[{lo}:{hi}] ({kind}) overlaps a write "
                                         f"[{wlo}:{whi}] in the same round")


def inplace_safe(schedule: Schedule, alias: Sequence[tuple[int, int] | None]) -> bool:
    """True when the schedule gives the same result with rank i's ``in`` and ``out`` sharing memory.

    ``alias[i] = (in_base, out_base)``: element k of ``in`` and element k of
    ``out`` live at ``in_base + k`` and ``out_base + k`` of one address space
    (None: rank i is not in place).  A schedule is unsafe in place when it
    reads an input region after a transfer has overwritten it through the
    output; the executor then keeps a copy of the inputs.
    """
    written: dict[int, list[tuple[int, int]]] = {}

    def overlaps(regions, lo: int, hi: int) -> bool:
        return any(not (whi <= lo or hi <= wlo) for wlo, whi in regions)

    for rnd in schedule.rounds:
        pending: dict[int, list[tuple[int, int]]] = {}
        for t in rnd:
            n = t.count
            reads = [(s, t.src_off) for s in t.srcs if t.src_buf == "in"]
            if t.reduce and t.acc_buf == "in":
                reads += [(d, t.acc_off) for d in t.dsts]
            for who, off in reads:
                if alias[who] is None:
                    continue
                lo = alias[who][0] + off
                # Reading and writing the same elements in one transfer is elementwise, hence safe.
                own = t.dst_buf == "out" and who in t.dsts and alias[who][1] + t.dst_off == lo
                if own:
                    continue
                if overlaps(written.get(who, ()), lo, lo + n) or overlaps(pending.get(who, ()), lo, lo + n):
                    return False
            if t.dst_buf == "out":
                for d in t.dsts:
                    if alias[d] is not None:
                        base = alias[d][1] + t.dst_off
                        if not t.reduce and t.src_buf == "in" and t.srcs == (d,) and alias[d][0] + t.src_off == base:
                            continue  # copying an element onto itself changes nothing
                        pending.setdefault(d, []).append((base, base + n))
        for who, regions in pending.items():
            written.setdefault(who, []).extend(regions)
    return True
