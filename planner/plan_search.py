"""The plan search: which blocks run on which slots, how many microbatches, which schedule.

The space (what a plan may be):

* the allowed slots grouped by chip kind, each kind's slots in rack order (so that
  consecutive stages of a kind sit in the same domain, on its fast links);
* a pipeline is an ordered sequence of kind *segments*; a segment of kind ``k`` is
  ``p_k`` consecutive stages, each ``dp_k`` data-parallel replicas of ``tp_k``
  slots (a kind may be left out, and need not use all its slots). Stages of
  different kinds may have different replica counts (asymmetric data parallelism);
  ``tp_k > 1`` splits the blocks' column/row pairs of linear layers over the
  replica's slots (:mod:`~interop.live.tensor_parallel`; the degrees every such
  block supports, ``blocks.tp_degrees()``), the step model pricing the smaller
  shards against the all_reduces and broadcasts they add;
* every stage runs a contiguous range of blocks (sizes uneven);
* ``m`` microbatches dividing the global batch (each stage's replicas splitting a
  microbatch evenly), and the schedule: 1F1B or GPipe, or interleaved 1F1B (Megatron's
  virtual pipeline): every stage runs ``v`` chunks, the blocks being cut into ``p * v``
  contiguous virtual stages (chunk ``c`` of stage ``s`` is virtual stage ``c * p + s``),
  ``m`` a multiple of ``p``; the bubble shrinks by ``v``, each microbatch crosses
  ``v`` times more stage boundaries, and the step model weighs the two.

The search (branch and bound over that space):

1. Per (block, kind, replica rows) the step model's block cost
   (:func:`~planner.block_cost`) is computed once; prefix sums give any
   stage's forward ``f`` and backward ``b`` time in O(1).
2. Candidates: for small spaces every partition of the blocks over every segment
   sequence (exact); past :data:`EXACT_LIMIT` candidates, per segment sequence the
   partitions a bottleneck search finds (for a target stage time ``T``, greedily
   give each stage the most blocks that keep it under ``T``; ``T`` from the
   smallest feasible one upward on a 2 % grid): dynamic programming's
   answer for the min-max partition, and its slack variants.
3. Each candidate gets a lower bound on its step time that holds for GPipe and
   1F1B whatever the communication: stage ``j`` cannot start before the first
   microbatch's forward reached it, must run ``m`` forwards and backwards, and the
   first microbatch's backward must then cross every stage before it:
   ``max_j (sum_{s<j} f_s + m (f_j + b_j) + sum_{s<j} b_s)``. Interleaved: the same
   with stage ``j``'s work summed over its chunks and the fill and drain over the
   first chunk's virtual stages before it (a stage's last action is a backward of
   its first chunk).
4. Candidates are evaluated with the step model (:func:`~planner.step_model`,
   exact: communication, data-parallel reduction, optimizer, memory) in increasing
   bound order; a candidate whose stages do not fit in their slots' memory is
   dropped; the search stops when the next bound (scaled to the objective) cannot
   beat the best plan found. On an exact space that is the optimum; on the large
   one, the optimum among the candidates (:data:`EVAL_LIMIT` evaluations at most).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from devices.chip_set import DEFAULT_BASIS, ChipSet, check_basis
from planner.block_pricing import Execution, block_cost
from planner.comm import CommPricer
from planner.layout import Layout
from planner.profile import Shard
from planner.stage import Stage
from planner.step import StepConfig, StepResult, step_model

OBJECTIVES = ("time", "cost", "energy")
"""What a plan minimises: modelled seconds per step, dollars per step, joules per step."""

EXACT_LIMIT = 200_000
"""Most candidates enumerated one partition at a time; larger spaces use bottleneck partitions."""

EVAL_LIMIT = 400
"""Most step-model evaluations in one search (the bound usually stops far earlier)."""

SLACK = (1.0, 1.02, 1.05, 1.1, 1.2, 1.35)
"""Bottleneck targets tried above the smallest feasible one (large spaces)."""

MAX_CHUNKS = 4
"""Most chunks per stage an interleaved layout is searched with (Megatron's virtual pipeline sizes are small:
each chunk more adds a stage boundary every microbatch crosses)."""


class DoesNotFit(ValueError):
    """No layout of the allowed slots holds the model in memory; the message names the smallest per-slot
    capacity that would be needed."""

    def __init__(self, message: str, need: int):
        super().__init__(message)
        self.need = need


@dataclass(frozen=True, slots=True)
class Segment:
    """``stages`` consecutive stages of one kind, each ``dp`` replicas of ``tp`` slots."""

    kind: str
    dp: int
    stages: int
    tp: int = 1

    @property
    def width(self) -> int:
        """Slots per stage."""
        return self.dp * self.tp


@dataclass(slots=True)
class SearchStats:
    """What a search looked at (reported with the plan)."""

    candidates: int = 0
    """Layouts bounded."""
    evaluated: int = 0
    """Layouts run through the step model."""
    rejected_memory: int = 0
    """Evaluated layouts whose stages did not fit in memory."""
    exact: bool = True
    """True when every partition of the space was a candidate (the result is the optimum)."""
    seconds: float = 0.0
    """Wall time of the search (measured)."""
    smallest_need: int = 0
    """Over the evaluated layouts, the least per-slot memory any of them needed (for the error message)."""


class GroupPricer(CommPricer):
    """The step model's :class:`~planner.CommPricer`, pricing a group once per shape.

    A search prices thousands of stage groups that differ only by which slots they hold; on one rack two
    groups with the same number of slots of each kind in each domain cost the same (every slot of a kind in a
    domain has the same links), so each such shape is priced once, by its first group.
    """

    def __init__(self, rack) -> None:
        super().__init__(rack)
        self._shapes: dict[tuple, tuple[int, ...]] = {}
        self._kinds = rack

    def _canonical(self, slots: Sequence[int]) -> Sequence[int]:
        if isinstance(slots, range) or len(slots) < 2:
            return slots
        counts: dict[tuple[str, str], int] = {}
        for s in slots:
            key = (self.topology.domain_of(s)[1].name, self._kinds.slot(s).kind)
            counts[key] = counts.get(key, 0) + 1
        return self._shapes.setdefault(tuple(sorted(counts.items())), tuple(slots))

    def seconds(self, op: str, nbytes: float, slots: Sequence[int]) -> float:
        return super().seconds(op, nbytes, self._canonical(slots))


@dataclass(slots=True)
class Problem:
    """One search: the blocks, the rack and what the step is."""

    blocks: object
    spec: object
    slots: tuple[int, ...]
    global_batch: int
    seq_len: int
    objective: str = "time"
    price_basis: str = DEFAULT_BASIS
    """The price basis of the ``cost`` objective (:data:`devices.PRICE_BASES`)."""
    schedules: tuple[str, ...] = ("1f1b", "gpipe")
    microbatches: tuple[int, ...] = ()
    optimizer: str = "adamw"
    recompute: str = "none"
    calibrated: bool = False
    master_weights: bool = False
    state_bytes: int | None = None
    grad_dtype: str = "float32"
    max_seconds: float | None = None
    pricer: CommPricer | None = None
    kinds: dict = field(default_factory=dict)
    """Kind -> its allowed slots in rack order (filled in from ``slots``)."""
    tp_options: tuple[int, ...] = ()
    """Tensor-parallel degrees searched (filled in: 1 and the blocks' ``tp_degrees()``)."""
    _costs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        check_basis(self.price_basis)
        if self.pricer is None:
            self.pricer = GroupPricer(self.spec)
        kinds: dict[str, list[int]] = {}
        for s in self.slots:
            kinds.setdefault(self.spec.slot(s).kind, []).append(s)
        self.kinds = kinds
        if not self.tp_options:
            degrees = getattr(self.blocks, "tp_degrees", None)
            self.tp_options = (1,) + tuple(degrees() if degrees is not None else ())
        if not self.microbatches:
            self.microbatches = tuple(m for m in range(1, self.global_batch + 1) if self.global_batch % m == 0)

    # -- costs ------------------------------------------------------------------------

    def times(self, kind: str, rows: int, tp: int = 1) -> tuple[list[float], list[float]]:
        """Prefix sums of every block's forward and backward compute seconds on ``kind`` for ``rows`` rows cut
        over ``tp`` tensor-parallel slots."""
        key = (kind, rows, tp)
        hit = self._costs.get(key)
        if hit is None:
            execution = Execution(calibrated=self.calibrated)
            f, b = [0.0], [0.0]
            for i in range(len(self.blocks)):
                c = block_cost(self.blocks.profile(i, self._shard(rows, tp)), kind, execution)
                f.append(f[-1] + c.forward)
                b.append(b[-1] + c.backward)
            hit = self._costs[key] = (f, b)
        return hit

    def _shard(self, rows: int, tp: int = 1) -> Shard:
        return Shard(microbatch=rows, seq_len=self.seq_len, tp=tp, sequence_parallel=False)

    def config(self, microbatches: int, schedule: str, record: bool = False) -> StepConfig:
        # A live plan's tensor-parallel all_reduces run between the GEMMs, not overlapped with them.
        return StepConfig(global_batch=self.global_batch, seq_len=self.seq_len, microbatches=microbatches,
                          schedule=schedule, recompute=self.recompute, optimizer=self.optimizer, zero=0,
                          sequence_parallel=False, tp_comm_overlap=False, grad_dtype=self.grad_dtype,
                          calibrated=self.calibrated, master_weights=self.master_weights,
                          state_bytes=self.state_bytes, record=record)

    def evaluate(self, layout: Layout, record: bool = False) -> StepResult:
        return step_model(self.blocks, layout.stages, self.spec,
                          self.config(layout.microbatches, layout.schedule, record), pricer=self.pricer)

    # -- objective ----------------------------------------------------------------------

    def rate(self, layout: Layout) -> float:
        """Objective units per modelled second of the layout (1 for time)."""
        if self.objective == "time":
            return 1.0
        chips = ChipSet.of((st.kind, len(st.slots)) for st in layout.stages)
        rate = chips.price(self.price_basis) if self.objective == "cost" else chips.power()
        if rate.value is None:
            raise ValueError(f"objective: {self.objective!r} needs {'a price' if self.objective == 'cost' else 'power'} "
                             f"for every kind: {rate.reason}")
        return rate.value / (3600.0 if self.objective == "cost" else 1.0)

    def score(self, layout: Layout, result: StepResult) -> float:
        return result.seconds * self.rate(layout)


def segment_sequences(kinds: dict[str, list[int]], rows: int, limit_stages: int,
                      tp_options: Sequence[int] = (1,)) -> Iterable[tuple[Segment, ...]]:
    """Every ordered choice of kinds with, per kind, (tensor-parallel degree, replicas per stage, stages) fitting
    its slots."""
    options: dict[str, list[Segment]] = {}
    for kind, slots in kinds.items():
        opts = []
        for tp in tp_options:
            for dp in range(1, len(slots) // tp + 1):
                if rows % dp:
                    continue
                for p in range(1, min(len(slots) // (dp * tp), limit_stages) + 1):
                    opts.append(Segment(kind, dp, p, tp))
        options[kind] = opts
    names = list(kinds)
    for r in range(1, len(names) + 1):
        for order in itertools.permutations(names, r):
            for combo in itertools.product(*(options[k] for k in order)):
                if sum(s.stages for s in combo) <= limit_stages:
                    yield combo


def _compositions(n: int, parts: int) -> Iterable[tuple[int, ...]]:
    """Cut points 0 < c_1 < ... < c_{parts-1} < n."""
    return itertools.combinations(range(1, n), parts - 1)


def _stage_times(problem: Problem, seq: Sequence[Segment], cuts: Sequence[int], rows: int):
    bounds = [0, *cuts, len(problem.blocks)]
    f, b = [], []
    j = 0
    for seg in seq:
        pf, pb = problem.times(seg.kind, rows // seg.dp, seg.tp)
        for _ in range(seg.stages):
            lo, hi = bounds[j], bounds[j + 1]
            f.append(pf[hi] - pf[lo])
            b.append(pb[hi] - pb[lo])
            j += 1
    return f, b


def chunk_counts(problem: Problem, stages: int, m: int) -> list[int]:
    """The chunks per stage the search tries for ``stages`` stages and ``m`` microbatches: 1 (GPipe / 1F1B) when
    a plain schedule is allowed, 2..:data:`MAX_CHUNKS` (interleaved) when that schedule is allowed, the pipeline
    has two stages or more, ``m`` is a multiple of them and every virtual stage gets a block."""
    out = [1] if any(x != "interleaved" for x in problem.schedules) else []
    if "interleaved" in problem.schedules and stages > 1 and m % stages == 0:
        out += [v for v in range(2, MAX_CHUNKS + 1) if stages * v <= len(problem.blocks)]
    return out


def interleaved_bound(f: Sequence[float], b: Sequence[float], m: int, stages: int) -> float:
    """A lower bound on an interleaved step: ``f``, ``b`` per virtual stage (chunk ``c`` of stage ``s`` at
    ``c * stages + s``)."""
    v = len(f) // stages
    best = 0.0
    before_f = before_b = 0.0
    for s in range(stages):
        work = sum(f[c * stages + s] + b[c * stages + s] for c in range(v))
        best = max(best, before_f + m * work + before_b)
        before_f += f[s]
        before_b += b[s]
    return best


def lower_bound(f: Sequence[float], b: Sequence[float], m: int) -> float:
    """A lower bound on a GPipe / 1F1B step with stage times ``f``, ``b`` and ``m`` microbatches."""
    best = 0.0
    before_f = before_b = 0.0
    for fj, bj in zip(f, b):
        best = max(best, before_f + m * (fj + bj) + before_b)
        before_f += fj
        before_b += bj
    return best


def _greedy_cuts(problem: Problem, seq: Sequence[Segment], rows: int, target: float) -> list[int] | None:
    """Give each stage the most blocks that keep its forward+backward under ``target``; None if the blocks
    do not all fit."""
    n = len(problem.blocks)
    cuts = []
    start = 0
    stages = [seg for seg in seq for _ in range(seg.stages)]
    for k, seg in enumerate(stages):
        pf, pb = problem.times(seg.kind, rows // seg.dp, seg.tp)
        left = len(stages) - k - 1
        end = _bisect_end(pf, pb, start, n - left, target)
        if end == start:
            return None
        if k < len(stages) - 1:
            cuts.append(end)
        elif end != n:
            return None
        start = end
    return cuts


def _bottleneck_cuts(problem: Problem, seq: Sequence[Segment], rows: int) -> list[list[int]]:
    stages = [seg for seg in seq for _ in range(seg.stages)]
    n = len(problem.blocks)
    if len(stages) > n:
        return []
    per_block = []
    for seg in stages:
        pf, pb = problem.times(seg.kind, rows // seg.dp, seg.tp)
        per_block.append(max(pf[i + 1] + pb[i + 1] - pf[i] - pb[i] for i in range(n)))
    lo = max(min(per_block), 0.0)
    pf, pb = problem.times(stages[0].kind, rows // stages[0].dp, stages[0].tp)
    hi = (pf[n] + pb[n]) * 4 + 1e-9
    if _greedy_cuts(problem, seq, rows, hi) is None:
        return []
    for _ in range(24):
        mid = (lo + hi) / 2
        if _greedy_cuts(problem, seq, rows, mid) is None:
            lo = mid
        else:
            hi = mid
    out = []
    for slack in SLACK:
        cuts = _greedy_cuts(problem, seq, rows, hi * slack)
        if cuts is not None and cuts not in out:
            out.append(cuts)
    return out


def _layout(problem: Problem, seq: Sequence[Segment], cuts: Sequence[int], m: int, schedule: str,
            chunks: int = 1) -> Layout:
    """The layout of a segment sequence cut at ``cuts`` (``len(stages) * chunks - 1`` cut points: virtual stage
    ``c * p + s`` is chunk ``c`` of stage ``s``)."""
    bounds = [0, *cuts, len(problem.blocks)]
    p = sum(seg.stages for seg in seq)
    stages = []
    used = {k: 0 for k in problem.kinds}
    j = 0
    for seg in seq:
        for _ in range(seg.stages):
            # Replica-major, tensor rank minor: a replica's tensor-parallel slots are consecutive slots of the kind
            # (one domain, its fast links).
            slots = tuple(problem.kinds[seg.kind][used[seg.kind]:used[seg.kind] + seg.width])
            used[seg.kind] += seg.width
            ranges = tuple(range(bounds[c * p + j], bounds[c * p + j + 1]) for c in range(chunks))
            stages.append(Stage(chunks=ranges, kind=seg.kind, slots=slots, tp=seg.tp))
            j += 1
    return Layout(tuple(stages), schedule, m, problem.global_batch)


def space_size(problem: Problem) -> int:
    """How many (segment sequence, chunks, partition, microbatches) candidates the exact enumeration would
    bound."""
    n = len(problem.blocks)
    total = 0
    for m in problem.microbatches:
        rows = problem.global_batch // m
        for seq in segment_sequences(problem.kinds, rows, n, problem.tp_options):
            p = sum(s.stages for s in seq)
            for v in chunk_counts(problem, p, m):
                total += math.comb(n - 1, p * v - 1)
            if total > EXACT_LIMIT:
                return total
    return total


def candidates(problem: Problem, stats: SearchStats) -> list[tuple[float, tuple, int]]:
    """(lower bound, (segment sequence, cuts, chunks per stage), microbatches) of every candidate, unsorted."""
    n = len(problem.blocks)
    exact = space_size(problem) <= EXACT_LIMIT
    stats.exact = exact
    out = []
    for m in problem.microbatches:
        rows = problem.global_batch // m
        sequences = (segment_sequences(problem.kinds, rows, n, problem.tp_options) if exact
                     else _large_sequences(problem, rows, m))
        for seq in sequences:
            p = sum(s.stages for s in seq)
            for v in chunk_counts(problem, p, m):
                virtual = tuple(seq) * v  # the virtual stages in pipeline order: chunk after chunk
                cut_sets = _compositions(n, p * v) if exact else _bottleneck_cuts(problem, virtual, rows)
                for cuts in cut_sets:
                    f, b = _stage_times(problem, virtual, cuts, rows)
                    bound = lower_bound(f, b, m) if v == 1 else interleaved_bound(f, b, m, p)
                    out.append((bound, (seq, tuple(cuts), v), m))
    stats.candidates = len(out)
    return out


LARGE_SEQUENCES = 24
"""Large spaces: segment sequences kept per microbatch count after the relaxed ranking."""


def _large_sequences(problem: Problem, rows: int, m: int) -> list[tuple[Segment, ...]]:
    """Segment sequences of a large rack: each kind used whole or not at all, replicas per stage a power of
    two, ranked by a relaxed step time (blocks divided continuously so every stage takes the same time)."""
    n = len(problem.blocks)
    options: dict[str, list[Segment]] = {}
    for kind, slots in problem.kinds.items():
        opts = []
        for tp in problem.tp_options:
            if len(slots) % tp:
                continue
            groups = len(slots) // tp
            dp = 1
            while dp <= groups:
                if rows % dp == 0 and groups % dp == 0:
                    opts.append(Segment(kind, dp, groups // dp, tp))
                dp *= 2
            if groups not in (o.dp for o in opts if o.tp == tp) and rows % groups == 0:
                opts.append(Segment(kind, groups, 1, tp))
        options[kind] = opts
    ranked = []
    names = list(problem.kinds)
    for r in range(1, len(names) + 1):
        for order in itertools.permutations(names, r):
            for combo in itertools.product(*(options[k] for k in order)):
                stages = sum(seg.stages for seg in combo)
                if stages > n:
                    continue
                # per stage of each segment: seconds for all n blocks; a stage doing a share x of the blocks takes x
                # times that. Equal stage times T: shares T / t_k summing to 1 over the stages.
                whole = []
                for seg in combo:
                    pf, pb = problem.times(seg.kind, rows // seg.dp, seg.tp)
                    whole.append(pf[n] + pb[n])
                T = 1.0 / sum(seg.stages / t for seg, t in zip(combo, whole))
                S = T * stages
                ranked.append((S + (m - 1) * T, combo))
    ranked.sort(key=lambda x: x[0])
    return [combo for _, combo in ranked[:LARGE_SEQUENCES]]


def _bisect_end(prefix_f, prefix_b, start: int, limit: int, target: float) -> int:
    """The largest end <= limit with stage time (start, end) <= target (start if none)."""
    base = prefix_f[start] + prefix_b[start]
    lo, hi = start, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if prefix_f[mid] + prefix_b[mid] - base <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


def search(problem: Problem, *, progress=None) -> tuple[Layout, StepResult, SearchStats]:
    """The best layout of ``problem`` (see the module doc), its step-model result and the search's stats.

    Raises ValueError when no layout fits in memory, naming the smallest per-slot capacity one needs.
    """
    started = time.perf_counter()
    stats = SearchStats()
    pool = candidates(problem, stats)
    rates: dict[tuple, float] = {}

    def rate_of(seq) -> float:
        key = tuple((s.kind, s.dp, s.stages, s.tp) for s in seq)
        if key not in rates:
            rates[key] = problem.rate(_layout(problem, seq, range(1, sum(x.stages for x in seq)), 1,
                                              problem.schedules[0])) if problem.objective != "time" else 1.0
        return rates[key]

    scored = sorted(((lb * rate_of(desc[0]), lb, desc, m) for lb, desc, m in pool), key=lambda x: x[0])
    best: tuple[float, Layout, StepResult] | None = None
    need = math.inf
    plain = tuple(x for x in problem.schedules if x != "interleaved")
    for bound, _, (seq, cuts, v), m in scored:
        if best is not None and bound >= best[0]:
            break
        if stats.evaluated >= EVAL_LIMIT or (problem.max_seconds is not None
                                             and time.perf_counter() - started > problem.max_seconds):
            stats.exact = False
            break
        for schedule in (plain if v == 1 else ("interleaved",)):
            layout = _layout(problem, seq, cuts, m, schedule, v)
            result = problem.evaluate(layout)
            stats.evaluated += 1
            if progress is not None:
                progress(stats)
            if not all(s.memory.fits for s in result.stages):
                stats.rejected_memory += 1
                need = min(need, max(s.memory.total for s in result.stages))
                continue
            score = problem.score(layout, result)
            if best is None or score < best[0]:
                best = (score, layout, result)
    stats.seconds = time.perf_counter() - started
    if best is None:
        if need == math.inf:  # nothing evaluated fitted, and the bound cut nothing: widen once over all
            need = _smallest_need(problem, scored)
        stats.smallest_need = int(need)
        raise DoesNotFit(f"the model fits on no layout of slots {list(problem.slots)}: the best-fitting layout "
                          f"needs {_gib(need)} on a slot, more than its capacity; the smallest capacity that "
                          f"would be needed is {_gib(need)} per slot", int(need))
    return best[1], best[2], stats


def _smallest_need(problem: Problem, scored) -> float:
    need = math.inf
    for _, _, (seq, cuts, v), m in scored[:EVAL_LIMIT]:
        plain = next((x for x in problem.schedules if x != "interleaved"), "1f1b")
        result = problem.evaluate(_layout(problem, seq, cuts, m, "interleaved" if v > 1 else plain, v))
        need = min(need, max(s.memory.total for s in result.stages))
    return need


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


__all__ = ["DoesNotFit", "EVAL_LIMIT", "EXACT_LIMIT", "MAX_CHUNKS", "OBJECTIVES", "Problem", "SearchStats", "Segment",
           "candidates", "chunk_counts", "interleaved_bound", "lower_bound", "search", "segment_sequences",
           "space_size"]
