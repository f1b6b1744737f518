"""The modelled timeline of one rack: every op, kernel launch, copy, wait and
collective on it, placed on per-slot, per-stream modelled clocks.

The C++ dispatch only appends compact records, each naming the rack it ran on;
the session (:mod:`interop.session`) drains them in batches when a clock is
read (``timeline()``, ``report()``, an event's ``elapsed_time``,
``torch.hybrid.synchronize``) and hands each rack's records to that rack's
:class:`Timeline`, which costs and places them. Clocks count integer
picoseconds so that an interval is exactly the sum of the durations in it.
"""

from __future__ import annotations

import functools
import os
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from interop.record_costs import PS, RecordCoster, collective_cost, templates
from interop.timeline_totals import TimelineTotals

DEFAULT_WINDOW = 10_000
"""Records a timeline keeps in full by default (about 6 MiB): the newest ones; the older ones are added
to its totals as they leave the window (:class:`TimelineWindow`)."""


def fold_slack(limit: int) -> int:
    """Records a timeline may hold past its window before the oldest are folded, together."""
    return max(64, limit // 8)


@dataclass(frozen=True, slots=True)
class TimelineWindow:
    """How much of a long run a timeline keeps record by record (:func:`interop.set_timeline_window`).

    The report, ``Event.elapsed_time``, the op ledger and the trace's summary read the totals, which take
    every record however old, so they are the same whatever the window; ``interop.timeline()``, the
    trace's per-op events and the Gantt chart show the records in the window (and, with ``spill``, the
    trace every record)."""

    records: int | None = DEFAULT_WINDOW
    """Records kept in full, the newest (None: every record, memory growing with the run)."""
    spill: str | None = None
    """A file the current rack's older records are also written to as they leave the window (JSON
    lines, one record each; truncated when the timeline starts); ``interop.export_trace`` reads them
    back, so the trace holds every record."""

    def __post_init__(self):
        records = self.records
        if records is not None and (isinstance(records, bool) or not isinstance(records, int) or records < 0):
            raise ValueError(f"records: expected a number of records >= 0, or None to keep every record; "
                             f"got {records!r}")
        if self.spill is not None:
            if not isinstance(self.spill, (str, os.PathLike)):
                raise TypeError(f"spill: expected a file path or None, got {type(self.spill).__name__}")
            object.__setattr__(self, "spill", os.fspath(self.spill))



@dataclass(frozen=True, slots=True)
class TimelineRecord:
    """One placed item. Times are modelled; ``source`` says what they came from."""

    slot: int
    """Executing slot (for a copy: the source; -1 for the host)."""
    stream: int
    kind: str
    """``op``, ``copy``, ``collective`` or ``kernel`` (a compiled graph's kernel or a Triton launch)."""
    op: str
    """ATen op name (``aten::mm``), ``copy``, the collective's name, or the kernel's
    (``triton:add_kernel``, ``inductor:cpp_fused_add_relu_0``)."""
    in_shapes: tuple
    out_shapes: tuple
    dtype: str
    start_ps: int
    duration_ps: int
    flops: float
    bytes: float
    bound: str
    """``compute``, ``memory``, ``overhead``, ``link`` or ``none``."""
    estimated_by_default: bool
    """True when the cost model did not know the op and fell back to a bytes-only estimate."""
    projected: bool
    """True when a projected figure (Trn4) went into the time."""
    sources: tuple
    """The catalogue figures and calibrations the duration came from (devices.Figure), or strings."""
    peer: int | None = None
    """The other end of a copy (-1: host), None otherwise."""
    link: str | None = None
    """The link track a copy or collective occupied."""
    participants: tuple = ()
    """Every slot a collective ran on."""
    measured_s: float | None = None
    """On a cuda-backed slot: the op's CUDA-event time (measured); the placed duration is this one."""
    grid: tuple = ()
    """A Triton launch's grid (programs per axis); () for everything else."""
    asynchronous: bool | None = None
    """A copy with a host end: True for an asynchronous DMA (non_blocking from/to pinned memory), False for
    a synchronous one (pageable memory, or blocking), which the host waits for; None otherwise."""

    @property
    def source(self) -> str:
        """Where the duration came from, as one line."""
        return "; ".join(getattr(f, "source", str(f)) for f in self.sources)

    @property
    def start(self) -> float:
        """Modelled start, seconds."""
        return self.start_ps / PS

    @property
    def duration(self) -> float:
        """Modelled duration, seconds."""
        return self.duration_ps / PS

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps

    def involves(self, slot: int) -> bool:
        return self.slot == slot or self.peer == slot or slot in self.participants


@dataclass(frozen=True, slots=True)
class KernelLaunch:
    """What one kernel launch did, as its launcher counted it: the timeline prices it
    (:meth:`interop.record_costs.RecordCoster.kernel`) when the records are placed."""

    name: str
    """``triton:<kernel>`` or ``inductor:<kernel>``."""
    dtype: str
    """The dtype its data is in (the chip's peak is read for it)."""
    bytes: float
    """Bytes its loads and stores moved."""
    flops: float = 0.0
    """Vector (non-matmul) FLOPs."""
    matmul_flops: float = 0.0
    """FLOPs of its matrix products (``tl.dot``, a GEMM template)."""
    matmul_outputs: float = 0.0
    """Output elements of those matrix products (sets the equivalent GEMM's size)."""
    grid: tuple = ()
    """Programs per grid axis (Triton)."""
    method: str = ""
    """How bytes and FLOPs were obtained, as one line (kept in the record's sources)."""
    aten: str = ""
    """Set when a compiled graph called an ATen kernel (``aten::mm``): priced as that op, from its shapes."""
    in_shapes: tuple = ()
    out_shapes: tuple = ()
    causal: bool = False
    args: tuple = ()
    """With ``aten``: more of the op's non-tensor arguments, as (name, value) pairs (FlexAttention's
    ``block_fraction``)."""


_by_rack: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
"""Each rack's timeline, by the rack's generation: the runtime's records name the rack they ran on."""

MEASURED_SOURCE = "measured: CUDA events around the op"


def price(kind: int, rack: int, slot: int, peer: int, name: str, value: int, dtype: str, flags: int, ins: tuple,
          outs: tuple, launches: dict) -> int:
    """The cost-table id of a drained record the runtime's table holds no cost for (its resolver)."""
    return _by_rack[rack].coster.price(kind, slot, peer, name, value, dtype, flags, ins, outs, launches)


def _record(row: tuple) -> TimelineRecord:
    """A TimelineRecord of one placed record as the runtime holds it, and the cost-table entry it names."""
    kind, slot, stream, peer, name, ins, outs, dtype, start, duration, cost, measured, flags = row
    template = templates[cost]
    if kind == "op":
        est = template[1]
        sources = est.sources if measured is None else (MEASURED_SOURCE,) + est.sources
        return TimelineRecord(slot, stream, "op", name, ins, outs, est.dtype, start, duration, est.flops, est.bytes,
                              est.bound, est.estimated_by_default, est.projected, sources, measured_s=measured)
    if kind == "copy":
        _, copy_cost, projected = template
        nbytes = ins[0][0]
        host_end = slot < 0 or peer < 0
        asynchronous = bool(flags & _record_flag("async")) if host_end else None
        return TimelineRecord(slot, stream, "copy", "copy", ((nbytes,),), ((nbytes,),), dtype, start, duration, 0.0,
                              float(nbytes), "link" if copy_cost.link else "memory", False, projected,
                              copy_cost.sources, peer=peer, link=copy_cost.link, asynchronous=asynchronous)
    if kind == "kernel":
        _, launch, est = template
        sources = est.sources + ((launch.method,) if launch.method else ())
        return TimelineRecord(slot, stream, "kernel", launch.name, launch.in_shapes, launch.out_shapes, est.dtype,
                              start, duration, est.flops, est.bytes, est.bound, est.estimated_by_default,
                              est.projected, sources, grid=launch.grid)
    _, name, nbytes, projected, sources, link, participants = template
    return TimelineRecord(slot, stream, "collective", name, (), (), "", start, duration, 0.0, nbytes, "link", False,
                          projected, sources, link=link, participants=participants)


class Timeline:
    """The placed records and clocks of one rack (``rack.timeline``); it lives as
    long as its rack, and continues when the rack is made current again.

    The runtime places the records (``_C._TimelinePlacer``: clocks, markers, host floors, the window and its
    totals); this object prices what the runtime's cost table does not know yet, and makes
    :class:`TimelineRecord` objects only when someone reads them."""

    def __init__(self, rack, drain: Callable[[], None], window: TimelineWindow = TimelineWindow()):
        from interop import _C

        # The rack owns its timeline; references back are weak, so that a rack
        # nobody holds is freed at once, and with it its slot table.
        self._rack = weakref.ref(rack)
        self.coster = RecordCoster(weakref.proxy(rack))
        generation = rack._table.generation
        self._placer = _C._TimelinePlacer(generation, [_kind_id(d.kind) for d in rack.devices],
                                          [bool(d.spec.projected) for d in rack.devices])
        _by_rack[generation] = self
        self._held: list[TimelineRecord] = []  # the window's records made so far, oldest first
        self._held_first = 0  # the placed index of _held[0]
        self.window = TimelineWindow(records=None)
        self._spill = None  # the open spill file, while records leave the window into it
        self.set_window(window)
        self.channels: dict[tuple[int, int], int] = {}
        """Per (source, destination) slot pair: when the last transfer placed across processes on it ended."""
        self._drain = drain  # the session's: places what every rack recorded so far

    @property
    def rack(self):
        """The rack this timeline belongs to."""
        rack = self._rack()
        if rack is None:
            raise RuntimeError("this timeline's rack no longer exists")
        return rack

    # -- the window ---------------------------------------------------------------

    @property
    def records(self) -> list[TimelineRecord]:
        """The records held, in placement order: the window's, and up to :func:`fold_slack` more that leave
        together (placed so far; :meth:`ingest` places what is pending)."""
        first = self._placer.first
        if first > self._held_first:
            del self._held[:first - self._held_first]
            self._held_first = first
        self._held.extend(map(_record, self._placer.records(self._held_first + len(self._held))))
        return self._held

    @property
    def placed(self) -> int:
        """Records placed since the timeline began (the window's and the folded ones)."""
        return self._placer.placed

    @property
    def folded(self) -> TimelineTotals:
        """Every record that left the window, added up (:mod:`interop.timeline_totals`)."""
        return TimelineTotals.from_runtime(self._placer.totals(False))

    @property
    def busy_by_slot(self) -> dict[int, int]:
        """Per slot, modelled picoseconds of every record it took part in so far."""
        return self._placer.busy_by_slot()

    @property
    def clocks(self) -> dict[tuple[int, int], int]:
        """Per (slot, stream): its modelled clock, picoseconds (a copy)."""
        return self._placer.clocks()

    @property
    def markers(self) -> dict[int, tuple[int, int, int]]:
        """Per live event marker: (slot, stream, clock when recorded) (a copy)."""
        return self._placer.markers()

    @property
    def host_floor_ps(self) -> int:
        """Nothing issued after a synchronous host copy starts before it ends (the host waited for it)."""
        return self._placer.host_floor_ps

    def _fold(self, n: int) -> None:
        """Move the ``n`` oldest records out of the window: into the totals (and the spill file)."""
        if self._spill is not None:
            for r in self.records[:n]:
                self._spill.write(r)
        self._placer.fold(n)

    def fold_spilled(self) -> None:
        """With a spill file, fold what passed the window since (the runtime leaves that to Python then)."""
        limit = self.window.records
        if self._spill is not None and limit is not None:
            held = self._placer.placed - self._placer.first
            if held > limit + fold_slack(limit):
                self._fold(held - limit)

    def newest(self) -> list[TimelineRecord]:
        """The records in the window: the newest ``window.records`` (every one with no window)."""
        records = self.records
        limit = self.window.records
        if limit is None or len(records) <= limit:
            return list(records)
        return records[len(records) - limit:]

    def set_window(self, window: TimelineWindow) -> None:
        """Keep ``window.records`` records from now on (fewer: the oldest are folded at once); with
        ``window.spill``, (re)start that spill file."""
        if window.spill != self.window.spill:
            self.close()
            if window.spill is not None:
                from interop.timeline_spill import SpillWriter

                self._spill = SpillWriter(window.spill)  # a path that cannot be written fails here
        self.window = window
        # A spill file wants each record written as it leaves: then every record goes through Python.
        spilling = self._spill is not None
        if spilling and window.records is not None and len(self.records) > window.records:
            self._fold(len(self.records) - window.records)
        self._placer.set_window(window.records, not spilling, not spilling)

    def close(self) -> None:
        """Flush and close the spill file (the timeline is being discarded)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def totals(self) -> TimelineTotals:
        """Everything placed so far, added up: the folded records, then the window's, in placement order."""
        self.ingest()
        return TimelineTotals.from_runtime(self._placer.totals(True))

    def spilled(self) -> Iterator[TimelineRecord]:
        """The records written to the spill file, oldest first (none without one)."""
        if self._spill is None:
            return iter(())
        from interop.timeline_spill import read_spill

        self._spill.flush()
        return (TimelineRecord(**fields) for fields in read_spill(self._spill.path))

    def since(self, placed: int) -> list[TimelineRecord]:
        """The records placed after the first ``placed`` ones that are still in the window."""
        newer = self.placed - placed
        if newer <= 0:
            return []
        records = self.records
        if newer >= len(records):
            return list(records)
        return records[len(records) - newer:]

    # -- ingest -----------------------------------------------------------------

    def ingest(self) -> None:
        """Cost and place everything recorded so far (on this rack and every other live one)."""
        self._drain()

    @contextmanager
    def hosts_per_slot(self) -> Iterator[None]:
        """Within: every slot has a host of its own, as a plan's stages each have their process when deployed,
        so a synchronous copy to the host holds back later work on its own slot only. The one process that
        emulates them waited for every such copy: afterwards, nothing starts before the last of them ends."""
        self.ingest()  # records issued before are placed under one host
        self._placer.push_hosts()
        try:
            yield
        finally:
            self.ingest()
            self._placer.pop_hosts()

    def place_collective(self, name: str, slots: list[int], seconds: float, nbytes: float, algorithm: str,
                         sources, link: str | None = None, *, ready_ps: int = 0) -> TimelineRecord:
        """Put a collective on every participant's current stream, starting when all are free.

        ``ready_ps``: the latest clock among participants this process does not run (other ranks of a
        torch.distributed group, exchanged with the call): the collective starts no earlier."""
        from interop import _C

        self.ingest()  # order: ops recorded before the collective come first
        streams = [_C._current_stream_id(s) for s in slots]
        projected = any(self.rack.devices[s].spec.projected for s in slots)
        cost = collective_cost(f"{name} ({algorithm})", seconds, nbytes, projected, sources, link, tuple(slots))
        duration = round(seconds * PS)
        start = self._placer.place_collective(list(slots), streams, duration, int(ready_ps), cost)
        return _record(("collective", slots[0], streams[0], None, "", (), (), "", start, duration, cost, None, 0))

    def place_transfer(self, name: str, src: int, dst: int, start_ps: int, seconds: float, nbytes: float,
                       algorithm: str, sources, link: str | None = None, *,
                       wait: int | None = None) -> TimelineRecord:
        """Put a point-to-point transfer between two processes' slots at the start both ends agreed on
        (``start_ps``: the sender's data ready; the link's previous transfer must have ended). It occupies no stream of this process (it
        runs on the ends' communication channels, as an NCCL send/recv does); with ``wait`` (a slot), that
        slot's current stream waits for its arrival."""
        from interop import _C

        self.ingest()
        duration = round(seconds * PS)
        # The link from src to dst carries one transfer at a time; both ends see the same sequence on it.
        start = max(int(start_ps), self.channels.get((src, dst), 0))
        self.channels[(src, dst)] = start + duration
        home = wait if wait is not None else src
        stream = _C._current_stream_id(home)
        if wait is not None:
            self._placer.raise_clock(wait, stream, start + duration)
        projected = any(self.rack.devices[s].spec.projected for s in (src, dst))
        cost = collective_cost(f"{name} ({algorithm})", seconds, nbytes, projected, sources, link, (src, dst))
        self._placer.append_at(home, stream, start, duration, cost)
        return _record(("collective", home, stream, None, "", (), (), "", start, duration, cost, None, 0))

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Within: no record leaves the window, so that what was placed inside can be read back or
        :meth:`replay`-ed; afterwards the window folds to its size (the totals and a spill file see the same
        records in the same order as without)."""
        window = self.window
        if window.records is None:
            yield
            return
        self.set_window(TimelineWindow(records=None, spill=window.spill))
        try:
            yield
        finally:
            self.ingest()
            self.set_window(window)

    def replay(self, begin: int, end: int, from_slots: list[int], to_slots: list[int]) -> int:
        """Place the ops, kernels and copies within a slot of records ``[begin, end)`` (placed indices) again,
        those of slot ``from_slots[i]`` on ``to_slots[i]``'s current stream, at the same costs: the work a
        data-parallel replica repeats bit for bit while the emulation runs it once
        (:mod:`interop.live.shared_replicas`). The records must still be in the window (:meth:`holding`); pairs
        of slots must be of one chip kind. Returns how many records it placed."""
        from interop import _C

        self.ingest()
        return self._placer.replay(int(begin), int(end), list(from_slots), list(to_slots),
                                   [_C._current_stream_id(s) for s in to_slots])

    def stream_clock(self, slot: int) -> int:
        """The modelled clock of ``slot``'s current stream (everything recorded so far placed)."""
        from interop import _C

        self.ingest()
        return self._placer.clock(slot, _C._current_stream_id(slot))

    def advance_to(self, slot: int, ps: int) -> None:
        """Make every stream of ``slot`` this process knows wait until ``ps`` (a step boundary shared with
        other processes)."""
        from interop import _C

        self.ingest()
        keys = [k for k in self._placer.clocks() if k[0] == slot] or [(slot, _C._current_stream_id(slot))]
        for s, stream in keys:
            self._placer.raise_clock(s, stream, int(ps))

    # -- queries ----------------------------------------------------------------

    def elapsed_ms(self, start_marker: int, end_marker: int) -> float:
        self.ingest()
        markers = self._placer.markers()
        try:
            a, b = markers[start_marker], markers[end_marker]
        except KeyError:
            raise RuntimeError("elapsed_time: an event was recorded before the current timeline began "
                               "(reset_timeline since) or on another rack") from None
        return (b[2] - a[2]) / 1e9

    def now_ps(self, slot: int | None = None) -> int:
        """The latest modelled clock of a slot (all streams), or of the whole rack."""
        self.ingest()
        return self._placer.now_ps(-1 if slot is None else slot)


_kind_ids: dict[str, int] = {}


def _kind_id(kind: str) -> int:
    """The number a chip kind has in the runtime cost table's keys."""
    return _kind_ids.setdefault(kind, len(_kind_ids))


@functools.cache
def _record_flag(name: str) -> int:
    from interop import _C  # the runtime numbers its record flags (csrc/model/HybridTimeline.h)

    return _C.RECORD_FLAGS[name]
