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
   bound order by :func:`~planner.bound_search.branch_and_bound` (the loop the what-if's
   search uses too); a candidate whose stages do not fit in their slots' memory is
   dropped; the search stops when the next bound (scaled to the objective) cannot
   beat the best plan found. On an exact space that is the optimum; on the large
   one, the optimum among the candidates (:data:`EVAL_LIMIT` evaluations at most).

The parts: :mod:`~planner.plan_search.problem` (what is searched for, the objective),
:mod:`~planner.plan_search.space` (the candidates and their bounds); collectives are
priced by :class:`~planner.comm.CommPricer`, each group shape once.
"""

from __future__ import annotations

import math
from typing import Sequence

from planner.bound_search import Outcome, SearchStats, branch_and_bound
from planner.layout import Layout
from planner.plan_search.problem import (DoesNotFit, MICROBATCH_COUNTS, OBJECTIVES, Problem, SlotRuns, kind_slots,
                                         microbatch_counts)
from planner.plan_search.space import (EXACT_LIMIT, MAX_CHUNKS, STAGE_TUPLE_LIMIT, Segment, candidates,
                                       chunk_counts, interleaved_bound, layout_of, lower_bound, segment_sequences,
                                       space_size)
from planner.progress import Progress
from planner.step import StepResult

EVAL_LIMIT = 400
"""Most step-model evaluations in one search (the bound usually stops far earlier)."""


def search(problem: Problem, *, progress: Progress | None = None) -> tuple[Layout, StepResult, SearchStats]:
    """The best layout of ``problem`` (see the module doc), its step-model result and the search's stats.
    ``progress``: :mod:`planner.progress` (None: nothing).

    Raises :class:`DoesNotFit` (a ValueError) when no layout fits in memory, naming the smallest per-slot
    capacity one needs.
    """
    stats = SearchStats()
    pool = candidates(problem, stats)
    rates: dict[tuple, float] = {}

    def rate_of(seq) -> float:
        key = tuple((s.kind, s.dp, s.stages, s.tp) for s in seq)
        if key not in rates:
            rates[key] = problem.rate(layout_of(problem, seq, range(1, sum(x.stages for x in seq)), 1,
                                                problem.schedules[0])) if problem.objective != "time" else 1.0
        return rates[key]

    scored = [(lb * rate_of(desc[0]), (desc, m)) for lb, desc, m in pool]
    scored = _homogeneous_first(scored)
    plain = tuple(x for x in problem.schedules if x != "interleaved")

    def evaluate(candidate):
        (seq, cuts, v), m = candidate
        for schedule in (plain if v == 1 else ("interleaved",)):
            layout = layout_of(problem, seq, cuts, m, schedule, v)
            result = problem.evaluate(layout)
            fits = all(s.memory.fits for s in result.stages)
            yield Outcome(problem.score(layout, result) if fits else math.inf, fits,
                          max(s.memory.total for s in result.stages), (layout, result),
                          (schedule, m, len(layout.stages), v))

    best = branch_and_bound(scored, evaluate, stats, max_evaluations=EVAL_LIMIT, max_seconds=problem.max_seconds,
                            progress=progress, what="planning")
    if best is None:
        need = stats.smallest_need or _smallest_need(problem, sorted(scored, key=lambda x: x[0]))
        stats.smallest_need = int(need)
        raise DoesNotFit(f"the model fits on no layout of slots {_listing(problem.slots)}: the best-fitting layout "
                         f"needs {_gib(need)} on a slot, more than its capacity; the smallest capacity that "
                         f"would be needed is {_gib(need)} per slot", int(need))
    layout, result = best.value
    return layout, result, stats


def _homogeneous_first(scored: list) -> list:
    """The pool with, for each chip kind, its lowest-bound candidate that uses that kind alone moved to the front
    (bound -inf). Bounds leave out communication, so on a large space the split layouts' bounds can all sit
    below a homogeneous layout's true time while their own true times are higher (a tied embedding all-reduced
    between kinds, say): without a homogeneous plan evaluated first the evaluation limit was reached on split
    layouts alone, and the plan came out slower than the homogeneous sub-rack its own baselines print."""
    best: dict[str, int] = {}
    for i, (bound, ((seq, _cuts, _v), _m)) in enumerate(scored):
        kinds = {segment.kind for segment in seq}
        if len(kinds) == 1:
            kind = kinds.pop()
            if kind not in best or bound < scored[best[kind]][0]:
                best[kind] = i
    first = set(best.values())
    return [(-math.inf, scored[i][1]) for i in sorted(first)] + [x for i, x in enumerate(scored) if i not in first]


def _smallest_need(problem: Problem, scored) -> float:
    """Nothing evaluated (a limit struck first): the least memory the first candidates by bound need."""
    need = math.inf
    for _, ((seq, cuts, v), m) in scored[:EVAL_LIMIT]:
        plain = next((x for x in problem.schedules if x != "interleaved"), "1f1b")
        result = problem.evaluate(layout_of(problem, seq, cuts, m, "interleaved" if v > 1 else plain, v))
        need = min(need, max(s.memory.total for s in result.stages))
    return need


def _listing(slots: Sequence[int]) -> str:
    if len(slots) > 64:
        return f"{slots[0]}..{slots[-1]} ({len(slots):,} slots)"
    return str(list(slots))


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


__all__ = ["DoesNotFit", "EVAL_LIMIT", "EXACT_LIMIT", "MAX_CHUNKS", "MICROBATCH_COUNTS", "OBJECTIVES", "Problem",
           "STAGE_TUPLE_LIMIT", "SearchStats", "Segment", "SlotRuns", "candidates", "chunk_counts", "interleaved_bound",
           "kind_slots", "layout_of", "lower_bound", "microbatch_counts", "search", "segment_sequences", "space_size"]
