"""The peer diagnosis says what it knows: a peer's operation count is as of its last heartbeat, so a peer that
stopped is said to have issued at least that many (issue 17: "after 0 operations" for a peer that did 52)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from collectives.distributed._peers import PeerMonitor


class DictStore:
    """The part of a c10d store the monitor uses."""

    def __init__(self):
        self.data: dict[str, bytes] = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]


def _monitor(store) -> PeerMonitor:
    return PeerMonitor(store, rank=0, size=2, slots=(0, 1), hosts=["here", "elsewhere"], pids=[1, 0],
                       timeout=timedelta(seconds=0.5))


def test_a_stopped_peer_is_said_to_have_issued_at_least_its_last_heartbeat_count():
    store = DictStore()
    store.set("hybrid-beat/1", "7|0")  # its last beat said 0 operations; it issued 52 before it stopped
    monitor = _monitor(store)
    try:
        message = monitor.diagnose(issued=53)
    finally:
        monitor.stop()
    assert "rank 1 (hybrid:1) stopped responding" in message
    assert "having issued at least 0 operations by its last heartbeat (this is #53)" in message
    assert "after 0 operations" not in message


def test_a_live_peer_behind_is_dated_to_its_last_heartbeat():
    store = DictStore()
    monitor = _monitor(store)

    def beating():  # a live peer: its beat moves between the two reads, its count stays at 3
        beat = 0
        while not stop:
            beat += 1
            store.set("hybrid-beat/1", f"{beat}|3")
            time.sleep(0.01)

    stop = False
    thread = threading.Thread(target=beating, daemon=True)
    thread.start()
    try:
        message = monitor.diagnose(issued=5)
    finally:
        stop = True
        thread.join()
        monitor.stop()
    assert "rank 1 (hybrid:1) is alive but has issued 3 operations by its last heartbeat" in message
    assert "not #5: it has not called this one" in message


def test_the_heartbeat_is_stopped_and_joined_before_the_interpreter_ends_its_daemon_threads():
    # A daemon heartbeat ended by CPython inside the store's C++ call aborts the process after the script finished
    # ("terminate called without an active exception", seen in torchrun ranks): the exit hook waits for it.
    from collectives.distributed import _peers

    class SlowStore(DictStore):
        def set(self, key, value):
            time.sleep(0.2)  # a beat in flight when the interpreter starts to exit
            super().set(key, value)

    monitor = _monitor(SlowStore())
    thread = _peers._BEATING[-1][1]
    time.sleep(0.1)
    _peers._stop_beating()  # registered with atexit
    assert not thread.is_alive()
    assert monitor._stop.is_set()
