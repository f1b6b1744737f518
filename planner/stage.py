"""A pipeline stage: block ranges on a group of slots of one kind, with its tensor/context/data degrees.

The slots of a stage are ordered (replica, context rank, tensor rank): slot
``slots[(r * cp + c) * tp + t]`` holds tensor rank ``t`` of context rank ``c``
of data-parallel replica ``r``. :class:`SlotGrid` is such an ordering given by
strides, so that a stage of 65,536 chips of a million-chip rack is three
integers and its groups are ``range`` objects; a live plan passes a tuple.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterator, Sequence

RECOMPUTE = ("none", "selective", "full", "auto")
"""Accepted activation-recompute modes (plus ``full:K``: whole-layer recompute of K layers per chunk)."""


def check_recompute(value: object) -> str:
    """``value`` if it is a recompute mode, else ValueError listing the accepted ones."""
    if value in RECOMPUTE:
        return value  # type: ignore[return-value]
    if isinstance(value, str) and value.startswith("full:") and value[5:].isdigit() and int(value[5:]) > 0:
        return value
    raise ValueError(f"recompute: unknown {value!r}; accepted: {', '.join(RECOMPUTE)}, or 'full:K' "
                     f"(K layers per chunk)")


@dataclass(frozen=True, slots=True)
class SlotGrid(Sequence[int]):
    """Slots ``base + r * dp_stride + c * cp_stride + t * tp_stride`` for r < dp, c < cp, t < tp."""

    base: int
    tp: int
    cp: int
    dp: int
    tp_stride: int = 1
    cp_stride: int = 0
    dp_stride: int = 0

    def __len__(self) -> int:
        return self.tp * self.cp * self.dp

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"slot index {index} out of range for a stage of {len(self)} slots")
        r, rest = divmod(index, self.cp * self.tp)
        c, t = divmod(rest, self.tp)
        return self.base + r * self.dp_stride + c * self.cp_stride + t * self.tp_stride

    def __iter__(self) -> Iterator[int]:
        for i in range(len(self)):
            yield self[i]

    def group(self, dim: str, size: int | None = None) -> range:
        """The first group along ``dim`` (``tp``, ``cp``, ``dp``), optionally its first ``size`` members."""
        n, stride = {"tp": (self.tp, self.tp_stride), "cp": (self.cp, self.cp_stride),
                     "dp": (self.dp, self.dp_stride)}[dim]
        n = n if size is None else size
        return range(self.base, self.base + n * max(stride, 1), max(stride, 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """One pipeline stage (see the module doc)."""

    chunks: tuple[range, ...]
    """Block index ranges this stage runs: one per virtual chunk (interleaved schedules have several)."""
    kind: str
    """Chip kind of every slot of the stage."""
    slots: Sequence[int]
    """The stage's slots, ordered (replica, context rank, tensor rank): a tuple, a ``range`` or a :class:`SlotGrid`."""
    tp: int = 1
    """Tensor-parallel degree."""
    cp: int = 1
    """Context-parallel degree."""
    ep: int = 1
    """Expert-parallel degree (expert groups are carved from the data-parallel replicas)."""
    recompute: str | None = None
    """This stage's activation recompute (None: the step's)."""

    def __post_init__(self) -> None:
        chunks = self.chunks
        if isinstance(chunks, range):
            chunks = (chunks,)
        chunks = tuple(chunks)
        if not chunks or any(not isinstance(c, range) or len(c) == 0 or c.step != 1 for c in chunks):
            raise ValueError(f"chunks: expected non-empty ranges of block indices, got {self.chunks!r}")
        object.__setattr__(self, "chunks", chunks)
        for name in ("tp", "cp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        n = len(self.slots)
        if n == 0 or n % (self.tp * self.cp):
            raise ValueError(f"slots: a stage with tp={self.tp} and cp={self.cp} needs a multiple of "
                             f"{self.tp * self.cp} slots, got {n}")
        if self.dp % self.ep:
            raise ValueError(f"ep: expert parallelism {self.ep} does not divide the stage's {self.dp} "
                             f"data-parallel replicas")
        if self.recompute is not None:
            check_recompute(self.recompute)

    @property
    def dp(self) -> int:
        """Data-parallel replicas of the stage."""
        return len(self.slots) // (self.tp * self.cp)

    @property
    def blocks(self) -> list[int]:
        """Every block index of the stage, chunk by chunk."""
        return [i for c in self.chunks for i in c]

    def group(self, dim: str) -> Sequence[int]:
        """The first group of the stage along ``dim``: ``tp``, ``cp``, ``dp``, ``ep`` or ``edp``
        (the replicas holding the same experts)."""
        if isinstance(self.slots, SlotGrid):
            grid = self.slots
            if dim == "ep":
                return grid.group("dp", self.ep)
            if dim == "edp":
                return range(grid.base, grid.base + grid.dp * grid.dp_stride, grid.dp_stride * self.ep) \
                    if grid.dp > 1 else range(grid.base, grid.base + 1)
            return grid.group(dim)
        s, tp, cp = self.slots, self.tp, self.cp
        part = (lambda x: x) if isinstance(s, range) else tuple  # a range stage keeps range groups (symbolic)
        if dim == "tp":
            return part(s[:tp])
        if dim == "cp":
            return part(s[0:tp * cp:tp])
        if dim == "dp":
            return part(s[0::tp * cp])
        if dim == "ep":
            return part(s[0:tp * cp * self.ep:tp * cp])
        if dim == "edp":
            return part(s[0::tp * cp * self.ep])
        raise ValueError(f"dim: unknown group {dim!r}; accepted: tp, cp, dp, ep, edp")


class SlotRuns(Sequence[int]):
    """The slots of one kind on a whole rack, in rack order, held as the kind's runs within one replica and the
    replica count: no list of a million slots. A slice inside one run is a ``range``."""

    __slots__ = ("kind", "runs", "width", "replicas", "_starts", "_per")

    def __init__(self, kind: str, runs: Sequence[range], width: int, replicas: int) -> None:
        self.kind, self.runs, self.width, self.replicas = kind, tuple(runs), width, replicas
        starts, total = [], 0
        for r in self.runs:
            starts.append(total)
            total += len(r)
        self._starts, self._per = tuple(starts), total

    def __len__(self) -> int:
        return self._per * self.replicas

    def _locate(self, index: int) -> tuple[int, int, int]:
        """(replica, run, offset in the run) of the ``index``-th slot."""
        replica, within = divmod(index, self._per)
        k = bisect_right(self._starts, within) - 1
        return replica, k, within - self._starts[k]

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1 and stop > start:
                replica, k, offset = self._locate(start)
                if offset + (stop - start) <= len(self.runs[k]):
                    first = replica * self.width + self.runs[k][offset]
                    return range(first, first + stop - start)
            return tuple(self[i] for i in range(start, stop, step))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"slot index {index} out of range for {len(self)} slots of a kind")
        replica, k, offset = self._locate(index)
        return replica * self.width + self.runs[k][offset]

    def __iter__(self) -> Iterator[int]:
        for replica in range(self.replicas):
            for r in self.runs:
                yield from range(replica * self.width + r.start, replica * self.width + r.stop)


def kind_slots(spec, slots: Sequence[int]) -> dict[str, Sequence[int]]:
    """Kind -> the slots of ``slots`` of that kind, in order. The whole rack (``range(len(spec))``) is read from
    its slot groups: a ``range`` per kind of one run, else :class:`SlotRuns`; one kind's :class:`SlotRuns`, or a
    ``range`` on a rack of one kind, is kept as it is; other slot lists are read slot by slot."""
    if isinstance(slots, range) and slots == range(len(spec)):
        local: dict[str, list[range]] = {}
        for g in spec.groups:
            local.setdefault(g.kind, []).append(range(g.first, g.stop))
        width, replicas = spec.slots_per_replica, spec.replicas
        return {kind: runs[0] if len(runs) == 1 and replicas == 1 else SlotRuns(kind, runs, width, replicas)
                for kind, runs in local.items()}
    if isinstance(slots, SlotRuns):
        return {slots.kind: slots}
    if isinstance(slots, range) and len(spec.counts()) == 1 and len(slots):
        return {spec.groups[0].kind: slots}
    kinds: dict[str, list[int]] = {}
    for s in slots:
        kinds.setdefault(spec.group_of(s).kind, []).append(s)
    return kinds


__all__ = ["RECOMPUTE", "SlotGrid", "SlotRuns", "Stage", "check_recompute", "kind_slots"]
