"""The session: which rack is current, and the records that still wait to be placed.

One owner for "the current rack and its timeline". A rack owns its slot table
(the C++ runtime's slots and memory accounts) and its :class:`~interop.timelines.Timeline`;
the session only says which rack is installed, keeps the stack of ``with rack:``
blocks, and hands every drained timeline record to the rack it happened on.

Installing a rack retires the current one without destroying it: its tensors
keep their bytes and stay counted on its own accounts; they cannot run on (nor
be counted on) the new rack's slots, but move to the CPU, print, save and free
as ever, and are usable again once their rack is current again.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Callable

from interop.timelines import DEFAULT_WINDOW, KernelLaunch, Timeline, TimelineRecord, TimelineWindow, price

_current = None
"""The installed rack (an interop.Rack), or None before the first install."""

_live: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
"""Every rack that has been installed and is still alive, by its slot table's generation."""

_launches: dict[int, KernelLaunch] = {}
"""Kernel launches whose record the runtime holds (its ``value`` is the key), until it is drained."""

_launch_ids = itertools.count(1)

_rack_change: list[Callable] = []
"""Who reacts when another rack becomes current, in the order they subscribed (:func:`on_rack_change`)."""

_window = TimelineWindow()
"""How much of its run every timeline keeps record by record (:func:`set_timeline_window`)."""

_placing = threading.RLock()
"""Held while a batch is taken from the runtime and placed: batches are placed whole and in order, whichever
thread drains (the recording thread of a long run, or one reading a clock)."""

DRAIN_BATCH = 256
"""Records the runtime holds in its log before the recording thread places them. A record waits there only when
its cost is not in the runtime's cost table yet (the first op of its key) or another waits ahead of it; a warm
loop leaves nothing there, and a cold one has its new keys priced in batches this size, so that the records
behind them return to being placed as recorded."""


def current():
    """The installed rack, or None."""
    return _current


def on_rack_change(callback: Callable) -> Callable:
    """Subscribe ``callback(rack, previous_slot)`` to every change of the current rack.

    It runs right after ``rack`` became current, with this thread's current slot index from before the
    change (a subscriber that keeps per-thread state, as the CUDA layer's device map does, needs it). The
    one place a module learns of a rack switch: the device-fidelity masks, a rack file's numerics modes and
    the CUDA layer subscribe when they are imported. Returns ``callback``, so it can decorate.
    """
    if callback not in _rack_change:
        _rack_change.append(callback)
    return callback


def install(rack) -> None:
    """Make ``rack`` current, then tell every :func:`on_rack_change` subscriber. What ran on the rack it
    replaces is placed on that rack's timeline first; its tensors stay as they are."""
    global _current
    from interop import _C

    if rack is _current:
        return
    drain()
    previous_slot = _C._current_slot()
    _C._install(rack._table)
    _live[rack._table.generation] = rack
    _current = rack
    if rack.timeline.window.records != _window.records:  # made before the window last changed
        rack.timeline.set_window(TimelineWindow(_window.records, rack.timeline.window.spill))
    if previous_slot >= len(rack.devices):
        _C._set_current_slot(0)  # a current slot the new rack lacks: its first, as CUDA starts on device 0
    for callback in list(_rack_change):
        callback(rack, previous_slot)


def rack_of(generation: int):
    """The rack whose slot table has this generation, if it was installed and is still alive; else None."""
    current = _current
    if current is not None and current._table.generation == generation:
        return current
    return _live.get(generation)


def timeline_of(rack) -> Timeline:
    """A new, empty timeline for ``rack`` (its records are drained by this session)."""
    return Timeline(rack, drain, _window if rack is _current else TimelineWindow(_window.records))


def set_timeline_window(records: int | None = DEFAULT_WINDOW, *, spill: str | os.PathLike | None = None) -> None:
    """Keep the newest ``records`` records of every rack's timeline in full (default 10,000, about 6 MiB;
    None: every record); older ones are added up as they leave (per slot, link and op) and dropped.

    The report, ``Event.elapsed_time``, the op ledger and the modelled clocks read those totals and are the
    same as with every record kept; ``interop.timeline()``, the Gantt chart and the trace's per-op events
    cover the window (the trace adds one summary event per slot and stream for what was folded). With
    ``spill`` (a file path), the current rack's folded records are also written there in full, as JSON
    lines (the file is rewritten when its timeline starts or is reset), and ``export_trace`` puts every
    record in the trace. Applies at once (a smaller window folds the oldest records now) and to every
    timeline made later."""
    global _window
    window = TimelineWindow(records, spill)
    drain()
    for rack in list(_live.values()):
        rack.timeline.set_window(window if rack is _current else TimelineWindow(records))
    _window = window


def timeline_window() -> TimelineWindow:
    """The window :func:`set_timeline_window` set (records kept in full, spill file)."""
    return _window


def record_kernel(slot: int, launch: KernelLaunch) -> None:
    """Queue one kernel launch (a compiled graph's kernel, a Triton launch) on ``slot``'s current stream,
    in order with the ops around it, for the rack it runs on.

    Called while the launch runs inside ``_C._call_on_slot``, which names its rack. Nothing is queued
    while recording is off (:func:`set_recording`).
    """
    from interop import _C

    # The description is stored before its record exists: a drain in between
    # (another thread) leaves it here for the drain that takes the record.
    ident = next(_launch_ids)
    _launches[ident] = launch
    try:
        queued = _C._record_kernel(slot, ident)
    except BaseException:
        del _launches[ident]
        raise
    if not queued:
        del _launches[ident]


def _price(kind: int, rack: int, slot: int, peer: int, name: str, value: int, dtype: str, flags: int, ins: tuple,
           outs: tuple) -> int:
    return price(kind, rack, slot, peer, name, value, dtype, flags, ins, outs, _launches)


def drain() -> None:
    """Place everything recorded so far, each record on its own rack's timeline: the runtime places what its
    cost table knows, and asks the rack's timeline to price the rest (:func:`interop.timelines.price`)."""
    from interop import _C

    with _placing:
        _C._timeline_place_pending(_price)
        if _current is not None:
            _current.timeline.fold_spilled()


def current_timeline() -> Timeline:
    """The current rack's timeline, with everything recorded so far placed."""
    if _current is None:
        raise RuntimeError("no rack is installed; call interop.set_rack(...) first")
    drain()
    return _current.timeline


def timeline() -> list[TimelineRecord]:
    """The records on the current rack's modelled timeline, oldest first: every record placed so far, up to
    the window (:func:`set_timeline_window`; by default the newest 10,000)."""
    return current_timeline().newest()


def reset_timeline() -> None:
    """Discard the current rack's timeline (pending records included) and restart its clocks at zero; its
    records and totals are freed.

    Other racks' timelines are kept: a rack made current again continues its own."""
    drain()
    if _current is not None:
        _current.timeline.close()
        _current.timeline = timeline_of(_current)


def set_recording(enabled: bool) -> None:
    """Turn op recording on or off (on by default). Off, ops still run; nothing is placed."""
    from interop import _C

    _C._set_timeline_enabled(bool(enabled))


def elapsed_hook(start_marker: int, end_marker: int) -> float:
    """Modelled milliseconds between two events (the C++ runtime calls this for Event.elapsed_time)."""
    return current_timeline().elapsed_ms(start_marker, end_marker)
