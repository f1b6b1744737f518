"""The plan search's space: segment sequences, chunks, cut points and microbatch counts, each candidate with a
lower bound on its step time (see :mod:`planner.plan_search`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from planner.bound_search import SearchStats
from planner.layout import Layout
from planner.parallel import divisors
from planner.plan_search.problem import Problem
from planner.schedule import interleaved_bound, lower_bound
from planner.stage import Stage

EXACT_LIMIT = 200_000
"""Most candidates enumerated one partition at a time; larger spaces use bottleneck partitions."""

SLACK = (1.0, 1.02, 1.05, 1.1, 1.2, 1.35)
"""Bottleneck targets tried above the smallest feasible one (large spaces)."""

MAX_CHUNKS = 4
"""Most chunks per stage an interleaved layout is searched with (Megatron's virtual pipeline sizes are small:
each chunk more adds a stage boundary every microbatch crosses)."""

STAGE_TUPLE_LIMIT = 65_536
"""A stage of at most this many slots lists them (a tuple); a larger one (a plan on millions of chips) keeps the
``range`` its kind's slots give."""


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


def segment_sequences(kinds: dict[str, list[int]], rows: int, limit_stages: int,
                      tp_options: Sequence[int] = (1,)) -> Iterable[tuple[Segment, ...]]:
    """Every ordered choice of kinds with, per kind, (tensor-parallel degree, replicas per stage, stages) fitting
    its slots."""
    options: dict[str, list[Segment]] = {}
    for kind, slots in kinds.items():
        opts = []
        for tp in tp_options:
            for dp in divisors(rows, len(slots) // tp):
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


def layout_of(problem: Problem, seq: Sequence[Segment], cuts: Sequence[int], m: int, schedule: str,
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
            part = problem.kinds[seg.kind][used[seg.kind]:used[seg.kind] + seg.width]
            slots = tuple(part) if len(part) <= STAGE_TUPLE_LIMIT else part
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


__all__ = ["EXACT_LIMIT", "LARGE_SEQUENCES", "MAX_CHUNKS", "SLACK", "STAGE_TUPLE_LIMIT", "Segment", "candidates",
           "chunk_counts", "interleaved_bound", "layout_of", "lower_bound", "segment_sequences", "space_size"]
