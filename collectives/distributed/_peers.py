"""Which peer a failed collective was waiting for: heartbeats on the group's store, and the diagnosis.

Gloo reports a frozen peer as a timeout and a dead one as a closed
connection, naming neither.  Every rank of a hybrid group therefore keeps a
heartbeat on the group's rendezvous store from a background thread: a beat
counter and how many collectives (and sends/receives) it has issued, written
every :attr:`PeerMonitor.interval` seconds (one small store write per interval
whatever the traffic, as NCCL's heartbeat monitor does, never one per
collective).  When a collective fails, :meth:`PeerMonitor.diagnose` reads the
peers' heartbeats twice, a few intervals apart: a peer whose beat did not move
has stopped responding (frozen, or gone); a peer that beats but has issued
fewer operations than this one has not reached this collective.  On the same
host the peer's process state is read too (exited, or stopped).  The result
names each such peer by rank and slot.

Clock-independent: beats are counted, never compared as timestamps.

The heartbeat threads are stopped and joined when the interpreter exits (``atexit``, before CPython ends its
daemon threads): a daemon thread ended while inside the store's C++ call unwinds through a ``noexcept`` frame,
and the process aborts with "terminate called without an active exception" after the script has finished.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
import weakref
from datetime import timedelta
from typing import Callable

_KEY = "hybrid-beat/{}"
MIN_INTERVAL_S = 0.05
"""Shortest heartbeat interval (for sub-second test timeouts)."""
MAX_INTERVAL_S = 2.0
"""Longest heartbeat interval (the default timeout's): a diagnosis takes about 2.5 of them."""


def interval_for(timeout: timedelta) -> float:
    """Seconds between heartbeats for a group timeout: a tenth of it, within [0.05, 5] s, so that a diagnosis
    (a few intervals) stays well inside the timeout."""
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, timeout.total_seconds() / 10))


class PeerMonitor:
    """Heartbeats of one rank of a group, and the names of the peers a failure waited for."""

    def __init__(self, store, rank: int, size: int, slots: tuple[int, ...], hosts: list[str], pids: list[int],
                 timeout: timedelta | Callable[[], timedelta]):
        self.rank = rank
        self.size = size
        self.slots = slots
        self.hosts = hosts
        self.pids = pids
        self._timeout = timeout if callable(timeout) else (lambda: timeout)
        """The group's timeout, read when it is needed (it can change: torch's ``_set_pg_timeout``)."""
        self.issued = 0
        """Operations this rank has issued (collectives, sends, receives): the group's sequence number."""
        self._store = store
        self._beat = 0
        self._stop = threading.Event()
        self._write()
        # The thread holds the monitor weakly, so that a dropped group stops beating.
        thread = threading.Thread(target=_beat, args=(weakref.ref(self), self._stop),
                                  name=f"hybrid-heartbeat-{rank}", daemon=True)
        thread.start()
        _BEATING[:] = [(stop, t) for stop, t in _BEATING if t.is_alive()]
        _BEATING.append((self._stop, thread))

    @property
    def interval(self) -> float:
        """Seconds between heartbeats, for the group's current timeout (:func:`interval_for`)."""
        return interval_for(self._timeout())

    def _write(self) -> None:
        self._beat += 1
        try:
            self._store.set(_KEY.format(self.rank), f"{self._beat}|{self.issued}")
        except Exception:  # a store that is gone (shutdown) or unreachable: the next beat tries again
            pass

    def stop(self) -> None:
        """Stop beating (group shutdown or abort)."""
        self._stop.set()

    def who(self, rank: int) -> str:
        """``rank 1 (hybrid:1)`` (``rank 1`` where the group owns no slots)."""
        if rank < len(self.slots) and self.slots[rank] >= 0:
            return f"rank {rank} (hybrid:{self.slots[rank]})"
        return f"rank {rank}"

    def _read(self) -> dict[int, tuple[int, int]]:
        keys = [_KEY.format(r) for r in range(self.size)]
        present = [r for r, k in enumerate(keys) if r != self.rank and self._store.check([k])]
        out = {}
        for r in present:
            beat, issued = self._store.get(keys[r]).decode().split("|")
            out[r] = (int(beat), int(issued))
        return out

    def diagnose(self, issued: int | None = None, budget_s: float | None = None) -> str:
        """A sentence naming the peers that stopped responding or have not reached operation ``issued``.

        Takes about 2.5 heartbeat intervals (bounded by ``budget_s``, the
        failed call's own timeout where it has one; a budget shorter than a
        heartbeat interval leaves liveness unchecked); if the store itself does
        not answer in that time, says so (its host may be the peer that stopped).
        """
        issued = self.issued if issued is None else issued
        wait = 2.5 * self.interval if budget_s is None else min(2.5 * self.interval, budget_s)
        liveness = wait >= 1.2 * self.interval
        if not liveness:
            wait = 0.0
        result: list = []

        def probe():
            first = self._read()
            time.sleep(wait)
            result.append((first, self._read()))

        thread = threading.Thread(target=probe, name="hybrid-diagnose", daemon=True)
        thread.start()
        thread.join(wait + max(2.0, 4 * self.interval))
        if not result:
            return "the group's rendezvous store did not answer (its host may be the peer that stopped)"
        first, second = result[0]
        gone, behind = [], []
        for r in range(self.size):
            if r == self.rank:
                continue
            state = self._process_state(r)
            if r not in second:
                gone.append(f"{self.who(r)} never sent a heartbeat{state}")
            elif liveness and second[r][0] == first.get(r, (None,))[0]:
                # Its count is as of its last heartbeat: it may have issued more before it stopped.
                gone.append(f"{self.who(r)} stopped responding: no heartbeat for {wait:.1f} s{state}, having "
                            f"issued at least {second[r][1]} operations by its last heartbeat (this is #{issued})")
            elif second[r][1] < issued:
                alive = "is alive but " if liveness else ""
                behind.append(f"{self.who(r)} {alive}has issued {second[r][1]} operations by its last heartbeat "
                              f"(at most {self.interval:.2g} s ago), not #{issued}: it has not called this one")
        if not gone and not behind:
            return ("every peer is alive and has reached this operation" if liveness else
                    "every peer has reached this operation (liveness not checked: the call's timeout is shorter "
                    "than a heartbeat interval)")
        return "; ".join(gone + behind)

    def _process_state(self, rank: int) -> str:
        """``, pid N has exited`` / ``, pid N is stopped`` for a peer on this host, else ``""``."""
        if self.hosts[rank] != socket.gethostname() or not self.pids[rank] or not os.path.isdir("/proc"):
            return ""
        pid = self.pids[rank]
        try:
            with open(f"/proc/{pid}/status") as f:
                state = next((line.split()[1] for line in f if line.startswith("State:")), "")
        except OSError:
            return f", pid {pid} has exited"
        return {"T": f", pid {pid} is stopped", "t": f", pid {pid} is stopped (traced)",
                "Z": f", pid {pid} has exited"}.get(state, "")


_BEATING: list[tuple[threading.Event, threading.Thread]] = []
"""Every heartbeat thread of this process, with its stop event."""

JOIN_AT_EXIT_S = 5.0
"""The longest the interpreter's exit waits for one heartbeat to leave the store (a beat is one small write)."""


@atexit.register
def _stop_beating() -> None:
    for stop, _ in _BEATING:
        stop.set()
    for _, thread in _BEATING:
        thread.join(JOIN_AT_EXIT_S)


def _beat(ref, stop: threading.Event) -> None:
    while True:
        monitor = ref()
        if monitor is None:
            return
        interval = monitor.interval
        del monitor
        if stop.wait(interval):
            return
        monitor = ref()
        if monitor is None:
            return
        monitor._write()
        del monitor
