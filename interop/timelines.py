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

import gc
import os
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from interop.record_costs import RecordCoster
from interop.timeline_totals import TimelineTotals, involved_slots

PS = 10**12  # picoseconds per second

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


def _decode_shapes(arena, pos: int, count: int) -> tuple[tuple, int]:
    shapes = []
    for _ in range(count):
        ndim = arena[pos]
        shapes.append(tuple(arena[pos + 1: pos + 1 + ndim]))
        pos += 1 + ndim
    return tuple(shapes), pos


class Timeline:
    """The placed records and clocks of one rack (``rack.timeline``); it lives as
    long as its rack, and continues when the rack is made current again."""

    def __init__(self, rack, drain: Callable[[], None], window: TimelineWindow = TimelineWindow()):
        # The rack owns its timeline; references back are weak, so that a rack
        # nobody holds is freed at once, and with it its slot table.
        self._rack = weakref.ref(rack)
        self.coster = RecordCoster(weakref.proxy(rack))
        self.records: list[TimelineRecord] = []
        """The newest records, in placement order: the window's, and up to :func:`fold_slack` more that leave
        together (one slice deletion per batch rather than one per record)."""
        self.folded = TimelineTotals()
        """Every record that left the window, added up (:mod:`interop.timeline_totals`)."""
        self.placed = 0
        """Records placed since the timeline began (the window's and the folded ones)."""
        self.busy_by_slot: dict[int, int] = {}
        """Per slot, modelled picoseconds of every record it took part in so far."""
        self.window = TimelineWindow(records=None)
        self._spill = None  # the open spill file, while records leave the window into it
        self.set_window(window)
        self.clocks: dict[tuple[int, int], int] = {}
        self.markers: dict[int, tuple[int, int, int]] = {}
        self.host_floor_ps = 0
        """Nothing issued after a synchronous host copy starts before it ends (the host waited for it)."""
        self.host_floors: dict[int, int] | None = None
        """Per slot, while each slot has a host of its own (:meth:`hosts_per_slot`); None: one host for all."""
        self.channels: dict[tuple[int, int], int] = {}
        """Per (source, destination) slot pair: when the last transfer placed across processes on it ended."""
        self._names: dict[int, str] = {}
        self._drain = drain  # the session's: places what every rack recorded so far

    @property
    def rack(self):
        """The rack this timeline belongs to."""
        rack = self._rack()
        if rack is None:
            raise RuntimeError("this timeline's rack no longer exists")
        return rack

    # -- the window ---------------------------------------------------------------

    def _keep(self, record: TimelineRecord) -> None:
        self.records.append(record)
        self.placed += 1
        busy = self.busy_by_slot
        for s in involved_slots(record):
            busy[s] = busy.get(s, 0) + record.duration_ps
        limit = self.window.records
        if limit is not None and len(self.records) > limit + fold_slack(limit):
            self._fold(len(self.records) - limit)

    def _fold(self, n: int) -> None:
        """Move the ``n`` oldest records out of the window: into the totals (and the spill file)."""
        records, folded, spill = self.records, self.folded, self._spill
        for r in records[:n]:
            folded.add(r)
            if spill is not None:
                spill.write(r)
        del records[:n]

    def newest(self) -> list[TimelineRecord]:
        """The records in the window: the newest ``window.records`` (every one with no window)."""
        limit = self.window.records
        if limit is None or len(self.records) <= limit:
            return list(self.records)
        return self.records[len(self.records) - limit:]

    def set_window(self, window: TimelineWindow) -> None:
        """Keep ``window.records`` records from now on (fewer: the oldest are folded at once); with
        ``window.spill``, (re)start that spill file."""
        if window.spill != self.window.spill:
            self.close()
            if window.spill is not None:
                from interop.timeline_spill import SpillWriter

                self._spill = SpillWriter(window.spill)  # a path that cannot be written fails here
        self.window = window
        if window.records is not None and len(self.records) > window.records:
            self._fold(len(self.records) - window.records)

    def close(self) -> None:
        """Flush and close the spill file (the timeline is being discarded)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def totals(self) -> TimelineTotals:
        """Everything placed so far, added up: the folded records, then the window's, in placement order."""
        self.ingest()
        return self.folded.plus(self.records)

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
        if newer >= len(self.records):
            return list(self.records)
        return self.records[len(self.records) - newer:]

    # -- ingest -----------------------------------------------------------------

    def _name(self, ident: int) -> str:
        name = self._names.get(ident)
        if name is None:
            from interop import _C

            name = self._names[ident] = _C._op_name(ident)
        return name

    def ingest(self) -> None:
        """Cost and place everything recorded so far (on this rack and every other live one)."""
        self._drain()

    def place(self, cols: dict, arena, indices, launches: dict[int, KernelLaunch] | None = None) -> None:
        """Cost and place the records ``indices`` of a drained batch (``_C._drain_timeline()``);
        ``launches`` maps the id a kernel record carries to its :class:`KernelLaunch`."""
        # Placing allocates a few objects per record; with a training graph
        # alive, letting the cyclic collector scan it every few hundred records
        # would cost more than the placing itself.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._place(cols, arena, indices, launches)
        finally:
            if collecting:
                gc.enable()

    def _place(self, cols, arena, indices, launches) -> None:
        from interop import _C  # the runtime numbers its record kinds and flags (csrc/model/HybridTimeline.h)

        OP, COPY, MARKER, WAIT, KERNEL, RELEASE = (_C.RECORD_KINDS[k] for k in ("op", "copy", "marker", "wait",
                                                                                  "kernel", "release"))
        CAUSAL, MEASURED, ASYNC, SPARSE = (_C.RECORD_FLAGS[f] for f in ("causal", "measured", "async", "sparse"))
        kinds = cols["kind"]
        for i in indices:
            kind = kinds[i]
            slot, stream = cols["slot"][i], cols["stream"][i]
            if kind == OP:
                pos = cols["shapes_begin"][i]
                ins, pos = _decode_shapes(arena, pos, cols["n_inputs"][i])
                outs, _ = _decode_shapes(arena, pos, cols["n_outputs"][i])
                flags = cols["flags"][i]
                self._place_op(slot, stream, self._name(cols["name"][i]), ins, outs, cols["dtype"][i],
                               bool(flags & CAUSAL), cols["measured_s"][i] if flags & MEASURED else None,
                               cols["value"][i], sparse=bool(flags & SPARSE))
            elif kind == COPY:
                self._place_copy(slot, stream, cols["peer"][i], cols["peer_stream"][i], cols["value"][i],
                                 cols["dtype"][i], bool(cols["flags"][i] & ASYNC))
            elif kind == KERNEL:
                self._place_kernel(slot, stream, launches[cols["value"][i]])
            elif kind == MARKER:
                self.markers[cols["value"][i]] = (slot, stream, self.clocks.get((slot, stream), 0))
            elif kind == WAIT:
                marker = self.markers.get(cols["value"][i])
                if marker is not None:
                    key = (slot, stream)
                    self.clocks[key] = max(self.clocks.get(key, 0), marker[2])
            elif kind == RELEASE:
                self.markers.pop(cols["value"][i], None)

    @contextmanager
    def hosts_per_slot(self) -> Iterator[None]:
        """Within: every slot has a host of its own, as a plan's stages each have their process when deployed,
        so a synchronous copy to the host holds back later work on its own slot only. The one process that
        emulates them waited for every such copy: afterwards, nothing starts before the last of them ends."""
        self.ingest()  # records issued before are placed under one host
        outer, self.host_floors = self.host_floors, {}
        try:
            yield
        finally:
            self.ingest()
            floors, self.host_floors = self.host_floors, outer
            if outer is None:
                self.host_floor_ps = max([self.host_floor_ps, *floors.values()])
            else:
                for s, t in floors.items():
                    outer[s] = max(outer.get(s, 0), t)

    def _advance(self, keys: list[tuple[int, int]], duration_ps: int, hosts: list[int] | None = None) -> int:
        """Start the work on ``keys`` (slot, stream) when all are free and the hosts that issue it (``hosts``:
        slots whose host floors apply, by default every slot of ``keys``) are past their floors."""
        floor = self.host_floor_ps
        if self.host_floors is not None:
            floor = max(floor, max(self.host_floors.get(s, 0) for s in (hosts or [s for s, _ in keys])))
        start = max(max(self.clocks.get(k, 0) for k in keys), floor)
        for k in keys:
            self.clocks[k] = start + duration_ps
        return start

    def _place_op(self, slot, stream, name, ins, outs, dtype, causal, measured_s=None, list_length=0,
                  sparse=False) -> None:
        est = (self.coster.sparse_op(slot, name, ins, outs, dtype) if sparse
               else self.coster.op(slot, name, ins, outs, dtype, causal, list_length))
        # A real GPU's slot follows measured time; an emulated one, modelled time.
        duration = round((est.seconds if measured_s is None else measured_s) * PS)
        start = self._advance([(slot, stream)], duration)
        sources = est.sources if measured_s is None else ("measured: CUDA events around the op",) + est.sources
        self._keep(TimelineRecord(
            slot, stream, "op", name, ins, outs, est.dtype, start, duration, est.flops, est.bytes, est.bound,
            est.estimated_by_default, est.projected, sources, measured_s=measured_s))

    def _place_kernel(self, slot: int, stream: int, launch: KernelLaunch) -> None:
        if launch.aten:
            est = self.coster.op(slot, launch.aten, launch.in_shapes, launch.out_shapes, launch.dtype, launch.causal,
                                 args=launch.args)
        else:
            est = self.coster.kernel(slot, launch)
        duration = round(est.seconds * PS)
        start = self._advance([(slot, stream)], duration)
        sources = est.sources + ((launch.method,) if launch.method else ())
        self._keep(TimelineRecord(
            slot, stream, "kernel", launch.name, launch.in_shapes, launch.out_shapes, est.dtype, start, duration,
            est.flops, est.bytes, est.bound, est.estimated_by_default, est.projected, sources, grid=launch.grid))

    def _place_copy(self, src, src_stream, dst, dst_stream, nbytes, dtype, asynchronous=False) -> None:
        cost = self.coster.copy(src, dst, nbytes)
        host_end = src < 0 or dst < 0
        duration = round(cost.seconds * PS)
        keys = [(s, st) for s, st in ((src, src_stream), (dst, dst_stream)) if s >= 0]
        # Between slots with hosts of their own, the receiver's host is the one that waits (the sender posted
        # its send when its data was ready, which the send stream already waits for).
        hosts = [dst] if self.host_floors is not None and not host_end and src != dst else None
        start = self._advance(list(dict.fromkeys(keys)), duration, hosts)
        projected = any(self.rack.devices[s].spec.projected for s, _ in keys)
        self._keep(TimelineRecord(
            src, src_stream if src >= 0 else dst_stream, "copy", "copy", ((nbytes,),), ((nbytes,),), dtype, start,
            duration, 0.0, float(nbytes), "link" if cost.link else "memory", False, projected, cost.sources,
            peer=dst, link=cost.link, asynchronous=asynchronous if host_end else None))
        if host_end and not asynchronous:
            # A synchronous copy returns to the host only when done: later work starts after it.
            if self.host_floors is None:
                self.host_floor_ps = max(self.host_floor_ps, start + duration)
            else:
                for s, _ in keys:
                    self.host_floors[s] = max(self.host_floors.get(s, 0), start + duration)

    def place_collective(self, name: str, slots: list[int], seconds: float, nbytes: float, algorithm: str,
                         sources, link: str | None = None, *, ready_ps: int = 0) -> TimelineRecord:
        """Put a collective on every participant's current stream, starting when all are free.

        ``ready_ps``: the latest clock among participants this process does not run (other ranks of a
        torch.distributed group, exchanged with the call): the collective starts no earlier."""
        from interop import _C

        self.ingest()  # order: ops recorded before the collective come first
        keys = [(s, _C._current_stream_id(s)) for s in slots]
        duration = round(seconds * PS)
        start = max(max(self.clocks.get(k, 0) for k in keys), int(ready_ps))
        for k in keys:
            self.clocks[k] = start + duration
        projected = any(self.rack.devices[s].spec.projected for s in slots)
        record = TimelineRecord(
            slots[0], keys[0][1], "collective", f"{name} ({algorithm})", (), (), "", start, duration, 0.0,
            float(nbytes), "link", False, projected, tuple(sources), link=link, participants=tuple(slots))
        self._keep(record)
        return record

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
            key = (wait, stream)
            self.clocks[key] = max(self.clocks.get(key, 0), start + duration)
        projected = any(self.rack.devices[s].spec.projected for s in (src, dst))
        record = TimelineRecord(
            home, stream, "collective", f"{name} ({algorithm})", (), (), "", start, duration, 0.0, float(nbytes),
            "link", False, projected, tuple(sources), link=link, participants=(src, dst))
        self._keep(record)
        return record

    def stream_clock(self, slot: int) -> int:
        """The modelled clock of ``slot``'s current stream (everything recorded so far placed)."""
        from interop import _C

        self.ingest()
        return self.clocks.get((slot, _C._current_stream_id(slot)), 0)

    def advance_to(self, slot: int, ps: int) -> None:
        """Make every stream of ``slot`` this process knows wait until ``ps`` (a step boundary shared with
        other processes)."""
        from interop import _C

        self.ingest()
        keys = [k for k in self.clocks if k[0] == slot] or [(slot, _C._current_stream_id(slot))]
        for k in keys:
            self.clocks[k] = max(self.clocks.get(k, 0), int(ps))

    # -- queries ----------------------------------------------------------------

    def elapsed_ms(self, start_marker: int, end_marker: int) -> float:
        self.ingest()
        try:
            a, b = self.markers[start_marker], self.markers[end_marker]
        except KeyError:
            raise RuntimeError("elapsed_time: an event was recorded before the current timeline began "
                               "(reset_timeline since) or on another rack") from None
        return (b[2] - a[2]) / 1e9

    def now_ps(self, slot: int | None = None) -> int:
        """The latest modelled clock of a slot (all streams), or of the whole rack."""
        self.ingest()
        values = [t for (s, _), t in self.clocks.items() if slot is None or s == slot]
        return max(values, default=0)
