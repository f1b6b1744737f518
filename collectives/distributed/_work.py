"""The ``hybrid`` backend's work objects: :class:`WorkHybrid` (as torch names NCCL's ``WorkNCCL``), a
torch.distributed ``Work`` over the engine's works.

DDP requires ``get_future()`` (its value is the list of output tensors, the
caller's own tensors, not the engine's aliases); ``wait(timeout)``,
``is_completed()`` and ``exception()`` follow the c10d contract.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def _seconds(timeout) -> float:
    if timeout is None:
        return 0.0
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


class WorkHybrid(dist._Work):
    """A collective in flight on the hybrid backend.

    ``future`` completes (with ``result``) after the engine's ``inner`` works
    finished and ``finish`` (an average's division, a staged copy back) ran.
    Engine works without a future (Gloo's reduce_scatter and send/recv) make
    the work lazy: ``wait()`` completes it, and ``get_future()`` starts a
    thread that waits so that the future completes on its own.
    """

    def __init__(self, op: str, rank: int, future: torch.futures.Future | None, inner=(), result=None,
                 default_timeout: float = 0.0, finish=None, done: threading.Event | None = None, on_failure=None):
        super().__init__()
        self._op = op
        self._rank = rank
        self._lazy = future is None
        self._future = torch.futures.Future() if future is None else future
        self._inner = list(inner)
        self._result = result
        self._finish = finish
        self._source = -1
        self._default_timeout = default_timeout
        # Set by whoever completes a work that has no engine works to wait on
        # (a checked receive's thread), so that wait() can honour a timeout.
        # Not used otherwise: a done-callback per collective costs a GIL
        # hand-off between threads (about 1 ms measured), more than the op.
        self._done = done
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._on_failure = on_failure
        """Turns an engine failure into one naming the peer it waited for (the group's peer monitor)."""
        self._converted: tuple[BaseException, BaseException] | None = None
        self._on_wait = None
        """Run once, on the waiting thread, after the first successful wait (a receive makes the waiting
        stream wait for the transfer's modelled arrival there, as a CUDA stream waits on an NCCL work)."""
        self._sent_at = -1
        """A receive: the modelled start the sender's header carried (-1: none)."""

    def _note(self, e: BaseException) -> BaseException:
        if self._on_failure is not None:
            seen = self._converted
            if seen is not None and seen[0] is e:
                e = seen[1]  # diagnosed once (it takes a few heartbeats): the same answer on every wait()
            else:
                converted = self._on_failure(e)
                self._converted = (e, converted)
                e = converted
        if not getattr(e, "_hybrid_noted", False):
            e.add_note(f"hybrid backend: {self._op} on rank {self._rank}")
            e._hybrid_noted = True
        return e

    def _settle(self, error: BaseException | None) -> None:
        """Lazy mode: run the finishing step once and complete the future."""
        with self._lock:
            if self._future.done():
                return
            if error is None and self._finish is not None:
                try:
                    self._finish()
                except Exception as e:
                    error = e
            if error is None:
                self._future.set_result(self._result)
            else:
                self._future.set_exception(error)

    def wait(self, timeout=timedelta(0)) -> bool:
        """Block until done; raise the failure (a peer's error, a timeout) with the op and rank named.

        ``timeout`` (timedelta or seconds; 0: the group's timeout) bounds the wait.
        """
        limit = _seconds(timeout) or self._default_timeout
        deadline = time.monotonic() + limit if limit else None
        try:
            for w in self._inner:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
                if left is None:
                    w.wait()
                else:
                    w.wait(timedelta(seconds=left))
        except Exception as e:
            if self._lazy:
                self._settle(e)
            raise self._note(e)
        if self._lazy:
            self._settle(None)
        if self._done is not None:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not self._done.wait(left):
                raise self._note(TimeoutError(f"{self._op} on rank {self._rank} did not finish within "
                                              f"{limit:.1f} s (a peer that never sent?)"))
        try:
            self._future.wait()
        except Exception as e:
            raise self._note(e)
        self._waited()
        return True

    def _waited(self) -> None:
        if self._on_wait is None or threading.current_thread().name.startswith("hybrid-"):
            return  # a future's watcher thread: the user's own wait places it, on the user's stream
        hook, self._on_wait = self._on_wait, None
        if hook is not None:
            hook()

    def is_completed(self) -> bool:
        """True once the outputs are final (or the op failed)."""
        if self._lazy and not self._future.done() and all(w.is_completed() for w in self._inner):
            try:
                self.wait()
            except Exception:  # recorded in the future; exception() reports it
                pass
        return self._future.done()

    def is_success(self) -> bool:
        """True when done without error."""
        return self.is_completed() and self.exception() is None

    def exception(self):
        """The failure, or None (also None while still running)."""
        if not self._future.done():
            return None
        try:
            self._future.wait()
        except Exception as e:  # the future stores it; report it rather than raise it
            return e
        return None

    def get_future(self) -> torch.futures.Future:
        """A future completed with the list of output tensors."""
        if self._lazy and not self._future.done():
            with self._lock:
                if self._watcher is None:
                    self._watcher = threading.Thread(target=self._watch, name=f"hybrid-{self._op}", daemon=True)
                    self._watcher.start()
        return self._future

    def _watch(self) -> None:
        try:
            self.wait()
        except Exception:  # recorded in the future
            pass

    def result(self):
        """The output tensors."""
        self.wait()
        return self._result

    def source_rank(self) -> int:
        """For a receive from any source: the rank the message came from."""
        self.wait()
        return self._source

    _source_rank = source_rank  # the name torch.distributed.recv calls

    def synchronize(self) -> None:
        """Same as wait(): host execution, nothing is queued on a stream."""
        self.wait()


def finished(op: str, rank: int, result) -> WorkHybrid:
    """A work that is already complete (a group of one, nothing to move)."""
    fut = torch.futures.Future()
    fut.set_result(result)
    return WorkHybrid(op, rank, fut, (), result)


def launched(op: str, rank: int, inner: list, result, finish=None, default_timeout: float = 0.0,
             on_failure=None) -> WorkHybrid:
    """Wrap the engine's ``inner`` works; ``finish()`` runs once they all succeeded, before completion.

    ``on_failure(error)``: the error to raise instead of an engine failure (one naming the peer)."""
    try:
        futures = [w.get_future() for w in inner]
    except RuntimeError:  # "Work::getFuture not implemented": Gloo reduce_scatter, send, recv
        return WorkHybrid(op, rank, None, inner, result, default_timeout, finish, on_failure=on_failure)
    base = futures[0] if len(futures) == 1 else torch.futures.collect_all(futures)

    def done(f):
        if len(futures) == 1:
            f.wait()
        else:
            for child in f.wait():
                child.wait()  # raises the first engine failure
        if finish is not None:
            finish()
        return result

    return WorkHybrid(op, rank, base.then(done), inner, result, default_timeout, on_failure=on_failure)


def combined(op: str, rank: int, works: list, default_timeout: float = 0.0) -> WorkHybrid:
    """One work over several (a coalescing block): done when all are, failed when any is."""
    if not works:
        return finished(op, rank, [])
    results = [w._result for w in works]
    if any(w._lazy for w in works):
        return WorkHybrid(op, rank, None, works, results, default_timeout)
    futures = [w.get_future() for w in works]

    def done(f):
        for child in f.wait():
            child.wait()
        return results

    work = WorkHybrid(op, rank, torch.futures.collect_all(futures).then(done), (), results, default_timeout)
    work._on_wait = lambda: [w._waited() for w in works]
    return work
