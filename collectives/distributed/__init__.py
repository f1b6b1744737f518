"""``torch.distributed`` backend ``"hybrid"``: one process per rack slot, data on Gloo (or NCCL), time on the rack.

Usage (under torchrun, or any launcher that sets the usual rendezvous)::

    import interop                              # registers the device and this backend
    import torch.distributed as dist
    dist.init_process_group("hybrid")           # rank r owns hybrid:r
    x = torch.ones(1 << 20, device=f"hybrid:{dist.get_rank()}")
    dist.all_reduce(x)                          # Gloo reduces the bytes; the rack model prices it

What each rank owns: a rack slot, by default its global rank (rank r ->
``hybrid:r``, the rack being one address space across nodes).  Pass
``pg_options=collectives.distributed.Options(slot="local_rank")`` to use
``LOCAL_RANK`` (read when the group is created, never at import), or an int.
Sub-groups (``new_group``, DeviceMesh) keep each process's slot.  Creating the
default group also makes the slot the current ``hybrid`` device
(``Options(set_device=False)`` to leave it).

How it runs: hybrid tensors on emulated slots are host memory, so the engine
(Gloo, created on a prefixed store of the same rendezvous) runs on their
zero-copy CPU aliases; CPU tensors pass straight through.  A group whose slots
are all distinct real GPUs runs hybrid tensors on NCCL; a CUDA-backed slot in
a mixed group is staged through host memory.  AVG is a sum followed by a
division (Gloo has no AVG for every op), PREMUL_SUM a sum of premultiplied
inputs.  Every collective over hybrid tensors is priced on the current rack by
:func:`collectives.plan` (algorithm chosen by modelled time) and placed on
this process's timeline (``interop.timeline()``, kind ``"collective"``, every
participant slot listed).  Collectives over CPU tensors only are not placed
(they are host traffic, not the rack's); barriers are.

Timeouts and failed peers: a group's operations fail after its timeout
instead of waiting forever.  torch hands a backend its own default of 30
minutes when ``init_process_group`` / ``new_group`` get no ``timeout``; the
hybrid backend reads that as "not given" and uses :data:`DEFAULT_TIMEOUT`
(10 minutes, the default of NCCL's watchdog in torch,
``torch.distributed.constants.default_pg_nccl_timeout``); to ask for exactly 30
minutes pass ``Options(timeout=timedelta(minutes=30))``.  The timeout is the
Gloo engine's, so torch's ``_set_pg_timeout`` / ``group.set_timeout`` change
it for the operations issued after.  Every rank keeps a
heartbeat on the group's store, so an operation that fails (a timeout, a
closed connection) raises ``torch.distributed.DistBackendError`` naming the
peer it waited for, by rank and slot: one that stopped responding (frozen or
gone; on the same host, whether its process exited or is stopped) or one that
is alive but never called the operation.

Checks: before anything is written, each rank checks its own arguments
(device and slot, layout, contiguity, dtype for the reduce op, shapes) and,
with ``Options(check_peers=True)`` (the default), the ranks exchange a small
descriptor so that a mismatch (op, dtype, sizes, root, reduce op, split
sizes) or a refusal on any rank raises on every rank instead of hanging or
corrupting memory; sends carry a header the receiver checks before writing.

Public names: :data:`BACKEND`, :data:`DEFAULT_TIMEOUT`, :class:`Options`, :func:`register`,
:func:`create`, :func:`split`, :func:`local_slot`, :class:`ProcessGroupHybrid`, :class:`WorkHybrid`,
:class:`ArgumentError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Callable

import torch
import torch.distributed as dist

from collectives.distributed._names import BACKEND, DEVICE
from devices import Backing

DEFAULT_TIMEOUT = timedelta(minutes=10)
"""A group's timeout when none is given: NCCL's watchdog default in torch (``default_pg_nccl_timeout``),
not the 30 minutes torch gives other backends (a frozen peer would hold every rank that long)."""
TORCH_DEFAULT_TIMEOUT = timedelta(minutes=30)
"""What torch passes a backend when the user gave no timeout (``torch.distributed.constants.default_pg_timeout``)."""

if TYPE_CHECKING:
    from collectives.distributed._group import ProcessGroupHybrid

_LAZY = {"ProcessGroupHybrid": "_group", "WorkHybrid": "_work", "ArgumentError": "_checks"}


def __getattr__(name: str):
    # `import interop` registers the backend on every import; the process group
    # itself loads on first use, so that registering costs next to nothing.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"collectives.distributed.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'collectives.distributed' has no attribute {name!r}")


@dataclass(frozen=True)
class Options:
    """Options of a hybrid process group (``init_process_group("hybrid", pg_options=Options(...))``)."""

    slot: int | str | None = None
    """The rack slot this process owns: an int, ``"rank"`` (global rank), ``"local_rank"`` (LOCAL_RANK);
    None: the slot the default group chose, else the global rank."""
    check_peers: bool = True
    """Exchange a descriptor per collective (and a header per send) so mismatches raise on every rank."""
    engine: str = "auto"
    """``auto`` (NCCL when every slot is its own real GPU, else Gloo), ``gloo`` or ``nccl``."""
    timeline: bool = True
    """Place collectives over hybrid tensors on the modelled timeline."""
    set_device: bool = True
    """Creating the default group makes this process's slot the current hybrid device."""
    timeout: timedelta | None = None
    """The group's timeout; None: the one ``init_process_group`` / ``new_group`` passed, torch's unset default
    (30 minutes) becoming :data:`DEFAULT_TIMEOUT`."""
    gloo: Callable | None = None
    """Builds the group's Gloo engine, ``gloo(store, rank, size, timeout)``: a ``ProcessGroupGloo`` or a
    subclass of it (the CUDA layer's answers NCCL's Python API); None: ``ProcessGroupGloo``. An engine with a
    ``bind_group(group)`` method is told the group it serves."""
    gloo_devices: tuple[str, ...] = ()
    """Device types the Gloo engine is registered for besides ``cpu``: what ``group._get_backend(torch.device(t))``
    answers (the CUDA layer: ``("cuda",)``, as an NCCL group answers for CUDA)."""


def group_timeout(timeout: timedelta | None, options: Options | None = None) -> timedelta:
    """The timeout a hybrid group uses (see :class:`Options` and the module docstring)."""
    if options is not None and options.timeout is not None:
        if not isinstance(options.timeout, timedelta) or options.timeout.total_seconds() <= 0:
            raise ValueError(f"Options.timeout: expected a positive timedelta, got {options.timeout!r}")
        return options.timeout
    if timeout is None or timeout == TORCH_DEFAULT_TIMEOUT or timeout.total_seconds() <= 0:
        return DEFAULT_TIMEOUT
    return timeout


_process_slot: int | None = None


def local_slot() -> int | None:
    """The rack slot this process owns (set when the default hybrid group was created), or None."""
    return _process_slot


def _global_rank(rank: int, global_ranks) -> int:
    if global_ranks:
        return int(global_ranks[rank])
    if dist.is_initialized():
        return dist.get_rank()
    return rank


def _resolve_slot(options: Options, rank: int, global_ranks) -> int:
    choice = options.slot
    if choice is None:
        return _process_slot if _process_slot is not None else _global_rank(rank, global_ranks)
    if choice == "rank":
        return _global_rank(rank, global_ranks)
    if choice == "local_rank":
        from collectives.torchrun_env import torchrun_env

        value = torchrun_env().local_rank
        if value is None:
            raise ValueError("Options(slot='local_rank'): LOCAL_RANK is not set (launch with torchrun, or pass an int)")
        return value
    if isinstance(choice, int) and not isinstance(choice, bool):
        return choice
    raise ValueError(f"Options.slot: expected an int, 'rank', 'local_rank' or None, got {choice!r}")


def create(store, rank: int, size: int, timeout: timedelta, options: Options | None = None, *,
           global_ranks=None) -> "ProcessGroupHybrid":
    """Build the hybrid process group of ``size`` ranks on ``store`` (collective: every rank calls it).

    ``global_ranks``: the group's ranks in the default group (empty or None:
    this is the default group).  ``timeout``: see :func:`group_timeout`.
    Raises ValueError on every rank when two ranks claim one slot or a slot is
    not in the rack.
    """
    global _process_slot
    from collectives.distributed._engine import choose
    from collectives.distributed._group import ProcessGroupHybrid, exchange_slots
    from collectives.distributed._model import hooks_or_none

    options = options if isinstance(options, Options) else Options()
    timeout = group_timeout(timeout, options)
    default_group = not global_ranks
    h = hooks_or_none()
    rack = h.rack() if h is not None else None
    slot, backing, problem = -1, "host", ""
    if rack is not None:
        try:
            slot = _resolve_slot(options, rank, global_ranks)
        except ValueError as e:
            problem = str(e)
        else:
            if not 0 <= slot < len(rack):
                problem = (f"hybrid backend: rank {rank} would own hybrid:{slot}, but the rack {rack.name!r} has "
                           f"{len(rack)} slots; use a larger rack (interop.set_rack) or Options(slot=...)")
            else:
                backing = rack.devices[slot].backing
    # A refusal travels with the exchange, so that every rank raises it rather than
    # the others waiting out the group's timeout for a rank that gave up.
    slots, backings, hosts, pids, problems = exchange_slots(store, rank, size, slot, backing, problem, timeout)
    refused = [(r, p) for r, p in enumerate(problems) if p]
    if refused:
        r, p = refused[0]
        raise ValueError(p if r == rank else f"hybrid backend: rank {r} refused to create the group: {p}")
    taken = [s for s in slots if s >= 0]
    if len(set(taken)) != len(taken):
        raise ValueError("hybrid backend: ranks share a slot: " + ", ".join(
            f"rank {r} -> hybrid:{s}" for r, s in enumerate(slots)) + "; each rank needs its own (Options(slot=...))")
    # The store carries each rank's backing as text; parsed once, here, where it arrives.
    parsed = [None if b == "host" else Backing.parse(b, f"rank {r}'s backing") for r, b in enumerate(backings)]
    # torch's own answer: the CUDA layer makes is_nccl_available() say True where no ProcessGroupNCCL exists.
    engine = choose(parsed, hosts, options.engine, _nccl_built())
    pg = ProcessGroupHybrid(store, rank, size, timeout, slot=slot, slots=tuple(slots) if slot >= 0 else (),
                            engine=engine, check_peers=options.check_peers, timeline=options.timeline, hosts=hosts,
                            pids=pids, options=options, global_ranks=global_ranks, splitter=split)
    if default_group and slot >= 0:
        _process_slot = slot
        if options.set_device:
            torch.get_device_module(DEVICE).set_device(slot)
    return pg


def _nccl_built() -> bool:
    """Whether this torch was built with NCCL (``ProcessGroupNCCL`` in its C extension)."""
    return hasattr(torch._C._distributed_c10d, "ProcessGroupNCCL")


def split(parent: "ProcessGroupHybrid", ranks, timeout: timedelta | None, group_name: str,
          group_desc: str | None = None) -> "ProcessGroupHybrid | None":
    """A hybrid group of the parent's group ranks ``ranks``, made by its members alone on the parent's store
    (``ProcessGroup.split_group``, which ``torch.distributed.split_group`` calls on every parent rank, in the
    same order); None on a rank outside ``ranks``. It keeps the parent's options (each process's slot, the
    engine); its timeout is ``timeout`` (None: the parent's), its name ``group_name``.

    The members meet on the store under the parent's split count and their ranks: torch's name for the group
    counts the groups each process knows, which differ between ranks (a rank outside a group does not know it).
    """
    from torch._C._distributed_c10d import PrefixStore

    ranks = sorted(int(r) for r in ranks)
    parent.split_count += 1
    if parent.rank() not in ranks:
        return None
    parent_globals = parent.global_ranks or list(range(parent.size()))
    meeting = PrefixStore(f"split-{parent.split_count}-{'_'.join(map(str, ranks))}/", parent.store)
    child = create(meeting, ranks.index(parent.rank()), len(ranks), timeout or parent.timeout, parent.options,
                   global_ranks=[parent_globals[r] for r in ranks])
    child._set_group_name(group_name)
    child._set_group_desc(group_desc or "undefined")
    return child


def _create_extended(common, options) -> "ProcessGroupHybrid":
    """The creator torch.distributed calls (extended API: it passes the group's global ranks and pg_options)."""
    return create(common.store, common.group_rank, common.group_size, common.timeout, options,
                  global_ranks=list(common.global_ranks_in_group))


def register() -> bool:
    """Register the backend with torch.distributed (``import interop`` calls this); idempotent.

    Returns False where torch was built without distributed support.
    """
    if not dist.is_available():
        return False
    if BACKEND.upper() not in getattr(dist.Backend, "_plugins", {}):
        # extended_api: the creator learns the group's global ranks (so a
        # sub-group keeps each process's slot) and receives pg_options.
        dist.Backend.register_backend(BACKEND, _create_extended, extended_api=True, devices=[DEVICE, "cpu"])
    return True


__all__ = ["BACKEND", "DEFAULT_TIMEOUT", "ArgumentError", "Options", "ProcessGroupHybrid", "WorkHybrid", "create",
           "group_timeout", "local_slot", "register", "split"]
