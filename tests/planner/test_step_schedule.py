"""Pipeline schedules of the step model against closed forms, and the pieces the step composes (pure Python)."""

from __future__ import annotations

import math

import pytest

from planner import schedule
from planner.schedule import actions, simulate


def _uniform(p, v, f, b):
    return [[f / v] * v for _ in range(p)], [[b / v] * v for _ in range(p)]


@pytest.mark.parametrize("p,m,v", [(1, 4, 1), (4, 8, 1), (8, 64, 1), (4, 3, 1), (4, 8, 2), (8, 64, 8), (8, 32, 4)])
def test_uniform_pipeline_matches_closed_form(p, m, v):
    # 1F1B and interleaved 1F1B with equal stages: m (f + b) + (p - 1)(f + b) / v (Narayanan et al. 2021).
    f, b = 1.0, 2.0
    fw, bw = _uniform(p, v, f, b)
    sim = simulate(fw, bw, m, "interleaved" if v > 1 else "1f1b")
    assert sim.end == pytest.approx(m * (f + b) + (p - 1) * (f + b) / v)
    assert all(busy == pytest.approx(m * (f + b)) for busy in sim.busy)


def test_gpipe_time_and_memory():
    fw, bw = _uniform(4, 1, 1.0, 2.0)
    g = simulate(fw, bw, 8, "gpipe")
    o = simulate(fw, bw, 8, "1f1b")
    assert g.end == pytest.approx(o.end)  # same bubble...
    assert g.in_flight[0] == (8,) and o.in_flight[0] == (4,)  # ...but GPipe holds every microbatch


def test_interleaved_in_flight_matches_megatron():
    # Megatron: the first stage holds (p - 1) * 2 + (v - 1) * p + 1 chunk-microbatches at its peak.
    p, v, m = 8, 4, 32
    fw, bw = _uniform(p, v, 1.0, 2.0)
    sim = simulate(fw, bw, m, "interleaved", activation=[[1.0] * v for _ in range(p)])
    assert sum(sim.peak_chunks[0]) == (p - 1) * 2 + (v - 1) * p + 1


def test_uneven_stages_bottleneck():
    # The steady state runs at the slowest stage's pace: end -> (m - 1) * slowest + the fill and drain.
    fw = [[1.0], [3.0], [1.0]]
    bw = [[2.0], [6.0], [2.0]]
    m = 50
    sim = simulate(fw, bw, m, "1f1b")
    slow = 9.0
    assert sim.end >= m * slow
    assert sim.end == pytest.approx((m - 1) * slow + sum(f[0] + b[0] for f, b in zip(fw, bw)), rel=0.02)


def test_p2p_delays_the_pipeline():
    # Two stages, two microbatches, f=1, b=2, a 0.5 s hop, worked by hand:
    # s0 F0 [0,1] F1 [1,2]; s1 F0 [1.5,2.5] B0 [2.5,4.5]; s0 B0 [5,7]; s1 F1 [4.5,5.5] B1 [5.5,7.5];
    # s0 B1 [8,10].  Without the hop: (m + p - 1)(f + b) = 9.
    fw, bw = [[1.0], [1.0]], [[2.0], [2.0]]
    assert simulate(fw, bw, 2, "1f1b").end == pytest.approx(9.0)
    sim = simulate(fw, bw, 2, "1f1b", p2p=[0.5], record=True)
    assert sim.end == pytest.approx(10.0)
    assert (1, 1, 0, 1, 5.5, 7.5) in sim.events


def test_actions_are_complete_and_ordered():
    for sched, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 3)):
        seq = actions(sched, 4, v, 8)
        for stage in seq:
            assert sorted(stage) == sorted((ph, c, i) for ph in (0, 1) for c in range(v) for i in range(8))
            for c in range(v):  # a chunk's forwards and backwards run in microbatch order
                fwd = [i for ph, cc, i in stage if ph == 0 and cc == c]
                assert fwd == sorted(fwd)


def test_bad_schedule_names():
    with pytest.raises(ValueError, match="schedule: unknown 'zigzag'; accepted: gpipe, 1f1b, interleaved"):
        actions("zigzag", 2, 1, 2)
    with pytest.raises(ValueError, match="need 'interleaved'"):
        actions("1f1b", 2, 2, 4)


def test_extrapolated_simulation_matches_full():
    # Long steps are extrapolated from two short ones (play_schedule); the steady state repeats every p.
    from planner.step import SIMULATE_LIMIT
    from planner.step.pipeline import play_schedule

    p, v = 4, 2
    fw = [[0.5, 0.6], [0.5, 0.5], [0.5, 0.5], [0.7, 0.5]]
    bw = [[1.0, 1.2], [1.0, 1.0], [1.1, 1.0], [1.4, 1.0]]
    hops = [0.01] * (p * v - 1)
    m = 400
    full = simulate(fw, bw, m, "interleaved", p2p=hops)
    fast = play_schedule(fw, bw, m, "interleaved", hops, False)
    assert fast.end == pytest.approx(full.end, rel=1e-9)
    assert fast.finish == pytest.approx(full.finish, rel=1e-9)
    assert 2 * p * v * m > SIMULATE_LIMIT


def test_two_streams_prefetch():
    from planner.step.pipeline import two_streams as _two_streams

    # Gathers shorter than the compute beside them hide all but the first one.
    assert _two_streams([1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [0.0, 0.0, 0.0]) == pytest.approx(3.5)
    # Longer gathers set the pace.
    assert _two_streams([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]) == pytest.approx(7.0)
    # Reduce-scatters after each block; the last one is exposed.
    assert _two_streams([1.0, 1.0], [0.0, 0.0], [0.5, 0.5]) == pytest.approx(2.5)
    # With share 0.5, half of what overlap hid costs time.
    assert _two_streams([1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [0.0, 0.0, 0.0], 0.5) == pytest.approx(3.5 + 0.5)


def test_exposed_tensor_parallel_communication():
    # Transformer Engine's userbuffers methods (planner/tp_overlap.py), against their arithmetic by hand.
    from planner.tp_overlap import exposed, exposed_raw, method

    assert method("forward", "column_gemm") == "ring_exchange" and method("forward", "row_gemm") == "pipeline"
    assert method("backward", "column_gemm") == "bulk"
    # Ring exchange over 4 chips: 3 exchanges beside 3 of the 4 GEMM chunks; a long GEMM hides all of it.
    assert exposed_raw("ring_exchange", 1.0, 10.0, 4) == 0.0
    assert exposed_raw("ring_exchange", 1.0, 0.8, 4) == pytest.approx(1.0 - 0.8 * 0.75)
    # Pipelined reduce-scatter in 4 splits: the last split's is exposed, the rest hides beside 3 of 4 splits.
    assert exposed_raw("pipeline", 1.0, 10.0, 8) == pytest.approx(0.25)
    assert exposed_raw("pipeline", 1.0, 0.4, 8) == pytest.approx(0.25 + (0.75 - 0.3))
    # Bulk: hidden up to the GEMM's length.
    assert exposed_raw("bulk", 1.0, 0.6, 4) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="method"):
        exposed_raw("chunked", 1.0, 1.0, 4)
    # A phase: each collective beside its share of the GEMMs (in proportion to its time); 1 - share of what is
    # hidden still costs compute; without tp_comm_overlap all of it is exposed.
    colls = [("ring_exchange", 1.0), ("pipeline", 1.0)]
    assert exposed(colls, 20.0, 4, 1.0, True) == pytest.approx(0.25)
    assert exposed(colls, 20.0, 4, 0.5, True) == pytest.approx(0.25 + 0.5 * 1.75)
    assert exposed(colls, 20.0, 4, 1.0, False) == 2.0
    assert math.isclose(exposed([], 1.0, 4, 1.0, True), 0.0)


def test_a_context_parallel_ring_hides_each_exchange_beside_one_step():
    from planner.ring_attention import exposed_exchange

    # 3 exchanges beside the 4 steps of 4 ms of attention: 1 ms each; exchanges of 1.5 ms leave 0.5 ms each.
    assert exposed_exchange(4.5, 3, 4.0) == pytest.approx(1.5)
    assert exposed_exchange(2.4, 3, 4.0) == 0.0
    assert exposed_exchange(0.0, 3, 4.0) == 0.0


def test_the_breakdown_splits_the_step_on_the_busiest_stage_not_the_last_to_finish():
    # In 1F1B the first stage finishes last (the last backward reaches it last). Where it holds fewer layers
    # (Megatron's split counts the embedding as a layer), its wait on the heavier stages is not pipeline
    # bubble: the step is bounded by the busiest stage, whose idle time is the pipeline's real bubble.
    from planner import golden
    from planner.estimate import run_config
    from planner.models import model_blocks
    from planner.parallel import Parallel
    import devices

    row = next(r for r in golden.ALL_ROWS if r.model == "llama3.1-405b" and r.rack.startswith("gb200")
               and r.pp > 1)
    par = Parallel(tp=row.tp, pp=row.pp, cp=row.cp, vp=row.vp, fsdp=row.fsdp, microbatch=row.microbatch,
                   dp=row.gpus // (row.tp * row.pp * row.cp))
    result, _ = run_config(model_blocks(row.model), devices.parse_rack(row.rack), par,
                           global_batch=row.global_batch, seq_len=row.seq_len, precision="fp8",
                           recompute=row.recompute, optimizer="adamw")
    busiest = max(result.stages, key=lambda s: s.busy)
    assert result.stages[0].busy < busiest.busy  # the case this test is about
    crit = result.stages[result.critical_stage]
    assert crit.busy == busiest.busy
    # Its idle time is the bubble plus the pipeline hops it waits on (exposed pp).
    assert result.bubble + result.exposed["pp"] == pytest.approx(busiest.idle, abs=1e-9 * result.seconds)
    assert result.bubble < 0.02 * result.seconds
    assert sum(result.breakdown.values()) == pytest.approx(result.seconds, rel=1e-9)
