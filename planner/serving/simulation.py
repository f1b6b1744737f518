"""The discrete-event simulation of requests through engine instances: arrival, queueing, prefill, KV transfer, decode.

Instances are processes on one modelled clock, each running one iteration at a time
(:class:`Simulation.run`):

* a **colocated** instance runs continuous batching with chunked prefill: every
  iteration, each running sequence decodes one token and waiting prompts fill the rest
  of the token budget in arrival order (a prompt longer than the budget spreads over
  iterations); a prompt's last chunk samples its first token. Without chunking
  (``chunked=False``) prompts enter whole while they fit the rest of the budget, in
  arrival order, and an iteration's first prompt always enters (TensorRT-LLM's
  scheduler without chunked context, whose budget holds the longest prompt);
* a **prefill** instance of a disaggregated pair runs prompts only; each finished
  prompt's KV cache then moves to the decode instance with the fewest sequences, on
  the prefill instance's link, one transfer after another;
* a **decode** instance admits sequences whose KV cache has arrived and decodes.

Admission is guaranteed-no-evict (TensorRT-LLM's default): a sequence enters only when
the KV cache can hold all of it (input and output, in whole blocks) and the batch is
below its limit, so no sequence is ever preempted. Requests arrive all at once
(offline), by a Poisson process, or from a closed loop of clients. The iteration times
come from a cost object (:class:`planner.serving.iteration.FusedCost` for a fused
engine, :class:`planner.serving.eager.EagerCost` for the eager one) through
:class:`Costs`.

A run of decode iterations where only the cache grows skips the loop's round trip, each
iteration the one the loop would run, bit for bit (:mod:`planner.serving.decode_runs`).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from planner.serving.decode_runs import DecodeRuns
from planner.serving.local_keys import LocalKeys


class Costs(Protocol):
    """What the simulation asks an instance's cost model (seconds); a cost may add ``decode_pricer(batch)``, which
    prices a run of decode iterations at once (:meth:`planner.serving.iteration.FusedCost.decode_pricer`)."""

    def prefill(self, chunks: list[tuple[int, int]], sampled: int) -> float:
        """A prefill-only iteration over ``chunks`` ((tokens, tokens already cached) per prompt)."""

    def mixed(self, chunks: list[tuple[int, int]], batch: int, kv_tokens: int, sampled: int) -> float:
        """An iteration of prompt chunks and ``batch`` decode tokens reading ``kv_tokens`` cached tokens (and, for
        a cost with :attr:`local`, ``local_kv=`` the keys they see in a local-attention layer)."""

    def decode(self, batch: int, kv_tokens: int, padded: int) -> float:
        """A decode iteration of ``batch`` sequences (the longest cache ``padded`` tokens; ``local_kv=`` as
        :meth:`mixed`)."""

    def join(self, batch: int, padded: int, lengths: tuple[int, ...]) -> float:
        """Sequences of cache ``lengths`` joining a running batch."""

    def leave(self, batch: int, padded: int, kept: int, kept_padded: int) -> float:
        """Finished sequences leaving a batch."""


@dataclass(slots=True)
class Requests:
    """Every request's lengths and, after :meth:`Simulation.run`, its times (seconds)."""

    inputs: list[int]
    outputs: list[int]
    arrival: list[float]
    first: list[float] = field(default_factory=list)
    finish: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.inputs)
        self.first = [0.0] * n
        self.finish = [0.0] * n


@dataclass(slots=True)
class Event:
    """One item of the modelled timeline of a what-if: an iteration or a KV transfer."""

    track: str
    name: str
    start: float
    duration: float


EVENT_LIMIT = 20_000
"""Timeline events kept per simulation (the rest are counted, not kept)."""


class _Instance:
    __slots__ = ("name", "role", "costs", "capacity", "need", "max_batch", "budget", "max_prompts", "chunked", "free_at",
                 "scheduled", "queue", "prompts", "kv_used", "running", "finish_heap", "step", "acc",
                 "pad_heap", "left", "pending", "link_free", "done", "local")

    def __init__(self, name: str, role: str, costs: Costs, capacity: int, need: Callable[[int], int],
                 max_batch: int, budget: int, max_prompts: int | None, chunked: bool) -> None:
        self.name, self.role, self.costs = name, role, costs
        self.capacity, self.need, self.max_batch, self.budget, self.max_prompts = (
            capacity, need, max_batch, budget, max_prompts)
        self.chunked = chunked
        self.free_at = 0.0
        self.scheduled = False
        self.prompts: list[list[int]] = []  # [request, tokens done]
        self.kv_used = 0
        self.running: set[int] = set()
        self.finish_heap: list[tuple[int, int]] = []
        self.step = 0  # decode iterations run
        self.acc = 0  # sum over running of (cache length + 1 - joining step)
        self.pad_heap: list[tuple[int, int]] = []  # decode: (-(cache length - joining step), request)
        self.left: tuple[int, int] | None = None  # decode: (batch, padded length) before sequences left
        self.pending: deque[tuple[float, int]] = deque()  # decode: (KV arrival, request)
        self.link_free = 0.0
        self.done: list = []
        local = getattr(costs, "local", None)  # a cost model that prices local-attention layers asks for their keys
        self.local = LocalKeys(*local) if local else None

    def decode_keys(self, batch: int) -> tuple[int, dict]:
        """The running sequences' keys in a full layer, and the cost's ``local_kv`` argument (if it takes one)."""
        kv = self.acc + batch * self.step
        return kv, ({"local_kv": kv - self.local.cut(self.step)} if self.local is not None else {})


class Simulation(DecodeRuns):
    """Requests through colocated or disaggregated instances (see the module doc)."""

    def __init__(self, requests: Requests, *, concurrency: int | None = None, record: bool = False) -> None:
        self.r = requests
        self.concurrency = concurrency
        self.record = record
        self.events: list[Event] = []
        self.dropped = 0
        self.instances: list[_Instance] = []
        self.transfer: Callable[[int, int, int], float] | None = None
        self._heap: list[tuple[float, int, int]] = []
        self._order = 0
        self._waiting: deque[int] = deque()
        self._next = 0  # next request not yet arrived
        self._batch_sum = 0
        self._batch_steps = 0

    # -- building ----------------------------------------------------------------------------

    def add(self, name: str, role: str, costs: Costs, *, capacity: int, need: Callable[[int], int],
            max_batch: int, budget: int, max_prompts: int | None = None, chunked: bool = True) -> None:
        """An instance: ``role`` ``colocated``, ``prefill`` or ``decode``; ``capacity`` its KV bytes (per chip);
        ``need(request)`` the bytes a request reserves; ``budget`` tokens per iteration; ``chunked``: prompts
        may split over iterations (else each enters whole, see the module doc)."""
        if role not in ("colocated", "prefill", "decode"):
            raise ValueError(f"role: expected colocated, prefill or decode, got {role!r}")
        self.instances.append(_Instance(name, role, costs, capacity, need, max_batch, budget, max_prompts, chunked))

    # -- the event loop ------------------------------------------------------------------------

    def _wake(self, inst: int, t: float) -> None:
        self._order += 1
        heapq.heappush(self._heap, (t, self._order, inst))

    def _arrive_until(self, t: float) -> None:
        while self._next < self._issued and self.r.arrival[self._next] <= t:
            self._waiting.append(self._next)
            self._next += 1

    def run(self) -> Requests:
        """Simulate every request; fills :attr:`Requests.first` and :attr:`Requests.finish`."""
        r = self.r
        n = len(r.inputs)
        self._issued = n if self.concurrency is None else min(n, self.concurrency)
        consumers = [i for i, x in enumerate(self.instances) if x.role in ("colocated", "prefill")]
        if not consumers:
            raise ValueError("a simulation needs a colocated or a prefill instance")
        arrivals = sorted(set(r.arrival[: self._issued])) if self.concurrency is None else [0.0]
        for t in arrivals:
            for i in consumers:
                self._wake(i, t)
        finished = 0
        while self._heap and finished < n:
            t, _, i = heapq.heappop(self._heap)
            inst = self.instances[i]
            if t < inst.free_at:
                continue
            self._arrive_until(t)
            finished += self._complete(inst, t)
            if inst.free_at <= t:
                self._start(inst, i, t)
        if finished < n:
            raise RuntimeError(f"simulation stalled with {n - finished} of {n} requests unfinished")
        return r

    # -- completing an iteration ---------------------------------------------------------------

    def _complete(self, inst: _Instance, t: float) -> int:
        finished = 0
        for kind, payload in inst.done:
            if kind == "first":
                finished += self._first_token(inst, payload, t)
            elif kind == "step":
                finished += self._step_done(inst, t)
        inst.done = []
        return finished

    def _first_token(self, inst: _Instance, req: int, t: float) -> int:
        r = self.r
        r.first[req] = t
        if r.outputs[req] == 1:
            r.finish[req] = t
            inst.kv_used -= inst.need(req)
            self._closed_loop(t)
            return 1
        if inst.role == "colocated":
            self._join(inst, req)
            return 0
        # disaggregated: move the KV cache to the decode instance with the fewest sequences
        decodes = [x for x in self.instances if x.role == "decode"]
        target = min(range(len(decodes)), key=lambda k: (len(decodes[k].running) + len(decodes[k].pending), k))
        start = max(t, inst.link_free)
        seconds = self.transfer(self.instances.index(inst), self.instances.index(decodes[target]), req)
        inst.link_free = start + seconds
        inst.kv_used -= inst.need(req)  # freed once sent; the link is busy meanwhile
        decodes[target].pending.append((start + seconds, req))
        self._event(f"{inst.name} -> {decodes[target].name}", f"KV r{req}", start, seconds)
        self._wake(self.instances.index(decodes[target]), start + seconds)
        return 0

    def _join(self, inst: _Instance, req: int) -> None:
        cache = self.r.inputs[req]  # tokens cached after the prompt
        inst.running.add(req)
        inst.acc += cache + 1 - inst.step
        if inst.local is not None:
            inst.local.join(req, cache + 1, inst.step)
        heapq.heappush(inst.finish_heap, (inst.step + self.r.outputs[req] - 2, req))
        if inst.role == "decode":
            heapq.heappush(inst.pad_heap, (-(cache - inst.step), req))

    def _padded(self, inst: _Instance) -> int:
        """The longest cache of the running batch (stale entries of finished sequences dropped)."""
        heap = inst.pad_heap
        while heap and heap[0][1] not in inst.running:
            heapq.heappop(heap)
        return inst.step - heap[0][0] if heap else 0

    def _step_done(self, inst: _Instance, t: float) -> int:
        r = self.r
        step = inst.step
        if inst.role == "decode":
            before = (len(inst.running), self._padded(inst) + 1)
        inst.step += 1
        finished = 0
        while inst.finish_heap and inst.finish_heap[0][0] <= step:
            _, req = heapq.heappop(inst.finish_heap)
            inst.running.discard(req)
            inst.acc -= r.inputs[req] + 1 - (step + 2 - r.outputs[req])
            if inst.local is not None:
                inst.local.leave(req)
            inst.kv_used -= inst.need(req)
            r.finish[req] = t
            finished += 1
            self._closed_loop(t)
        if finished and inst.role == "decode":
            inst.left = before
        return finished

    def _closed_loop(self, t: float) -> None:
        if self.concurrency is not None and self._issued < len(self.r.inputs):
            self.r.arrival[self._issued] = t
            self._issued += 1
            for i, x in enumerate(self.instances):
                if x.role in ("colocated", "prefill") and x.free_at <= t:
                    self._wake(i, t)

    # -- starting an iteration -------------------------------------------------------------------

    def _admit(self, inst: _Instance) -> None:
        prefill = inst.role == "prefill"
        while self._waiting and len(inst.running) + len(inst.prompts) < inst.max_batch:
            if prefill and (inst.max_prompts is not None and len(inst.prompts) >= inst.max_prompts
                            or sum(self.r.inputs[q] - done for q, done in inst.prompts) >= inst.budget):
                break  # a prefill instance takes only what its next iteration runs; the rest wait for any
            req = self._waiting[0]
            need = inst.need(req)
            if inst.kv_used + need > inst.capacity:
                break
            self._waiting.popleft()
            inst.kv_used += need
            inst.prompts.append([req, 0])

    def _chunks(self, inst: _Instance, budget: int) -> tuple[list[tuple[int, int]], list[int]]:
        """This iteration's prompt chunks in arrival order, and the prompts they complete (progress applied)."""
        chunks, completing, keep = [], [], []
        whole = not inst.chunked
        limit = inst.max_prompts
        prompts = inst.prompts
        for k, entry in enumerate(prompts):
            if budget <= 0 and (chunks or not whole) or limit is not None and len(chunks) >= limit:
                keep += prompts[k:]  # nothing more enters: the rest wait as they are
                break
            req, done = entry
            if whole and chunks and self.r.inputs[req] - done > budget:
                budget = 0  # arrival order: a prompt that does not fit holds back those behind it
            if (budget > 0 or whole and not chunks) and (inst.max_prompts is None or len(chunks) < inst.max_prompts):
                take = self.r.inputs[req] - done if whole else min(self.r.inputs[req] - done, budget)
                chunks.append((take, done))
                budget -= take
                entry[1] = done + take
            if entry[1] == self.r.inputs[req]:
                completing.append(req)
            else:
                keep.append(entry)
        inst.prompts = keep
        return chunks, completing

    def _start(self, inst: _Instance, index: int, t: float) -> None:
        if inst.role == "decode":
            started = self._start_decode(inst, t)
            if started is None:
                return
            t, seconds, batch = started
            if batch:
                t, seconds = self._decode_run(inst, index, t, seconds, batch, f"decode {batch}")
        else:
            self._admit(inst)
            batch = len(inst.running) if inst.role == "colocated" else 0
            chunks, completing = self._chunks(inst, inst.budget - batch)
            if not chunks and not batch:
                return
            sampled = len(completing)
            if batch:
                self._batch_sum += batch
                self._batch_steps += 1
                kv, local = inst.decode_keys(batch)
                seconds = inst.costs.mixed(chunks, batch, kv, sampled + batch, **local)
                inst.done.append(("step", None))
            else:
                seconds = inst.costs.prefill(chunks, sampled)
            inst.done.extend(("first", req) for req in completing)
            self._event(inst.name, f"prefill {len(chunks)}" + (f" + decode {batch}" if batch else ""), t, seconds)
            if batch and not chunks and not inst.prompts:
                t, seconds = self._decode_run(inst, index, t, seconds, batch, f"prefill 0 + decode {batch}")
        inst.free_at = t + seconds
        self._wake(index, inst.free_at)

    def _start_decode(self, inst: _Instance, t: float) -> tuple[float, float, int] | None:
        """A decode instance's iteration from ``t``: (start, seconds, sequences decoded), or None when idle."""
        seconds = 0.0
        if inst.left is not None:
            batch, padded = inst.left
            inst.left = None
            if inst.running:
                seconds += inst.costs.leave(batch, padded, len(inst.running), self._padded(inst))
        joining = []
        while inst.pending and inst.pending[0][0] <= t and len(inst.running) + len(joining) < inst.max_batch:
            req = inst.pending[0][1]
            need = inst.need(req)
            if inst.kv_used + need > inst.capacity:
                break
            inst.pending.popleft()
            inst.kv_used += need
            joining.append(req)
        if not inst.running and not joining:
            return (t, seconds, 0) if seconds else None
        if joining:
            before, padded = len(inst.running), self._padded(inst)
            for req in joining:
                self._join(inst, req)
            seconds += inst.costs.join(before, padded, tuple(self.r.inputs[q] for q in joining))
        batch = len(inst.running)
        self._batch_sum += batch
        self._batch_steps += 1
        kv, local = inst.decode_keys(batch)
        seconds += inst.costs.decode(batch, kv, self._padded(inst), **local)
        inst.done.append(("step", None))
        self._event(inst.name, f"decode {batch}" + (f" (+{len(joining)} joined)" if joining else ""), t, seconds)
        return t, seconds, batch

    def mean_decode_batch(self) -> float:
        """Sequences per decode iteration, averaged over the iterations that decoded."""
        return self._batch_sum / self._batch_steps if self._batch_steps else 0.0

    def _event(self, track: str, name: str, start: float, seconds: float) -> None:
        if not self.record:
            return
        if len(self.events) < EVENT_LIMIT:
            self.events.append(Event(track, name, start, seconds))
        else:
            self.dropped += 1


def percentiles(values: list[float], qs=(50, 90, 99)) -> tuple[float, ...]:
    """Percentiles of ``values`` by linear interpolation between order statistics (numpy's default)."""
    if not values:
        return tuple(float("nan") for _ in qs)
    data = sorted(values)
    out = []
    for q in qs:
        pos = (len(data) - 1) * q / 100
        lo = int(pos)
        hi = min(lo + 1, len(data) - 1)
        out.append(data[lo] + (data[hi] - data[lo]) * (pos - lo))
    return tuple(out)


__all__ = ["EVENT_LIMIT", "Costs", "Event", "Requests", "Simulation", "percentiles"]
