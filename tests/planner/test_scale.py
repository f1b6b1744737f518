"""Costs that do not grow with counts (issue 17, section 2): what is described in a few numbers is priced in a few
steps, and gives what the step-by-step computation gives wherever that one finishes.

Each fast path is checked against the slow computation it replaces, written out here, on sizes where the slow
one finishes; the huge sizes are checked to return a result that scales as it must (no timing asserted here:
benchmarks/bench_scale.py measures time and memory).
"""

from __future__ import annotations

import itertools
import math

import pytest

import devices
from planner import Stage, StepConfig, step_model, whatif
from planner.estimate import _mixed_microbatches
from planner.parallel import divisors, largest_divisor
from planner.schedule import actions
from planner.step import memory as step_memory

pytest.importorskip("transformers", reason="what-if models are built from transformers configs")


@pytest.fixture(scope="module")
def small():
    from transformers import LlamaConfig

    from planner.decoder_blocks import DecoderBlocks

    return DecoderBlocks(LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
                                     num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False),
                         name="scale-llama")


def test_divisors_from_factors_equal_trial_division():
    for n in list(range(1, 400)) + [720720, 2**20, 3**13, 999983, 10**6 + 3]:
        every = [d for d in range(1, n + 1) if n % d == 0] if n < 10**6 else None
        if every is not None:
            assert divisors(n) == every
            for limit in (1, 7, n // 3, n):
                assert largest_divisor(n, limit) == max((d for d in every if d <= limit), default=0)
    assert len(divisors(10**12)) == 13 * 13 and divisors(10**12, 10) == [1, 2, 4, 5, 8, 10]
    assert largest_divisor(999983, 10**5) == 1 and largest_divisor(12, 0) == 0


def _frontier_by_walk(schedule, p, v, m, s):
    # The walk over every action that live_frontier replaced (kept here as the reference).
    live, states = [0] * v, set()
    for phase, c, _ in actions(schedule, p, v, m)[s]:
        live[c] += 1 if phase == 0 else -1
        states.add(tuple(live))
    kept = []
    for x in sorted(states, key=sum, reverse=True):
        if not any(all(a >= b for a, b in zip(y, x)) for y in kept):
            kept.append(x)
    return set(kept)


def test_live_frontier_of_a_long_step_is_that_of_a_short_one():
    step_memory._FRONTIERS.clear()
    for schedule, p, v in itertools.chain(
            ((sch, p, 1) for sch in ("gpipe", "1f1b") for p in range(1, 6)),
            (("interleaved", p, v) for p in range(1, 5) for v in range(1, 4))):
        for m in range(1, 9 * p + 3):
            if schedule == "interleaved" and m % p:
                continue
            for s in range(p):
                assert set(step_memory.live_frontier(schedule, p, v, m, s)) == _frontier_by_walk(schedule, p, v, m, s), \
                    (schedule, p, v, m, s)


def test_mixed_rack_microbatches_equal_the_walk_down_from_the_batch():
    for gbs in (1, 6, 12, 48, 60, 64, 210, 216):
        for dps in ([1], [2, 3], [4, 2], [3, 5], [18, 9], [7]):
            for mb in (1, 2, 4):
                walk = next((m for m in range(gbs, 0, -1)
                             if all(gbs % (m * d) == 0 and gbs // (m * d) >= mb for d in dps)), 0)
                assert _mixed_microbatches(gbs, dps, mb) == walk, (gbs, dps, mb)


def test_long_step_equals_the_walk_over_every_microbatch(small, monkeypatch):
    # The schedule is played and its frontier found in a few steps; against the walk over every action.
    spec = devices.parse_rack("h100-node*2")
    stages = [Stage(chunks=(range(0, 3), range(5, 7)), kind="h100", slots=tuple(range(8)), tp=2),
              Stage(chunks=(range(3, 5), range(7, 10)), kind="h100", slots=tuple(range(8, 16)), tp=2)]
    config = StepConfig(global_batch=4 * 600, seq_len=512, microbatches=600, schedule="interleaved", recompute="auto")
    fast = step_model(small, stages, spec, config)
    monkeypatch.setattr(step_memory, "frontier_microbatches", lambda schedule, p, v, m, s: m)
    step_memory._FRONTIERS.clear()
    walked = step_model(small, stages, spec, StepConfig(global_batch=4 * 600, seq_len=512, microbatches=600,
                                                        schedule="interleaved", recompute="auto", record=True))
    assert fast.seconds == pytest.approx(walked.seconds, rel=1e-9)
    assert [s.memory for s in fast.stages] == [s.memory for s in walked.stages]
    assert [s.in_flight for s in fast.stages] == [s.in_flight for s in walked.stages]


def test_events_replay_the_schedule_the_step_was_priced_with(small):
    spec = devices.parse_rack("h100-node*2")
    stages = [Stage(chunks=(range(0, 5),), kind="h100", slots=tuple(range(8))),
              Stage(chunks=(range(5, 10),), kind="h100", slots=tuple(range(8, 16)))]
    config = dict(global_batch=64, seq_len=512, microbatches=8)
    recorded = step_model(small, stages, spec, StepConfig(record=True, **config))
    replayed = step_model(small, stages, spec, StepConfig(**config))
    assert replayed.events == recorded.events and len(recorded.events) == 2 * 2 * 8
    assert max(e[5] for e in replayed.events) <= replayed.seconds


@pytest.mark.parametrize("gbs", [10**8, 10**12])
def test_a_huge_global_batch_is_priced_in_a_few_steps(small, gbs):
    base = whatif(small, "h100-node*2", parallel={"tp": 2, "pp": 2}, global_batch=4096, seq_len=512)
    huge = whatif(small, "h100-node*2", parallel={"tp": 2, "pp": 2}, global_batch=gbs, seq_len=512)
    assert huge.parallel["microbatches"] == gbs // 4
    # The pipeline's steady state repeats: the step grows as its microbatches, past the fill and drain.
    assert huge.seconds / base.seconds == pytest.approx(gbs / 4096, rel=2e-3)
    assert huge.memory_per_chip == base.memory_per_chip


def test_a_mixed_rack_with_a_huge_batch(small):
    est = whatif(small, "trn3:8+h100:8", parallel={"tp": 2}, global_batch=4 * 10**9, seq_len=512)
    assert est.parallel["microbatches"] == 10**9 and est.fits


def test_a_rack_of_a_trillion_chips_is_a_few_objects():
    import collectives

    topo = collectives.topology(devices.parse_rack("h100:1000000000000"))
    assert len(topo) == 10**12 and len(topo.domains) <= 2
    est = collectives.estimate(topo, "all_reduce", 1 << 30, slots=range(0, 8 * 10**7, 8))
    assert est.participants == 10**7 and est.path == "closed-form" and est.seconds > 0


def test_plan_search_on_ten_million_chips_and_a_billion_rows(small):
    # No wall-clock budget: on a loaded machine one ran out before any fitting layout was evaluated.
    from planner.plan_search import MICROBATCH_COUNTS, Problem, microbatch_counts, search

    spec = devices.parse_rack("h100:10000000")
    layout, result, stats = search(Problem(small, spec, range(len(spec)), 1024, 512))
    assert result.chips <= len(spec) and all(s.memory.fits for s in result.stages) and stats.evaluated >= 1
    assert isinstance(layout.stages[0].slots, (range, tuple))
    counts = microbatch_counts(10**9)
    assert len(counts) == MICROBATCH_COUNTS and counts[-1] == 10**9 and all(10**9 % m == 0 for m in counts)
    assert counts == tuple(sorted(10**9 // r for r in divisors(10**9)[:MICROBATCH_COUNTS]))  # the smallest microbatches
    assert microbatch_counts(720) == tuple(divisors(720))  # every divisor while there are few
    spec = devices.parse_rack("h100-node")
    layout, result, _ = search(Problem(small, spec, range(len(spec)), 10**9, 512))
    assert result.config.global_batch == 10**9 and math.isfinite(result.seconds)


def test_a_kinds_slots_on_a_whole_rack_are_its_runs():
    from planner.plan_search import SlotRuns, kind_slots

    for rack in ("trn3:4+h100:4*3", "h100:12+b200:12+trn2:32*2", "trn3:144+gb300:72", "h100-node*3"):
        spec = devices.parse_rack(rack)
        walked: dict[str, list[int]] = {}
        for s in range(len(spec)):
            walked.setdefault(spec.slot(s).kind, []).append(s)
        runs = kind_slots(spec, range(len(spec)))
        assert {k: list(v) for k, v in runs.items()} == walked
        for kind, seq in runs.items():
            assert len(seq) == len(walked[kind]) and [seq[i] for i in range(len(seq))] == walked[kind]
            for a, b in ((0, 3), (2, 7), (1, len(seq)), (len(seq) - 2, len(seq))):
                assert list(seq[a:b]) == walked[kind][a:b]
            if isinstance(seq, SlotRuns):
                assert kind_slots(spec, seq) == {kind: seq}
    spec = devices.parse_rack("trn3:4+h100:4*1000000")
    h100 = kind_slots(spec, range(len(spec)))["h100"]
    assert len(h100) == 4 * 10**6 and h100[-1] == len(spec) - 1 and h100[8:12] == range(20, 24)


class _CallBudget:
    """Counts Python calls while on; past ``limit`` it raises, so a count that costs fails at once instead of
    running for hours (the budget is a count of calls, not a time)."""

    def __init__(self, limit: float = math.inf) -> None:
        self.calls, self.limit = 0, limit

    def _profile(self, frame, event, arg):
        if event == "call":
            self.calls += 1
            if self.calls > self.limit:
                raise RuntimeError(f"over the budget of {self.limit} Python calls: the work scales with the count")

    def __enter__(self):
        import sys

        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        import sys

        sys.setprofile(None)


@pytest.mark.parametrize("rack", ["h100:{n}", "h100:{n}+trn3:{n}"])
def test_a_whatif_on_a_trillion_chips_does_the_work_of_a_million(small, rack):
    kw = dict(parallel={"tp": 8}, global_batch=2 * 10**12, seq_len=512)
    whatif(small, rack.format(n=1024), **kw)  # the block profiles traced outside the counts
    with _CallBudget() as million:  # each rack is new: its topology and collective tables are built in the count
        base = whatif(small, rack.format(n=10**6), **kw)
    # A trillion chips may not cost more Python calls than a million (slack: divisor lists and closed-form
    # collective paths of other numbers differ a little); before issue 29 the TP check walked every domain
    # (10^11 of them) and a mixed rack listed every slot of each kind.
    with _CallBudget(limit=1.5 * million.calls + 2000) as trillion:
        huge = whatif(small, rack.format(n=10**12), **kw)
    assert trillion.calls <= 1.5 * million.calls + 2000
    dp = base.parallel["dp"]  # one degree, or one per stage of a mixed rack
    assert huge.parallel["dp"] == ([d * 10**6 for d in dp] if isinstance(dp, list) else dp * 10**6)
