"""Branch and bound, once for every search of the planner: bound, sort, evaluate, prune.

Both searches of the planner walk a space whose members can be bounded from below cheaply (compute alone,
or stage times without communication) and evaluated exactly only by the step model: the what-if's
homogeneous configurations (:func:`planner.search`) and the live plan's layouts
(:func:`planner.plan_search.search`). :func:`branch_and_bound` evaluates candidates in order of their bound
and stops at the first bound that cannot beat the best fitting score found: the result is the one an
exhaustive evaluation would give, unless a limit (evaluations, seconds) stopped it first, which
:attr:`SearchStats.exact` then says. :class:`SearchStats` is what either search reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Sequence, TypeVar

from planner.progress import Progress

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """One evaluated candidate (a candidate may yield several, e.g. one per pipeline schedule)."""

    score: float
    """What the search minimises (modelled seconds, dollars or joules per step)."""
    fits: bool
    """Every stage's modelled memory fits its chips."""
    need: int
    """The most modelled memory any chip of the candidate needs (bytes)."""
    value: T
    """What the caller keeps for the best (an estimate, a (layout, result) pair)."""
    label: Any = None
    """How the candidate is listed in :attr:`SearchStats.ranking` and :attr:`SearchStats.rejected`."""


@dataclass(slots=True)
class SearchStats:
    """What a search looked at and found (every figure of a candidate modelled; :attr:`seconds` measured)."""

    best: Any = field(default=None, repr=False)
    """The fastest (lowest scoring) fitting candidate's value, or None."""
    candidates: int = 0
    """Candidates the search covered."""
    skipped: int = 0
    """Candidates dropped before their bound: weights and optimizer state alone overflow a chip."""
    evaluated: int = 0
    """Candidates run through the step model."""
    pruned: int = 0
    """Candidates never evaluated: their bound was no better than a fitting score already found."""
    rejected_memory: int = 0
    """Evaluated candidates whose memory did not fit."""
    rejected: list[tuple[Any, str]] = field(default_factory=list)
    """(candidate, reason) of candidates the step model refused."""
    ranking: list[tuple[float, bool, Any]] = field(default_factory=list, repr=False)
    """(score, fits, candidate) of every evaluated candidate, best first."""
    smallest_need: int = 0
    """The least memory per chip any evaluated candidate needed (bytes; 0 when none was evaluated)."""
    capacity: int = 0
    """The smallest chip memory of the rack (bytes), when the search knows it."""
    exact: bool = True
    """False when a limit (evaluations, seconds) stopped the search before its bound did, or when the space
    was cut to a subset before the bound (the result is then the best of what was evaluated)."""
    seconds: float = 0.0
    """Wall time of the search (measured)."""

    def message(self) -> str:
        """Why nothing was found ("" when something was)."""
        if self.best is not None:
            return ""
        if not self.evaluated:
            reasons = "; ".join(sorted({r for _, r in self.rejected})[:3])
            return (f"search: no configuration of this model fits the rack's chips ({self.skipped} skipped for "
                    f"weights and optimizer state alone){': ' + reasons if reasons else ''}")
        return (f"search: none of {self.evaluated} configurations fits: the least memory any needs is "
                f"{self.smallest_need / 1e9:,.1f} GB per chip, the chips have {self.capacity / 1e9:,.1f} GB")


def branch_and_bound(pool: Sequence[tuple[float, T]], evaluate: Callable[[T], Iterable[Outcome]],
                     stats: SearchStats, *, max_evaluations: int | None = None,
                     max_seconds: float | None = None, progress: Progress | None = None,
                     what: str = "searching") -> Outcome | None:
    """The best fitting :class:`Outcome` of ``pool`` (``(lower bound of the score, candidate)``), or None.

    Candidates run through ``evaluate`` (a ValueError rejects the candidate, with its message) in order of
    their bound; the walk stops at the first bound no better than the best fitting score (the rest are
    ``pruned``), or at ``max_evaluations`` / ``max_seconds`` (then ``stats.exact`` is False). ``stats``
    collects what was looked at; ``progress`` (:mod:`planner.progress`) hears of every candidate."""
    started = time.perf_counter()
    ordered = sorted(pool, key=lambda item: item[0])
    total = len(ordered)
    report = progress or (lambda done, total, what: None)
    best: Outcome | None = None
    done = 0
    for bound, candidate in ordered:
        if best is not None and bound >= best.score:
            stats.pruned += total - done
            break
        if (max_evaluations is not None and stats.evaluated >= max_evaluations) or (
                max_seconds is not None and time.perf_counter() - started > max_seconds):
            stats.exact = False
            break
        report(done, total, what if best is None else f"best {best.score:.4g} (modelled)")
        try:
            outcomes = list(evaluate(candidate))
        except ValueError as error:
            stats.rejected.append((candidate, str(error)))
            outcomes = []
        for out in outcomes:
            stats.evaluated += 1
            stats.smallest_need = out.need if not stats.smallest_need else min(stats.smallest_need, out.need)
            stats.ranking.append((out.score, out.fits, out.label))
            if not out.fits:
                stats.rejected_memory += 1
            elif best is None or out.score < best.score:
                best = out
        done += 1
    report(total, total, what)
    stats.ranking.sort(key=lambda r: r[0])
    stats.best = best.value if best is not None else None
    stats.seconds += time.perf_counter() - started
    return best


__all__ = ["Outcome", "SearchStats", "branch_and_bound"]
