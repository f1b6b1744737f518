"""The serving simulation against closed forms: constant iteration costs make every request's times arithmetic."""

from __future__ import annotations

import pytest

from planner.serving.simulation import Requests, Simulation, percentiles


class Constant:
    """Prefill: ``p`` seconds per prompt token; decode: ``d`` seconds per iteration; joins and leaves free."""

    def __init__(self, p: float = 1e-3, d: float = 0.01, join: float = 0.0, leave: float = 0.0) -> None:
        self.p, self.d, self.j, self.l = p, d, join, leave
        self.decodes: list[tuple[int, int, int]] = []

    def prefill(self, chunks, sampled):
        return self.p * sum(c for c, _ in chunks)

    def mixed(self, chunks, batch, kv_tokens, sampled):
        return self.p * sum(c for c, _ in chunks) + self.d

    def decode(self, batch, kv_tokens, padded):
        self.decodes.append((batch, kv_tokens, padded))
        return self.d

    def join(self, batch, padded, lengths):
        return self.j

    def leave(self, batch, padded, kept, kept_padded):
        return self.l


def test_one_request_colocated():
    cost = Constant()
    reqs = Requests([100], [11], [0.0])
    sim = Simulation(reqs)
    sim.add("r", "colocated", cost, capacity=10**9, need=lambda r: 1, max_batch=8, budget=8192)
    sim.run()
    # prefill 100 tokens (0.1 s) samples the first token; 10 decode iterations of 0.01 s plus the prompt cost
    assert reqs.first[0] == pytest.approx(0.1)
    assert reqs.finish[0] == pytest.approx(0.1 + 10 * 0.01)


def test_chunked_prefill_spreads_a_long_prompt_over_iterations():
    cost = Constant()
    reqs = Requests([1000], [1], [0.0])
    sim = Simulation(reqs)
    sim.add("r", "colocated", cost, capacity=10**9, need=lambda r: 1, max_batch=8, budget=256)
    sim.run()
    assert reqs.first[0] == pytest.approx(1000 * 1e-3)  # same work, four iterations of 256 and one of 232
    assert reqs.finish[0] == reqs.first[0]


def test_kv_capacity_limits_the_batch_and_queues_the_rest():
    cost = Constant(p=0.0, d=0.01)
    n = 6
    reqs = Requests([10] * n, [5] * n, [0.0] * n)
    sim = Simulation(reqs)
    # room for two sequences at a time: requests run in three waves of two
    sim.add("r", "colocated", cost, capacity=2, need=lambda r: 1, max_batch=64, budget=8192)
    sim.run()
    firsts = sorted(reqs.first)
    assert firsts[0] == firsts[1] == 0.0
    wave = 4 * 0.01  # 4 decode tokens after the first
    assert firsts[2] == pytest.approx(wave) and firsts[4] == pytest.approx(2 * wave)
    assert max(reqs.finish) == pytest.approx(3 * wave)


def test_closed_loop_concurrency_one_serialises_requests():
    cost = Constant(p=1e-3, d=0.01)
    n = 4
    reqs = Requests([50] * n, [3] * n, [0.0] * n)
    sim = Simulation(reqs, concurrency=1)
    sim.add("r", "colocated", cost, capacity=10**9, need=lambda r: 1, max_batch=64, budget=8192)
    sim.run()
    one = 0.05 + 2 * 0.01
    for i in range(n):
        assert reqs.arrival[i] == pytest.approx(i * one)
        assert reqs.finish[i] - reqs.arrival[i] == pytest.approx(one)


def test_disaggregated_transfer_delays_the_second_token_not_the_first():
    cost = Constant(p=1e-3, d=0.01)
    reqs = Requests([100, 100], [3, 3], [0.0, 0.0])
    sim = Simulation(reqs)
    sim.add("p", "prefill", cost, capacity=10**9, need=lambda r: 1, max_batch=64, budget=8192, max_prompts=1)
    sim.add("d", "decode", cost, capacity=10**9, need=lambda r: 1, max_batch=64, budget=8192)
    sim.transfer = lambda i, j, r: 0.05
    sim.run()
    assert reqs.first == pytest.approx([0.1, 0.2])  # one prompt per prefill iteration
    # request 0's cache arrives at 0.15: two decode iterations; the decode instance idles until request 1's
    # arrives at 0.25 (its transfer starts when its prompt is done, 0.2, the link free again)
    assert reqs.finish[0] == pytest.approx(0.15 + 2 * 0.01)
    assert reqs.finish[1] == pytest.approx(0.25 + 2 * 0.01)


def test_decode_batch_shapes_follow_joins_and_leaves():
    cost = Constant(p=0.0, d=0.01, join=0.002, leave=0.003)
    reqs = Requests([5, 9], [2, 4], [0.0, 0.0])
    sim = Simulation(reqs)
    sim.add("p", "prefill", cost, capacity=10**9, need=lambda r: 1, max_batch=64, budget=8192)
    sim.add("d", "decode", cost, capacity=10**9, need=lambda r: 1, max_batch=64, budget=8192)
    sim.transfer = lambda i, j, r: 0.0
    sim.run()
    # step 1: both (caches 5 and 9: padded 9, kv 6 + 10); request 0 then leaves; steps 2-3: request 1 alone
    assert cost.decodes == [(2, 16, 9), (1, 11, 10), (1, 12, 11)]
    assert reqs.finish[0] == pytest.approx(0.002 + 0.01)
    assert reqs.finish[1] == pytest.approx(0.002 + 0.01 + 0.003 + 0.01 + 0.01)


def test_percentiles_match_numpy():
    np = pytest.importorskip("numpy")
    values = [0.3, 0.1, 0.9, 0.5, 0.7, 0.2, 0.4]
    assert percentiles(values) == pytest.approx(tuple(np.percentile(values, [50, 90, 99])))


def test_unchunked_prompts_enter_whole_while_they_fit_in_arrival_order():
    """TensorRT-LLM without chunked context: a prompt is never split; prompts enter while the rest of the budget holds
    them whole, the first always, and one that does not fit holds back those behind it."""
    cost = Constant(p=1e-3, d=0.0)
    # budget 1000: iteration 1 takes 600 (the 500 behind it would overflow and waits with the 100 behind that);
    # iteration 2 takes 500 and 100; the 1500-token prompt exceeds the budget yet enters whole as iteration 3's first.
    reqs = Requests([600, 500, 100, 1500], [1, 1, 1, 1], [0.0] * 4)
    sim = Simulation(reqs)
    sim.add("r", "colocated", cost, capacity=10**9, need=lambda r: 1, max_batch=8, budget=1000, chunked=False)
    sim.run()
    assert reqs.first[0] == pytest.approx(0.6)
    assert reqs.first[1] == reqs.first[2] == pytest.approx(0.6 + 0.6)
    assert reqs.first[3] == pytest.approx(1.2 + 1.5)
    # chunked, the same budget splits them: 1000 tokens an iteration, the first token of request 0 in iteration 1
    reqs = Requests([600, 500, 100, 1500], [1, 1, 1, 1], [0.0] * 4)
    sim = Simulation(reqs)
    sim.add("r", "colocated", cost, capacity=10**9, need=lambda r: 1, max_batch=8, budget=1000)
    sim.run()
    assert reqs.first[0] == pytest.approx(1.0) and reqs.first[1] == pytest.approx(2.0)


class _Unpriced:
    """A cost model without ``decode_pricer``."""

    def __init__(self, cost) -> None:
        self._cost = cost

    def __getattr__(self, name):
        if name == "decode_pricer":
            raise AttributeError(name)
        return getattr(self._cost, name)


@pytest.mark.parametrize("model, pools, workload, fewer", [
    # sliding-window layers (LocalKeys), offline, KV capacity holding a few sequences at a time
    ("gpt-oss-20b", dict(parallel=dict(tp=1)), dict(requests=40), 4),
    ("gpt-oss-20b", dict(parallel=dict(tp=1)), dict(requests=40, rate=30.0), 4),
    ("llama3-8b", dict(parallel=dict(tp=1)), dict(requests=40, concurrency=6), 4),
    # disaggregated: KV caches arriving from the prefill instance; with two decode instances a run stops at the
    # other's next iteration (which comes first), so nearly every iteration goes through the event loop
    ("llama3-8b", dict(prefill=dict(kind="h100", chips=1), decode=dict(kind="h100", chips=1)), dict(requests=40), 4),
    ("llama3-8b", dict(prefill=dict(kind="h100", chips=1), decode=dict(kind="h100", chips=1)),
     dict(requests=40, rate=40.0), 4),
    ("llama3-8b", dict(prefill=dict(kind="h100", chips=1), decode=dict(kind="h100", chips=2)), dict(requests=40), 1),
])
def test_decode_runs_are_the_event_loops_iterations_bit_for_bit(model, pools, workload, fewer, monkeypatch):
    """Runs of decode iterations where only the cache grows skip the event loop's round trip (priced at once by
    FusedCost.decode_pricer where nothing can interrupt them, else an iteration at a time); every request's times,
    every recorded iteration and the mean batch equal the event loop's, iteration by iteration."""
    from dataclasses import replace

    from planner.serving import golden_models
    from planner.serving.config import configure, price_pool, spec_of
    from planner.serving.engine import Engine
    from planner.serving.model_shape import model_shape
    from planner.serving.run import simulate
    from planner.serving.workload import Workload

    shape = model_shape(golden_models.MODELS.get(model, model))
    spec = spec_of("h100:8")
    work = Workload([(300, 700), (1200, 90), (64, 1500), (700, 1)], **workload)
    engine = Engine(max_batch=8)
    config = configure(shape, spec, precision="bfloat16", engine=engine, workload=work,
                       **{"parallel": None, "prefill": None, "decode": None, **pools})
    names = ("parallel",) if not config.disaggregated else ("prefill", "decode")
    priced = tuple(price_pool(shape, spec, p, config.precision, engine, work, name=n)
                   for p, n in zip(config.pools, names))
    with monkeypatch.context() as m:  # the reference: every iteration through the event loop
        m.setattr(Simulation, "_decode_run", lambda self, inst, index, t, seconds, batch, name: (t, seconds))
        want, want_sim, _, _ = simulate(shape, spec, config, work, priced=priced)
    unpriced = tuple(replace(p, cost=_Unpriced(p.cost)) for p in priced)  # runs an iteration at a time
    for costs in (priced, unpriced):
        got, got_sim, _, _ = simulate(shape, spec, config, work, priced=costs)
        assert got.first == want.first and got.finish == want.finish and got.arrival == want.arrival
        assert got_sim.events == want_sim.events and got_sim.dropped == want_sim.dropped
        assert got_sim.mean_decode_batch() == want_sim.mean_decode_batch()
        # the wakes the event loop took: one per iteration in the reference, one per run in runs
        assert got_sim._order <= want_sim._order / fewer


@pytest.mark.parametrize("kind", ["chunked", "sliding"])
def test_local_keys_over_a_run_are_the_cuts_step_by_step(kind):
    """LocalKeys.cuts(first, last) is cut() of each step in turn, and leaves the same state, with sequences joining
    and leaving between runs."""
    import random

    from planner.serving.local_keys import LocalKeys

    for span in (1, 7, 128):
        runs, steps, rng = LocalKeys(kind, span), LocalKeys(kind, span), random.Random(span)
        running, step = [], 0
        for req in range(40):
            length = rng.randint(1, 400)
            runs.join(req, length, step)
            steps.join(req, length, step)
            running.append(req)
            if len(running) > 5:
                gone = running.pop(rng.randrange(len(running)))
                runs.leave(gone)
                steps.leave(gone)
            last = step + rng.randint(0, 3 * span)
            assert runs.cuts(step, last).tolist() == [steps.cut(s) for s in range(step, last + 1)]
            step = last + 1


def test_grid_runs_are_its_calls_bit_for_bit():
    """Grid.rising (a numpy array of increasing sizes k / n) and Grid.many are the grid's own answer for each size,
    from the exact sizes through many cells."""
    np = pytest.importorskip("numpy")
    from planner.serving.grid import EXACT, Grid

    grid = Grid(lambda x: 1e-6 * x + 3e-3 * x ** 0.5 + (2e-4 if x > 3000 else 0.0))
    for start, stride, n in ((1, 1, 1), (5, 3, 7), (EXACT * 7 - 20, 7, 7), (90_001, 13, 3)):
        ks = start + stride * np.arange(20_000, dtype=np.int64)
        sizes = ks / n
        want = [grid(x) for x in (int(k) / n for k in ks)]
        assert grid.rising(sizes).tolist() == want
        assert grid.many(sizes.tolist()) == want
