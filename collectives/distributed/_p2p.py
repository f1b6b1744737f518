"""Sends and receives of the ``hybrid`` process group: a header (checked by the receiver, carrying the transfer's
modelled start) ahead of each payload, the transfer placed on both ranks' timelines.

A mixin of :class:`collectives.distributed._group.ProcessGroupHybrid`, whose checks, engines and model it uses.
"""

from __future__ import annotations

import threading
import warnings

import torch

from collectives.distributed import _checks as C
from collectives.distributed._engine import Run
from collectives.distributed._work import WorkHybrid, launched


class PointToPoint:
    """``send``, ``recv`` and ``recv_anysource`` of a hybrid group."""

    def _p2p_view(self, label: str, tensors, peer) -> tuple[torch.Tensor, torch.Tensor, bool]:
        t = self._single(label, tensors)
        if peer is not None and not 0 <= int(peer) < self._size:
            raise C.ArgumentError(f"{label}: peer rank {peer} is not in this group (0..{self._size - 1})")
        alias, hybrid = self._view(label, "tensor", t)
        return t, alias, hybrid

    @property
    def _headers(self) -> bool:
        """Sends carry a header (checked by the receiver, and carrying the transfer's modelled start)."""
        return self.check_peers or self.timeline

    def _place_send(self, dst: int, t: torch.Tensor, hybrid: bool) -> int:
        """Place a send on this rank's timeline: it starts when this rank's data is ready (its stream's clock)
        and the link to ``dst`` is free. Returns the start the header carries (-1: not placed)."""
        if not (hybrid and self.timeline and self.slot >= 0 and dst != self._rank):
            return -1
        src_slot, dst_slot = self.slot, self.slots[dst]
        try:
            record = self._model.place_transfer(t.numel(), t.element_size(), src_slot, dst_slot,
                                                self._model.clock(src_slot))
        except (ValueError, IndexError) as e:
            warnings.warn(f"hybrid backend: send_recv not placed on the timeline: {e}", stacklevel=3)
            return -1
        return -1 if record is None else record.start_ps

    def _arrival(self, work: WorkHybrid, t: torch.Tensor, hybrid: bool):
        """``on_wait()`` for a receive: once the payload is in, place the transfer at the start the sender's
        header carried (or later, if the link was still busy) and make this rank's current stream wait for its
        arrival."""
        if not (hybrid and self.timeline and self.slot >= 0):
            return None

        def arrived() -> None:
            source, start = work._source, work._sent_at
            if source is None or source < 0 or source == self._rank:
                return
            src_slot = self.slots[source]
            if start < 0:  # the sender did not place it (a CPU tensor there): from this rank's readiness
                start = self._model.clock(self.slot)
            try:
                self._model.place_transfer(t.numel(), t.element_size(), src_slot, self.slot, start, wait=self.slot)
            except (ValueError, IndexError) as e:
                warnings.warn(f"hybrid backend: send_recv not placed on the timeline: {e}", stacklevel=3)
        return arrived

    def send(self, tensors, dstRank: int, tag: int = 0) -> WorkHybrid:
        """Send one tensor to group rank ``dstRank``; a small header (dtype, size, modelled start) goes first
        when peers are checked or the timeline is kept."""
        t, alias, hybrid = self._p2p_view("send", tensors, dstRank)
        run = Run(self._engine_for([alias]), self._size)
        buf = C.as_transport(run.buf(alias), reducing=False)
        inner = []
        start = self._place_send(dstRank, t, hybrid)
        if self._headers:
            inner.append(self._gloo.send([C.p2p_header(t, self.slot, start)], dstRank, tag))
        inner.append(run.engine.backend.send([buf], dstRank, tag))
        work = launched("send", self._rank, inner, [t], None, self._timeout_s,
                        on_failure=self._failure(f"send to rank {dstRank}", self._next()))
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def recv(self, tensors, srcRank: int, tag: int = 0) -> WorkHybrid:
        """Receive one tensor from group rank ``srcRank`` (checked against the sender's header first)."""
        return self._recv("recv", tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag: int = 0) -> WorkHybrid:
        """Receive one tensor from whichever rank sends first (``work.source_rank()`` tells which).

        Only the sender places this transfer on its timeline: the receiver does
        not know the source when the receive is issued.  With peer checks, do
        not keep a receive from any source and a receive from a specific source
        pending on the same tag at once: one could take the other's message."""
        return self._recv("recv_anysource", tensors, None, tag)

    def _recv(self, label: str, tensors, src, tag: int) -> WorkHybrid:
        t, alias, hybrid = self._p2p_view(label, tensors, src)
        run = Run(self._engine_for([alias]), self._size)
        buf = C.as_transport(run.buf(alias, out=True), reducing=False)
        failure = self._failure(f"{label} from {'any rank' if src is None else f'rank {src}'}", self._next())
        if not self._headers:  # neither checked nor placed
            w = (run.engine.backend.recv([buf], src, tag) if src is not None
                 else run.engine.backend.recv_anysource([buf], tag))
            work = launched(label, self._rank, [w], [t], run.finish if run.needs_finish else None, self._timeout_s,
                            on_failure=failure)
        else:
            work = self._checked_recv(label, t, buf, run, src, tag, hybrid, failure)
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def _checked_recv(self, label, t, buf, run, src, tag, hybrid, failure) -> WorkHybrid:
        """Receive the header, check it, then the payload into ``buf`` (or into scratch, and fail).

        Runs on a helper thread, since Gloo's receive works have no future to
        chain on.  Receives on one (source, tag) channel are serialised: the
        next header is posted only once this payload's receive is, because the
        engine matches a channel's messages in posting order.
        """
        result = torch.futures.Future()
        done = threading.Event()
        work = WorkHybrid(label, self._rank, result, (), [t], self._timeout_s, done=done, on_failure=failure)
        with self._p2p_lock:
            previous = self._recv_chains.get((src, tag))
            posted = threading.Event()
            self._recv_chains[(src, tag)] = posted
        header = torch.zeros(C.P2P_HEADER, dtype=torch.int64)
        timeout = self._timeout

        def receive():
            try:
                if previous is not None and not previous.wait(self._timeout_s):
                    raise TimeoutError(f"{label}: an earlier receive on this channel never completed")
                hw = (self._gloo.recv([header], src, tag) if src is not None
                      else self._gloo.recv_anysource([header], tag))
                hw.wait(timeout)
                source = hw.source_rank() if src is None else src
                problem = C.p2p_mismatch(header, t, source, self._rank) if self.check_peers else None
                # On a mismatch the payload still has to be taken off the wire (the
                # sender waits for it), into scratch: the caller's buffer stays untouched.
                target = buf if problem is None else torch.empty(int(header[2]), dtype=torch.uint8)
                pw = run.engine.backend.recv([target], source, tag)
                posted.set()
                work._source = source
                work._sent_at = int(header[5])
                pw.wait(timeout)
                if problem:
                    raise C.ArgumentError(problem)
                run.finish()
                result.set_result([t])
            except Exception as e:
                posted.set()
                result.set_exception(e)
            done.set()

        work._on_wait = self._arrival(work, t, hybrid)
        threading.Thread(target=receive, name=f"hybrid-{label}", daemon=True).start()
        return work


__all__ = ["PointToPoint"]
