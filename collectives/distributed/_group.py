"""The process group of the ``hybrid`` backend: construction, checks, issue, coalescing, splitting, lifecycle.

The collectives themselves are in :mod:`collectives.distributed._ops` and :mod:`._ops_rooted`, sends and
receives in :mod:`._p2p`.
"""

from __future__ import annotations

import os
import socket
import threading
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, AllreduceOptions, PrefixStore, ProcessGroupGloo, ReduceOp

from collectives import graph_capture
from collectives.distributed import _checks as C
from collectives.distributed._engine import Engine, Run, choose
from collectives.distributed._model import Modeller, hooks_or_none
from collectives.distributed._ops import Collectives
from collectives.distributed._ops_rooted import RootedCollectives
from collectives.distributed._p2p import PointToPoint
from collectives.distributed._peers import PeerMonitor
from collectives.distributed._work import WorkHybrid, combined, finished, launched


class ProcessGroupHybrid(Collectives, RootedCollectives, PointToPoint, dist.ProcessGroup):
    """A torch.distributed process group whose ranks each own one slot of the hybrid rack.

    Data moves on an engine (Gloo over the zero-copy host aliases of hybrid
    tensors; NCCL where every slot is a real GPU); the modelled time of each
    collective over hybrid tensors is priced on the rack and placed on the
    timeline.  Built by :func:`collectives.distributed.create` (which
    ``init_process_group("hybrid")`` and ``new_group`` call).
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta, *, slot: int, slots: tuple[int, ...],
                 engine: str = "gloo", check_peers: bool = True, timeline: bool = True, hosts=None, pids=None,
                 options=None, global_ranks=None, splitter=None):
        # The (rank, size) constructor: torch 2.13's (store, rank, size) one cannot build a Python subclass.
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self.store = store
        """The group's store (sub-groups split from this one are made on it, under their names)."""
        self.options = options
        """The :class:`collectives.distributed.Options` the group was made with (a split keeps them)."""
        self.global_ranks = list(global_ranks or [])
        """The group's ranks in the default group (empty: this is the default group)."""
        self.split_count = 0
        """How many groups were split from this one (:func:`collectives.distributed.split`)."""
        self._splitter = splitter
        """:func:`collectives.distributed.split`, handed over by the function that made this group (the package's
        functions import this module, not the other way)."""
        self.slot = slot
        """The rack slot this rank owns (``hybrid:<slot>``); -1 without a rack."""
        self.slots = tuple(slots)
        """Every rank's slot, in group-rank order."""
        self.check_peers = check_peers
        """Exchange a descriptor before each collective so that a mismatch raises on every rank."""
        self.timeline = timeline
        """Place collectives over hybrid tensors on the modelled timeline."""
        make_gloo = getattr(options, "gloo", None) or ProcessGroupGloo
        self._ephemeral = timedelta(0)
        """An extension of the next operation's timeout (:meth:`add_ephemeral_timeout`)."""
        self._gloo = make_gloo(PrefixStore("gloo/", store), rank, size, timeout)
        _wait_until_all_connected(store, rank, size, timeout)
        # c10d's own helpers look up a per-device backend (barrier, object
        # collectives, shutdown, _set_pg_timeout); CPU maps to the Gloo engine
        # underneath, and so do the options' other device types.
        for device in ("cpu", *getattr(options, "gloo_devices", ())):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        gloo = self._gloo
        self._read_timeout = lambda: ProcessGroupGloo.options.__get__(gloo)._timeout
        """The engine's timeout, read without holding the group (the heartbeat thread keeps the reader)."""
        bind = getattr(self._gloo, "bind_group", None)
        if bind is not None:
            bind(self)
        self._engines = {"gloo": Engine("gloo", self._gloo, native_reduce=False)}
        if engine == "nccl":
            from torch._C._distributed_c10d import ProcessGroupNCCL

            opts = ProcessGroupNCCL.Options()
            opts._timeout = timeout
            nccl = ProcessGroupNCCL(PrefixStore("nccl/", store), rank, size, opts)
            self._engines["nccl"] = Engine("nccl", nccl, native_reduce=True)
        self.engine = engine
        """``gloo`` or ``nccl``: the engine hybrid tensors ride on."""
        self._model = Modeller(self.slots if slot >= 0 else ())
        self._coalescing: list[WorkHybrid] | None = None
        self._recv_chains: dict = {}
        self._p2p_lock = threading.Lock()
        self._peers = PeerMonitor(store, rank, size, self.slots if slot >= 0 else (), list(hosts or [""] * size),
                                  list(pids or [0] * size), self._read_timeout)
        """Heartbeats, and the names of the peers a failed operation waited for."""

    # -- identity -----------------------------------------------------------------------------

    def getBackendName(self) -> str:
        return "hybrid"

    def getRank(self) -> int:
        return self._rank

    def getSize(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"ProcessGroupHybrid(rank {self._rank}/{self._size}, slot {self.slot}, engine {self.engine})"

    @property
    def timeout(self) -> timedelta:
        """The group's timeout: its Gloo engine's, which torch's ``_set_pg_timeout`` and ``set_timeout`` change."""
        return self._read_timeout()

    _timeout = timeout

    @property
    def _timeout_s(self) -> float:
        return self.timeout.total_seconds()

    def add_ephemeral_timeout(self, extension: timedelta) -> None:
        """Extend the timeout of the next operation issued by ``extension``, once (NCCL's
        ``_add_ephemeral_timeout``, which torch calls while Inductor loads compiled graphs in a distributed job)."""
        self._ephemeral = self._ephemeral + extension

    def get_group_store(self):
        """The group's store (torch's ``split_group`` registers a split group with it)."""
        return self.store

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """A sub-group of this group's ranks ``ranks`` (``torch.distributed.split_group`` calls it on every rank of
        this group; None where this rank is not in ``ranks``). ``opts`` and ``device_types`` are torch's per-device
        backend choices: the sub-group keeps this group's options and engine."""
        if self._splitter is None:
            raise NotImplementedError("this hybrid group was not made by collectives.distributed.create: it cannot "
                                      "split")
        return self._splitter(self, ranks, timeout, group_name or f"split-{self.split_count}", group_desc)

    # -- failures that name the peer ------------------------------------------------------------

    def _next(self) -> int:
        """Count one more operation issued by this rank (what the heartbeats carry)."""
        self._peers.issued += 1
        return self._peers.issued

    def _failure(self, label: str, issued: int, timeout: timedelta | None = None):
        """``convert(error)``: an engine failure of operation ``issued`` as a DistBackendError naming the
        peer(s) it waited for (rank and slot); argument refusals pass through unchanged.  ``timeout``: the
        call's own, which also bounds the diagnosis."""
        def convert(e: BaseException) -> BaseException:
            if isinstance(e, C.ArgumentError) or getattr(e, "_hybrid_peers", False):
                return e
            why = self._peers.diagnose(issued, None if timeout is None else timeout.total_seconds())
            err = dist.DistBackendError(f"{label} (operation #{issued}) on {self._peers.who(self._rank)} failed: "
                                        f"{why}. The engine reported: {e}")
            err._hybrid_peers = True
            err.__cause__ = e
            return err
        return convert

    # -- checks -------------------------------------------------------------------------------

    def _view(self, label: str, what: str, t) -> tuple[torch.Tensor, bool]:
        """The tensor the engine may touch (a zero-copy alias for a hybrid tensor) and whether ``t`` is hybrid."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{label}: {what} must be a torch.Tensor, got {type(t).__name__}")
        dev = t.device
        if dev.type == C.DEVICE:
            if dev.index != self.slot:
                raise C.ArgumentError(
                    f"{label}: {what} is on {dev}, but rank {self._rank} of this group owns hybrid:{self.slot}; "
                    f"move it there first (.to('hybrid:{self.slot}'))")
            alias = hooks_or_none().alias(t)
            hybrid = True
        elif dev.type == "cpu":
            alias, hybrid = t, False
        else:
            raise C.ArgumentError(f"{label}: {what} is on {dev}; the hybrid backend takes tensors on "
                                  f"hybrid:{self.slot} (this rank's slot) or on the CPU")
        if t.layout != torch.strided:
            raise C.ArgumentError(f"{label}: {what} has layout {t.layout}; only dense (strided) tensors are supported")
        if not t.is_contiguous():
            raise C.ArgumentError(f"{label}: {what} is not contiguous; pass .contiguous() (the output is written "
                                  "in place, so a copy would not be seen)")
        return alias, hybrid

    def _single(self, label: str, tensors) -> torch.Tensor:
        if isinstance(tensors, torch.Tensor):
            return tensors
        if not isinstance(tensors, (list, tuple)) or len(tensors) != 1:
            n = len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__
            raise C.ArgumentError(f"{label}: expected a list of exactly one tensor per rank, got {n}")
        return tensors[0]

    def _list(self, label: str, what: str, tensors, n: int) -> list:
        if not isinstance(tensors, (list, tuple)) or len(tensors) != n:
            got = len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__
            raise C.ArgumentError(f"{label}: {what} must hold {n} tensors (one per rank), got {got}")
        return list(tensors)

    def _root(self, label: str, root: int) -> int:
        if not 0 <= int(root) < self._size:
            raise C.ArgumentError(f"{label}: root {root} is not a rank of this group (0..{self._size - 1})")
        return int(root)

    def _agree(self, call, error, timeout=None, ready_ps: int = -1) -> list[list[int]] | None:
        """Exchange descriptors; raise on every rank when any rank refused its arguments or they disagree.

        Each descriptor carries its rank's modelled clock (``ready_ps``).  A rank
        that never calls makes the exchange fail with Gloo's own timeout (the
        call's, else the group's), so nobody waits forever."""
        if not self.check_peers or self._size == 1:
            if error is not None:
                raise error
            return None
        row = C.describe(call, error, self._size, ready_ps)
        rows = torch.empty(self._size * row.numel(), dtype=torch.int64)
        opts = AllgatherOptions()
        if timeout is not None:
            opts.timeout = timeout
        self._gloo._allgather_base(rows, row, opts).wait()
        rows = rows.view(self._size, -1)
        if error is not None:
            raise error
        problem = C.disagreement(rows, self._rank, call)
        if problem:
            raise C.ArgumentError(f"{problem} [seen on rank {self._rank}]")
        return rows.tolist()

    # -- issue ----------------------------------------------------------------------------------

    def _engine_for(self, tensors) -> Engine:
        nccl = self._engines.get("nccl")
        if nccl is not None and tensors and all(t.device.type == "cuda" for t in tensors):
            return nccl
        return self._engines["gloo"]

    def _issue(self, label: str, build, opts=None) -> WorkHybrid:
        """Check (locally, then across peers), launch on the engine, place on the timeline, wrap.

        ``build()`` checks the arguments and returns ``(call, launch, aliases)``
        (``aliases``: the tensors the engine will touch, which choose it);
        ``launch(run, rows)`` returns ``(engine works, result, model)`` where
        ``model`` is the keyword arguments for pricing (None: not placed).
        A CUDA graph capture under way defers the whole call to the graph's replays
        (:mod:`collectives.graph_capture`): nothing is exchanged, moved or placed at capture.
        """
        record = graph_capture.recorder()
        if record is not None:
            record(lambda: self._issue(label, build, opts).wait(), (), {}, None)
            return finished(label, self._rank, None)
        call = launch = error = None
        aliases = ()
        timeout = C.op_timeout(opts)
        if self._ephemeral:
            timeout, self._ephemeral = (timeout or self.timeout) + self._ephemeral, timedelta(0)
        failure = self._failure(label, self._next(), timeout)
        try:
            call, launch, aliases = build()
        except Exception as e:  # every refusal is reported to the peers before it is raised
            error = e
        placed = error is None and call.modelled and self.timeline and self.slot >= 0
        ready = self._model.clock(self.slot) if placed else -1
        try:
            rows = self._agree(call, error, timeout, ready)
            latest = self._latest(rows, ready, timeout)
        except C.ArgumentError:
            raise
        except Exception as e:  # the exchange itself failed: a peer stopped or never called
            if e is error:
                raise
            raise failure(e) from e
        run = Run(self._engine_for(aliases), self._size, timeout)
        inner, result, model = launch(run, rows)
        if model is not None and placed:
            self._place(dict(model, ready_ps=latest))
        if inner:
            work = launched(label, self._rank, inner, result, run.finish if run.needs_finish else None,
                            self._timeout_s, on_failure=failure)
        else:
            run.finish()
            work = finished(label, self._rank, result)
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def _latest(self, rows, ready: int, timeout=None) -> int:
        """The latest participant's modelled clock for this call: from the descriptors when they were
        exchanged, else (peer checks off) from one small exchange of its own; -1 when nothing is placed."""
        if rows is not None:
            return C.latest_ready(rows)
        if self._size == 1 or not self.timeline:
            return ready
        clock = torch.tensor([ready], dtype=torch.int64)
        opts = AllreduceOptions()
        opts.reduceOp = ReduceOp.MAX
        if timeout is not None:
            opts.timeout = timeout
        self._gloo.allreduce([clock], opts).wait()
        return int(clock.item())

    def _place(self, model: dict) -> None:
        """Put a launched call on the timeline; a pricing failure (the rack changed under a live group)
        must not lose a collective that is already running, so it warns instead of raising."""
        try:
            self._model.place(**model)
        except (ValueError, IndexError) as e:
            warnings.warn(f"hybrid backend: {model.get('model')} not placed on the timeline: {e}", stacklevel=3)

    # -- coalescing (c10d's _coalescing_manager) -------------------------------------------------

    def _start_coalescing(self, device=None) -> None:
        """Start collecting the works issued until :meth:`_end_coalescing`."""
        self._coalescing = []

    def _end_coalescing(self, device=None) -> WorkHybrid:
        """One work over every collective issued since :meth:`_start_coalescing`."""
        works, self._coalescing = self._coalescing or [], None
        return combined("coalesced", self._rank, works, self._timeout_s)

    # -- lifecycle ------------------------------------------------------------------------------

    def abort(self) -> None:
        """Abort the engines (pending works fail)."""
        self._peers.stop()
        for e in self._engines.values():
            try:
                e.backend.abort()
            except Exception:  # best effort: an engine may not support abort
                pass

    def shutdown(self) -> None:
        """Shut the engines down."""
        self._peers.stop()
        for e in self._engines.values():
            try:
                e.backend.shutdown()
            except Exception:
                pass


def exchange_slots(store, rank: int, size: int, slot: int, backing: str, problem: str, timeout: timedelta):
    """Publish this rank's slot, backing, host, process id and refusal (empty: none) on the group's store; read
    everyone's (rank order): five lists (slots, backings, hosts, pids, refusals)."""
    store.set(f"hybrid-slot/{rank}", f"{slot}|{backing}|{socket.gethostname()}|{os.getpid()}|{problem}")
    keys = [f"hybrid-slot/{r}" for r in range(size)]
    store.wait(keys, timeout)
    rows = [store.get(k).decode().split("|", 4) for k in keys]
    return ([int(r[0]) for r in rows], [r[1] for r in rows], [r[2] for r in rows], [int(r[3]) for r in rows],
            [r[4] for r in rows])


__all__ = ["ProcessGroupHybrid", "exchange_slots", "choose"]


def _wait_until_all_connected(store, rank: int, size: int, timeout: timedelta) -> None:
    """Return once every member's engine has connected, as ``ncclCommInitRank`` returns on all ranks together.

    Gloo's full-mesh connect returns on the side that dialled as soon as it has written its handshake; a group
    destroyed at once (``new_group()`` then ``destroy_process_group``) could close that socket before a slower
    peer had read it, and the peer's connect then failed with "Connection closed by peer"."""
    store.set(f"connected/{rank}", "1")
    store.wait([f"connected/{r}" for r in range(size)], timeout)

