"""One branch-and-bound loop and one collective pricer for both searches of the planner."""

from __future__ import annotations

import random

import pytest

import collectives
import devices
from planner.bound_search import Outcome, SearchStats, branch_and_bound
from planner.comm import CommPricer, pricer_for


def _pool(seed: int, n: int = 60):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        bound = rng.uniform(1, 10)
        out.append((bound, (i, bound + rng.uniform(0, 5), rng.random() < 0.7, rng.random() < 0.1)))
    return out


def _evaluate(candidate):
    i, score, fits, refuse = candidate
    if refuse:
        raise ValueError(f"candidate {i} refused")
    yield Outcome(score, fits, 1000 + i, i, f"c{i}")


@pytest.mark.parametrize("seed", range(8))
def test_branch_and_bound_finds_what_the_exhaustive_walk_finds(seed):
    pool = _pool(seed)
    stats = SearchStats()
    best = branch_and_bound(pool, _evaluate, stats)
    fitting = [(score, i) for _, (i, score, fits, refuse) in pool if fits and not refuse]
    assert (best.score, best.value) == min(fitting) and stats.best == best.value
    # Every candidate is accounted for: evaluated, refused or pruned by its bound.
    assert stats.evaluated + len(stats.rejected) + stats.pruned == len(pool) and stats.exact
    assert [r[0] for r in stats.ranking] == sorted(r[0] for r in stats.ranking)
    assert stats.smallest_need == min(1000 + i for _, (i, _, _, refuse) in pool
                                      if not refuse and any(r[2] == f"c{i}" for r in stats.ranking))
    assert all("refused" in why for _, why in stats.rejected)


def test_limits_make_the_search_inexact():
    stats = SearchStats()
    branch_and_bound(_pool(3), _evaluate, stats, max_evaluations=2)
    assert stats.evaluated == 2 and not stats.exact
    stats = SearchStats()
    assert branch_and_bound([], _evaluate, stats) is None and stats.best is None and stats.message()


def test_both_searches_report_one_stats_type():
    from planner import plan_search, search

    assert plan_search.SearchStats is SearchStats
    assert search.__module__ == "planner.search"
    import importlib

    assert importlib.import_module("planner.search").SearchStats is SearchStats


def test_group_key_prices_a_shape_once_and_rightly():
    # Groups that sit alike (translated, or in other domains of the same model) share a table; their direct
    # estimates agree. Groups laid differently (crossing domains in another order) do not share.
    spec = devices.parse_rack("h100-node*4")
    pricer = CommPricer(spec)
    alike = [(0, 1, 2, 3), (8, 9, 10, 11), (4, 5, 6, 7), (16, 19, 17, 18)]
    keys = {pricer.group_key(g) for g in alike}
    assert len(keys) == 1
    direct = {collectives.estimate(spec, "all_reduce", 1 << 20, slots=g).seconds for g in alike}
    assert len(direct) == 1 and pricer.seconds("all_reduce", 1 << 20, alike[3]) == direct.pop()
    crossing = [(0, 8, 1, 9), (0, 1, 8, 9)]
    assert pricer.group_key(crossing[0]) != pricer.group_key(crossing[1])
    assert pricer.group_key((0, 1)) != pricer.group_key((7, 8))  # inside a domain vs across two
    for g in crossing + [(0, 8), (3, 20, 27)]:
        assert pricer.seconds("all_reduce", 1 << 20, g) == pytest.approx(
            collectives.estimate(spec, "all_reduce", 1 << 20, slots=g).seconds, rel=0.05)


def test_equal_racks_share_one_pricer():
    a, b = devices.parse_rack("h100-node*4"), devices.parse_rack("h100-node*4")
    assert a is not b and pricer_for(a) is pricer_for(b)
    assert pricer_for(devices.parse_rack("h100-node*5")) is not pricer_for(a)
