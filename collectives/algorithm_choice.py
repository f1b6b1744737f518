"""Modelled time of a collective on a rack: pick the algorithm and protocol, price the schedule.

:func:`estimate` answers "how long would this collective take on that rack",
:func:`plan` also returns the schedule to run (the executor runs exactly the
schedule that was priced, so the modelled time is that of the algorithm that
ran).  Every algorithm that implements the op and fits the participants'
placement is priced under every protocol; the fastest wins unless ``algorithm``
names one.  Schedules up to :data:`STEP_LIMIT` transfers are priced step by
step on the real routes; larger ones (a million chips) by the algorithm's
closed form on the placement's alpha-beta levels.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping, Sequence

from collectives import algorithms
from collectives.algorithms.base import Algorithm
from collectives.tuning import Protocol
from collectives.cost import base_latency, compile_rounds, levels, price
from collectives.ops import busbw_factor, check_op, count_for_bytes, reported_bytes
from collectives.schedule import CollectiveSpec, Schedule
from collectives.rack_topology import from_rack
from collectives.topology import HOST, Topology

STEP_LIMIT = 20_000
"""Largest schedule (in transfers) priced step by step; beyond it the closed form is used."""
BUILD_LIMIT = 2_000_000
"""Largest schedule :func:`plan` builds for execution (a million chips are estimated, never built)."""


@dataclass(frozen=True, slots=True)
class CollectiveEstimate:
    """A modelled collective time, with the bandwidths nccl-tests would print and where the figures came from."""

    op: str
    """Collective name."""
    nbytes: int
    """S, the size bandwidths are reported on (nccl-tests convention, see ``collectives.ops``)."""
    participants: int
    """Number of ranks."""
    seconds: float
    """Modelled time."""
    algbw: float
    """S / seconds, bytes/s (0 when nothing moves)."""
    busbw: float
    """algbw times nccl-tests' bus factor, bytes/s."""
    algorithm: str
    """The algorithm priced (the fastest, or the one asked for)."""
    protocol: str
    """The protocol priced (``simple``, ``ll128``, ``ll``; ``ideal`` on an ideal topology)."""
    pipeline: int
    """Chunks the data was cut into (pipelined algorithms; 1 otherwise)."""
    path: str
    """``steps`` (the schedule priced transfer by transfer) or ``closed-form``."""
    rack: str
    """The rack or topology name."""
    detail: str = ""
    """Extra words about the choice (the outer algorithm of a hierarchical one)."""
    alternatives: Mapping[str, float] = field(default_factory=dict)
    """Every candidate algorithm's best modelled seconds."""
    sources: tuple[str, ...] = ()
    """Citations of every figure used."""
    modelled: bool = True
    """Always True: this is a model, not a measurement."""

    def __str__(self) -> str:
        return (f"{self.op} {self.nbytes} B over {self.participants}: {self.seconds * 1e6:.2f} us modelled, "
                f"algbw {self.algbw / 1e9:.2f} GB/s, busbw {self.busbw / 1e9:.2f} GB/s "
                f"({self.algorithm}{'/' + self.detail if self.detail else ''}, {self.protocol}, {self.path})")


@dataclass(frozen=True, slots=True)
class CollectivePlan:
    """An estimate and the schedule it priced (None when priced in closed form only)."""

    estimate: CollectiveEstimate
    schedule: Schedule | None
    slots: Sequence[int]
    """Participant i sits on slot ``slots[i]``."""


TOPOLOGY_CACHE_SIZE = 64
"""Topologies kept by :func:`topology` (least recently used dropped first)."""
PLAN_CACHE_SIZE = 512
"""Plans kept by :func:`cached_plan` (least recently used dropped first)."""

_topologies: OrderedDict[tuple, tuple[object, Topology]] = OrderedDict()
_topologies_lock = threading.Lock()


def topology(rack) -> Topology:
    """The :class:`Topology` of a Topology, a :class:`devices.RackSpec`, a preset name or a spec string.

    The one cache of topologies (every user of a rack's topology asks here: the
    planner, the in-process collectives, the torch.distributed backend, the
    copy pricing of the timeline).  A RackSpec is keyed by identity (it is
    immutable, and kept alive while cached, so the key cannot be reused); a
    preset name or a ``kind:count`` spec by its text, so that a what-if asked
    as a string is parsed once; a ``.toml`` path is read every time (the file
    may change).  At most :data:`TOPOLOGY_CACHE_SIZE` are kept.
    """
    from devices import RackSpec

    if isinstance(rack, Topology):
        return rack
    if isinstance(rack, str):
        if ".toml" in rack.lower():
            return from_rack(rack)
        key = ("text", rack.strip())
    elif isinstance(rack, RackSpec):
        key = ("spec", id(rack))
    else:
        return from_rack(rack)
    with _topologies_lock:
        hit = _topologies.get(key)
        if hit is not None and (hit[0] is rack or key[0] == "text"):
            _topologies.move_to_end(key)
            return hit[1]
    topo = from_rack(rack)
    with _topologies_lock:
        _topologies[key] = (rack, topo)
        _topologies.move_to_end(key)
        while len(_topologies) > TOPOLOGY_CACHE_SIZE:
            _topologies.popitem(last=False)
    return topo


def cached_plan(topo: Topology, op: str, count: int, itemsize: int = 1, slots=None, algorithm: str | None = None,
                *, root: int = 0, splits=None, build: bool = True) -> CollectivePlan:
    """:func:`plan` through the one plan cache, for callers that repeat collectives (a training loop's buckets).

    Plans are pure functions of their arguments and schedules are immutable,
    so each distinct call is planned once; at most :data:`PLAN_CACHE_SIZE` are
    kept.  ``slots`` and ``splits`` must be hashable (tuples or a range).
    """
    algorithms.check_name(algorithm)
    if slots is not None and not isinstance(slots, range):
        slots = tuple(slots)
    return _cached_plan(topo, op, count, itemsize, slots, algorithm, root, splits, build)


@lru_cache(maxsize=PLAN_CACHE_SIZE)
def _cached_plan(topo, op, count, itemsize, slots, algorithm, root, splits, build) -> CollectivePlan:
    return plan(topo, op, count, itemsize, slots, algorithm, root=root, splits=splits, build=build)


def _slots(topo: Topology, op: str, slots) -> Sequence[int]:
    if slots is None:
        if op == "send_recv":
            if len(topo) < 2:
                raise ValueError("send_recv: the rack has one slot; pass slots=(src, dst)")
            return (0, 1)
        return range(len(topo))
    if isinstance(slots, range):
        chosen: Sequence[int] = slots
    else:
        chosen = tuple(int(s) for s in slots)
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"slots: each slot may take part once, got {list(chosen)}")
    if not len(chosen):
        raise ValueError("slots: need at least one participant")
    for s in (chosen[0], chosen[-1]) if isinstance(chosen, range) else chosen:
        if s == HOST and op == "send_recv":
            continue  # a copy between the host and a slot (collectives.transfer)
        if not 0 <= s < len(topo):
            raise ValueError(f"slots: slot {s} is not in the rack (0-{len(topo) - 1})")
    return chosen


def _candidates(op: str, algorithm: str | None, spec: CollectiveSpec, placement) -> list[tuple[Algorithm, dict]]:
    if algorithm is not None:
        algo = algorithms.get(algorithm)
        if op not in algo.ops:
            raise ValueError(f"algorithm {algo.name!r} does not implement {op}; algorithms for {op}: "
                             f"{', '.join(a.name for a in algorithms.for_op(op))}")
        reason = algo.unsupported(spec, placement)
        if reason:
            raise ValueError(reason)
        chosen = [algo]
    else:
        chosen = [a for a in algorithms.for_op(op) if a.unsupported(spec, placement) is None]
    return [(algo, variant) for algo in chosen for variant in algo.variants(op)]


def plan(rack, op: str, count: int, itemsize: int = 1, slots=None, algorithm: str | None = None, *, root: int = 0,
         splits=None, protocol: str | None = None, build: bool = True) -> CollectivePlan:
    """Choose and price a collective of ``count`` elements per participant (``collectives.ops`` conventions).

    ``rack``: a Topology, RackSpec, preset name or spec string; ``slots``: the
    participating slots in rank order (None: all; send_recv: (src, dst));
    ``algorithm``: force one (ValueError listing the accepted ones);
    ``protocol``: force ``simple``, ``ll128`` or ``ll``.  With ``build`` the
    chosen schedule is returned for the executor (up to :data:`BUILD_LIMIT`
    transfers), priced step by step: the time is that of the schedule that runs.
    """
    op = check_op(op)
    topo = topology(rack)
    chosen_slots = _slots(topo, op, slots)
    p = len(chosen_slots)
    placement = topo.placement(chosen_slots if not (isinstance(chosen_slots, range) and len(chosen_slots) == len(topo))
                         else None)
    protos: list[Protocol] = list(topo.protocols)
    if protocol is not None:
        protos = [x for x in protos if x.name == str(protocol).lower()]
        if not protos:
            raise ValueError(f"protocol: unknown {protocol!r}; accepted: {', '.join(x.name for x in topo.protocols)}")
    base_spec = CollectiveSpec(op=op, participants=p, count=count if op != "barrier" else 0, itemsize=itemsize,
                               root=root, splits=splits)
    best = None
    alternatives: dict[str, float] = {}
    level_of = {proto.name: levels(topo, placement, proto) for proto in protos}
    for algo, variant in _candidates(op, algorithm, base_spec, placement):
        spec0 = algo.bind(replace(base_spec, **variant), topo, chosen_slots, placement, schedule=False)
        label = algo.label(spec0)
        built: dict[int, tuple[Schedule, list]] = {}
        for proto in protos:
            base = base_latency(proto, algo.latency_class)
            if base is None:
                continue
            lv = level_of[proto.name]
            spec = replace(spec0, pipeline=algo.best_pipeline(spec0, lv))
            steps = algo.transfers(spec) <= STEP_LIMIT and p <= STEP_LIMIT
            schedule = None
            if p == 1 or algo.is_empty(spec):
                seconds = 0.0
            elif steps:
                spec = algo.bind(spec, topo, chosen_slots, placement, schedule=True)
                if spec.pipeline not in built:  # priced once per schedule, whatever the protocol
                    made = algo.build(spec)
                    built[spec.pipeline] = (made, compile_rounds(made, topo, chosen_slots))
                schedule, compiled = built[spec.pipeline]
                seconds = base + price(compiled, proto, topo.overlap_reduce)
            else:
                seconds = base + algo.closed_form(spec, lv)
            alternatives[label] = min(alternatives.get(label, math.inf), seconds)
            if best is None or seconds < best[0]:
                best = (seconds, algo, proto, spec, schedule, steps)
    if best is None:
        raise ValueError(f"no algorithm can run {op} on these {p} participants")
    seconds, algo, proto, spec, schedule, steps = best
    if build and schedule is None and algo.transfers(spec) <= BUILD_LIMIT:
        # The caller will run this schedule: price what runs, step by step, even where the
        # choice was made on the closed form.
        spec = algo.bind(spec, topo, chosen_slots, placement, schedule=True)
        schedule = algo.build(spec)
        if not steps and p > 1 and not algo.is_empty(spec):
            seconds = base_latency(proto, algo.latency_class) + price(
                compile_rounds(schedule, topo, chosen_slots), proto, topo.overlap_reduce)
            steps = True
    size = reported_bytes(op, spec.count, itemsize, p)
    if spec.splits is not None:  # all_to_allv: nccl-tests reports on the largest per-rank byte count
        size = max(max(sum(row) for row in spec.splits), max(sum(col) for col in zip(*spec.splits))) * itemsize
    algbw = size / seconds if seconds > 0 else 0.0
    sources = tuple(topo.sources()) + (
        f"algorithm {algo.name}: schedule in collectives/algorithms/{algo.name}.py, priced "
        + ("step by step on the rack's routes (collectives.cost)" if steps else
           "by its closed form on alpha-beta levels (collectives.cost.Levels)"),
        "bandwidth reporting: nccl-tests convention (reference/collectives.md)")
    est = CollectiveEstimate(
        op=op, nbytes=size, participants=p, seconds=seconds, algbw=algbw, busbw=algbw * busbw_factor(op, p),
        algorithm=algo.name, protocol=proto.name, pipeline=spec.pipeline, path="steps" if steps else "closed-form",
        rack=topo.name, detail=algo.detail(spec),
        alternatives=MappingProxyType(dict(sorted(alternatives.items(), key=lambda kv: kv[1]))), sources=sources)
    return CollectivePlan(est, schedule if build else None, chosen_slots)


def estimate(rack, op: str, nbytes: int, algorithm: str | None = None, slots=None, *, root: int = 0,
             protocol: str | None = None) -> CollectiveEstimate:
    """Modelled time of ``op`` on ``rack`` for a size of ``nbytes`` (S of nccl-tests).

    ``rack``: preset name, spec string, :class:`devices.RackSpec` or
    :class:`Topology`; ``slots``: participating slots (None: all of them;
    send_recv: the first two); ``algorithm``: None picks the fastest, a name
    forces it (ValueError listing the accepted values for an unknown name or an
    op it does not implement).  See :class:`CollectiveEstimate`.
    """
    op = check_op(op)
    topo = topology(rack)
    p = len(_slots(topo, op, slots))
    count = count_for_bytes(op, nbytes, p)
    return plan(topo, op, count, 1, slots, algorithm, root=root, protocol=protocol, build=False).estimate
