"""Collective cost: the alpha-beta formulas of collectives.md, closed form vs step list, anchors, estimate()."""

from __future__ import annotations

import math
import tracemalloc
from dataclasses import replace

import pytest

import collectives
import devices
from collectives import algorithms
from collectives.tuning import IDEAL
from collectives.cost import Levels, schedule_time
from collectives.ops import busbw_factor, reported_bytes
from collectives.schedule import CollectiveSpec
from collectives.rack_topology import from_rack
from collectives.topology import Topology

A, B, G = 2e-6, 1e-9, 4e-10  # seconds per message, per byte, per reduced byte


def ideal_time(algo: str, op: str, p: int, count: int, itemsize: int = 4, **kw) -> float:
    """Seconds of the schedule's step list on an ideal switch (the alpha-beta model)."""
    spec = CollectiveSpec(op=op, participants=p, count=count, itemsize=itemsize, **kw)
    sched = algorithms.get(algo).build(spec)
    return schedule_time(sched, Topology.ideal(p, A, B, G), list(range(p)), IDEAL)


# -- the formulas of reference/collectives.md, reproduced exactly ------------------------------

@pytest.mark.parametrize("p", [2, 3, 5, 8, 12])
def test_ring_formulas(p):
    c, w = 64 * 3 * 5 * 7, 4
    n = c * p * w  # all_gather / reduce_scatter: n is the whole gathered buffer
    assert ideal_time("ring", "all_gather", p, c) == pytest.approx((p - 1) * A + (p - 1) / p * n * B)
    assert ideal_time("ring", "reduce_scatter", p, c) == pytest.approx((p - 1) * A + (p - 1) / p * n * (B + G))
    n = c * w
    assert ideal_time("ring", "all_reduce", p, c) == pytest.approx(
        2 * (p - 1) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_recursive_halving_doubling_formulas(p):
    c, w, lg = 64 * 32, 4, int(math.log2(p))
    n = c * p * w
    assert ideal_time("rabenseifner", "reduce_scatter", p, c) == pytest.approx(lg * A + (p - 1) / p * n * (B + G))
    assert ideal_time("rabenseifner", "all_gather", p, c) == pytest.approx(lg * A + (p - 1) / p * n * B)
    n = c * w
    assert ideal_time("rabenseifner", "all_reduce", p, c) == pytest.approx(
        2 * lg * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G)
    assert ideal_time("rabenseifner", "broadcast", p, c) == pytest.approx(2 * lg * A + 2 * (p - 1) / p * n * B)


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 13])
def test_binomial_broadcast_and_pairwise_all_to_all(p):
    c, w = 960, 4
    lg = math.ceil(math.log2(p))
    assert ideal_time("binomial", "broadcast", p, c) == pytest.approx(lg * (A + c * w * B))
    n = c * p * w  # per-rank bytes of all_to_all (S)
    assert ideal_time("direct", "all_to_all", p, c) == pytest.approx((p - 1) * A + (p - 1) / p * n * B)


def test_in_switch_all_reduce_moves_each_byte_once_each_way():
    # collectives.md: "about 2a + n b": every rank sends its n bytes once and receives the result
    # once.  The modelled switch also carries each rank's own shard (n/p) both ways, and the
    # pull and the multicast overlap over k+1 pipelined rounds.
    p, w = 8, 4
    for k in (1, 16, 64):
        c = 8 * 64 * 1024
        n = c * w
        t = ideal_time("in_switch", "all_reduce", p, c, pipeline=k)
        assert t == pytest.approx((k + 1) * A + n * B * ((p + 1) / p + (p - 2) / (p * k)))
    assert ideal_time("in_switch", "all_reduce", p, 8 * 4096, pipeline=1) == pytest.approx(
        2 * A + 8 * 4096 * w * B * (2 * p - 1) / p)


def test_double_binary_tree_tends_to_2nb():
    # NCCL tree: about 2 lg p a + 2 n b once pipelined deeply.
    p, c, w = 16, 2 * 128 * 1000, 4
    k = 128
    t = ideal_time("tree", "all_reduce", p, c, pipeline=k)
    h = int(math.log2(p))
    bw_part = 2 * c * w * B
    assert bw_part < t - 2 * (k + h - 1) * A < bw_part * (1 + (h + 1) / k) + c * w * G * 2


def test_hierarchical_formula():
    groups = tuple(tuple(range(g * 4, g * 4 + 4)) for g in range(3))
    c, w, size = 4 * 3 * 100, 4, 4
    t = ideal_time("hierarchical", "all_reduce", 12, c, groups=groups, outer="ring")
    n = c * w
    inner = 2 * (size - 1) * (A + n / size * B) + (size - 1) / size * n * G
    outer = 2 * 2 * A + 2 * 2 / 3 * (n / size) * B + 2 / 3 * (n / size) * G
    assert t == pytest.approx(inner + outer)


# -- closed form == step list on ideal topologies --------------------------------------------------

CASES = [(a.name, op) for a in (algorithms.get(n) for n in algorithms.names()) for op in sorted(a.ops)
         if a.name not in ("hierarchical", "torus")]


@pytest.mark.parametrize("algo,op", CASES)
def test_closed_form_matches_step_list(algo, op):
    alg = algorithms.get(algo)
    for p in [2, 3, 4, 5, 7, 8, 11, 16, 17]:
        if op == "send_recv" and p != 2:
            continue
        for count in [0, 1, 5, 3 * 16 * 17 * 11 * 7 * 5 * 2, 1001]:
            for k in ([1, 4] if op in alg.pipelined else [1]):
                spec = CollectiveSpec(op=op, participants=p, count=count, itemsize=2, root=p // 3, pipeline=k)
                steps = schedule_time(alg.build(spec), Topology.ideal(p, A, B, G), list(range(p)), IDEAL)
                closed = alg.closed_form(spec, Levels.uniform(A, B, G))
                exact = count % (p * 2 * k) == 0 or algo in ("ring", "rabenseifner", "binomial", "direct")
                if exact:
                    assert closed == pytest.approx(steps, rel=1e-12, abs=1e-18), (algo, op, p, count, k)
                else:  # uneven chunks: the closed form prices the largest chunk in every round
                    assert steps * (1 - 1e-12) <= closed <= steps * 1.5 + 1e-12, (algo, op, p, count, k)


@pytest.mark.parametrize("outer", ["ring", "rabenseifner", "tree", "direct"])
def test_hierarchical_closed_form_matches_step_list(outer):
    alg = algorithms.get("hierarchical")
    for n_groups, size in [(2, 2), (3, 4), (4, 3), (5, 2)]:
        p = n_groups * size
        groups = tuple(tuple(range(g * size, (g + 1) * size)) for g in range(n_groups))
        for count in [p * 2 * 4 * 30, 7]:
            spec = CollectiveSpec(op="all_reduce", participants=p, count=count, itemsize=4, groups=groups,
                                  outer=outer, pipeline=2)
            steps = schedule_time(alg.build(spec), Topology.ideal(p, A, B, G), list(range(p)), IDEAL)
            closed = alg.closed_form(spec, Levels.uniform(A, B, G))
            if count % (p * 4) == 0:
                assert closed == pytest.approx(steps, rel=1e-12)
            else:
                assert steps * (1 - 1e-12) <= closed <= steps * 1.5


@pytest.mark.parametrize("shape", [(4, 4), (3, 3), (4, 4, 4), (2, 2, 2, 2), (2, 3), (5,), (3, 1, 2)])
def test_torus_closed_form_matches_step_list_on_an_ideal_torus(shape):
    alg = algorithms.get("torus")
    p = math.prod(shape)
    topo = Topology.ideal(p, A, B, G, shape=shape)
    for count in [0, 1, 101, 4 * 4 * 4 * 3 * 3 * 2 * 5 * 7]:
        spec = CollectiveSpec(op="all_reduce", participants=p, count=count, itemsize=4, torus=shape)
        steps = schedule_time(alg.build(spec), topo, list(range(p)), IDEAL)
        closed = alg.closed_form(spec, Levels.uniform(A, B, G))
        if count % (p * len(shape) * 2) == 0:
            assert closed == pytest.approx(steps, rel=1e-12)
        else:
            assert steps * (1 - 1e-12) <= closed <= steps * 1.5


def test_torus_uses_every_link_of_a_trn2_torus():
    ring = collectives.estimate("trn2-instance", "all_reduce", 2**30, algorithm="ring")
    torus = collectives.estimate("trn2-instance", "all_reduce", 2**30)
    assert torus.algorithm == "torus"
    # four links per chip on a 4x4 torus: one ring uses one, the torus channels all four
    assert 3.5 < ring.seconds / torus.seconds < 4.1
    topo = from_rack("trn2-instance")
    assert torus.busbw == pytest.approx(topo.domains[0].bandwidth, rel=0.05)
    with pytest.raises(ValueError, match="torus"):
        collectives.estimate("h100-node", "all_reduce", 2**20, algorithm="torus")
    with pytest.raises(ValueError, match="torus"):
        collectives.estimate("trn2-instance", "all_reduce", 2**20, algorithm="torus", slots=[0, 1, 2])


def test_closed_form_path_agrees_with_step_path_on_a_real_rack():
    # The same estimate priced both ways on a single-switch rack (no placement approximations).
    topo = from_rack("gb300-nvl72")
    for algo in ("ring", "rabenseifner", "direct"):
        e = collectives.estimate(topo, "all_reduce", 2**28, algorithm=algo)
        alg = algorithms.get(algo)
        spec = CollectiveSpec(op="all_reduce", participants=72, count=2**28, pipeline=e.pipeline)
        from collectives.tuning import NCCL_PROTOCOLS
        from collectives.cost import base_latency, levels

        proto = next(x for x in NCCL_PROTOCOLS if x.name == e.protocol)
        closed = alg.closed_form(spec, levels(topo, topo.placement(), proto)) + base_latency(proto, alg.latency_class)
        assert closed == pytest.approx(e.seconds, rel=1e-9)


# -- anchors -----------------------------------------------------------------------------------------

def test_anchor_ring_all_reduce_8x_h100():
    # ASTRA-sim-validated HGX-H100 ring all_reduce ~370 GB/s busbw at 1 GiB (collectives.md).
    e = collectives.estimate("h100-node", "all_reduce", 2**30, algorithm="ring")
    assert e.busbw == pytest.approx(370e9, rel=0.15)
    assert e.protocol == "simple" and e.path == "steps"


def test_anchor_nvls_all_reduce_8x_h100():
    # nccl-tests maintainers: ~476 GB/s busbw with NVLS on 8x H100 (specs.md).
    e = collectives.estimate("h100-node", "all_reduce", 2**30, algorithm="in_switch")
    assert e.busbw == pytest.approx(476e9, rel=0.15)
    auto = collectives.estimate("h100-node", "all_reduce", 2**30)
    assert auto.algorithm == "in_switch"
    assert any("nvlsEfficiency" in s for s in auto.sources)


def test_million_chip_all_reduce_estimate_is_closed_form():
    # Its speed (< 50 ms) is measured in benchmarks/bench_scale.py; here: it never builds per-chip state.
    rack = devices.parse_rack("trn3-ultraserver*7282")
    tracemalloc.start()
    e = collectives.estimate(rack, "all_reduce", 2**30)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert e.participants == 1_048_608 and e.path == "closed-form"
    assert e.algorithm == "hierarchical" and 0 < e.seconds < 1.0
    assert peak < 20_000_000  # bytes: far below an object per chip


# -- estimate() --------------------------------------------------------------------------------------

def test_busbw_factors_and_sizes():
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        assert busbw_factor(op, 8) == pytest.approx(7 / 8)
    for op in ("broadcast", "reduce", "send_recv"):
        assert busbw_factor(op, 8) == 1
    assert reported_bytes("all_gather", 10, 4, 8) == 320 and reported_bytes("all_reduce", 10, 4, 8) == 40
    e = collectives.estimate("h100-node", "all_gather", 8 * 2**20)
    assert e.nbytes == 8 * 2**20
    assert e.algbw == pytest.approx(e.nbytes / e.seconds)
    assert e.busbw == pytest.approx(e.algbw * 7 / 8)
    assert e.modelled is True


def test_all_to_allv_reports_on_the_largest_rank():
    splits = ((0, 100, 100, 100), (10, 0, 10, 10), (10, 10, 0, 10), (10, 10, 10, 0))
    plan = collectives.plan("h100-node", "all_to_all", 0, 4, slots=[0, 1, 2, 3], splits=splits)
    assert plan.estimate.nbytes == 300 * 4
    assert plan.estimate.busbw == pytest.approx(plan.estimate.algbw * 3 / 4)
    even = collectives.plan("h100-node", "all_to_all", 100, 4, slots=[0, 1, 2, 3])
    assert plan.estimate.seconds == pytest.approx(even.estimate.seconds, rel=0.05)  # rank 0's port is the bottleneck


def test_automatic_choice_is_the_fastest_and_can_be_overridden():
    for n in (1024, 2**20, 2**30):
        e = collectives.estimate("fusion-default", "all_reduce", n)
        assert e.seconds == pytest.approx(min(e.alternatives.values()))
        forced = collectives.estimate("fusion-default", "all_reduce", n, algorithm="tree")
        assert forced.algorithm == "tree" and forced.seconds >= e.seconds


def test_errors_list_accepted_values():
    with pytest.raises(ValueError, match="accepted: .*ring"):
        collectives.estimate("h100-node", "all_reduce", 1024, algorithm="nope")
    with pytest.raises(ValueError, match="algorithms for all_to_all: direct"):
        collectives.estimate("h100-node", "all_to_all", 1024, algorithm="ring")
    with pytest.raises(ValueError, match="accepted: all_reduce"):
        collectives.estimate("h100-node", "allfoo", 1024)
    with pytest.raises(ValueError, match="in-switch"):
        collectives.estimate("fusion-default", "all_reduce", 1024, algorithm="in_switch")
    with pytest.raises(ValueError, match="protocol"):
        collectives.estimate("h100-node", "all_reduce", 1024, protocol="fast")
    with pytest.raises(ValueError, match="slot"):
        collectives.estimate("h100-node", "all_reduce", 1024, slots=[0, 99])


def test_every_op_has_an_estimate_and_zero_bytes_cost_nothing():
    for op in collectives.OPS:
        e = collectives.estimate("trn3:2+h100:2", op, 4096)
        assert e.seconds > 0 and e.op == op
        if op != "barrier":
            assert collectives.estimate("h100-node", op, 0).seconds == 0.0
    one = collectives.estimate("h100-node", "all_reduce", 4096, slots=[3])
    assert one.seconds == 0.0 and one.participants == 1


def test_estimate_accepts_rackspecs_strings_and_slot_subsets():
    spec = devices.parse_rack("h100-node*2")
    a = collectives.estimate(spec, "all_reduce", 2**20, slots=range(8))
    b = collectives.estimate("h100-node", "all_reduce", 2**20)
    assert a.seconds == pytest.approx(b.seconds)
    cross = collectives.estimate(spec, "all_reduce", 2**20, slots=[0, 8])
    assert cross.seconds > collectives.estimate(spec, "all_reduce", 2**20, slots=[0, 1]).seconds
    sr = collectives.estimate(spec, "send_recv", 2**20, slots=[0, 9])
    assert sr.busbw == pytest.approx(sr.algbw)


def test_plan_returns_the_schedule_it_priced():
    from collectives.tuning import NCCL_PROTOCOLS
    from collectives.cost import base_latency

    plan = collectives.plan("h100-node*2", "all_reduce", 1 << 20, 4)
    est, sched = plan.estimate, plan.schedule
    assert sched.algorithm == est.algorithm and sched.spec.pipeline == est.pipeline
    proto = next(x for x in NCCL_PROTOCOLS if x.name == est.protocol)
    topo = from_rack("h100-node*2")
    again = base_latency(proto, sched.latency_class) + schedule_time(sched, topo, plan.slots, proto)
    assert again == pytest.approx(est.seconds)


def test_plans_always_carry_the_schedule_they_price():
    # gb300-nvl72 in_switch is chosen on its closed form; the plan still builds it, prices it step by step
    # (equal on one switch, up to the rounding of uneven chunks) and the executor can run it.
    plan = collectives.plan("gb300-nvl72", "all_reduce", 2**26, 2)
    assert plan.schedule is not None and plan.estimate.path == "steps"
    assert plan.estimate.seconds == pytest.approx(collectives.estimate("gb300-nvl72", "all_reduce", 2**27).seconds,
                                                  rel=1e-4)
    big = collectives.plan("h100-node*16", "all_reduce", 2**20, 4)
    assert big.schedule is not None and big.schedule.spec.groups is not None
    huge = collectives.plan("trn3-ultraserver*7282", "all_reduce", 2**20, 4)
    assert huge.schedule is None and huge.estimate.path == "closed-form"


def test_hierarchical_wins_across_a_slow_network():
    e = collectives.estimate("h100-node*4", "all_reduce", 2**30)
    assert e.algorithm == "hierarchical"
    flat = collectives.estimate("h100-node*4", "all_reduce", 2**30, algorithm="ring")
    assert flat.seconds > e.seconds


def test_torus_neighbours_are_cheaper_than_far_ranks():
    near = collectives.estimate("trn2-instance", "send_recv", 2**26, slots=[0, 1])
    far = collectives.estimate("trn2-instance", "send_recv", 2**26, slots=[0, 10])
    assert far.seconds > near.seconds


def test_pipeline_depth_is_chosen_by_the_model():
    small = collectives.estimate("h100-node", "broadcast", 4096, algorithm="ring")
    large = collectives.estimate("h100-node", "broadcast", 2**30, algorithm="ring")
    assert small.pipeline <= large.pipeline and large.pipeline > 1


def test_spec_validation():
    with pytest.raises(ValueError):
        CollectiveSpec(op="broadcast", participants=4, count=1, root=4)
    with pytest.raises(ValueError):
        CollectiveSpec(op="send_recv", participants=3, count=1)
    with pytest.raises(ValueError):
        CollectiveSpec(op="all_to_all", participants=2, count=1, splits=((1, 2),))
    spec = CollectiveSpec(op="all_reduce", participants=4, count=8)
    with pytest.raises(ValueError, match="implements"):
        algorithms.get("binomial").build(spec)
    assert replace(spec, count=9).count == 9


def test_a_new_algorithm_is_planned_through_its_hooks(monkeypatch):
    """The planner never asks which algorithm it prices: a new one (here made up: direct's pairwise
    all_reduce, with two variants that halve or keep its closed form) is found in the registry and
    priced, labelled and described through the Algorithm hooks alone."""
    from collectives.algorithms.direct import Direct

    bound = []

    class Halving(Direct):
        name = "halving"
        ops = frozenset({"all_reduce"})

        def variants(self, op):
            return [{"outer": "ring"}, {"outer": "tree"}]

        def bind(self, spec, topo, slots, placement, *, schedule):
            bound.append((spec.outer, schedule, placement.participants))
            return spec

        def label(self, spec):
            return f"halving({spec.outer})"

        def detail(self, spec):
            return f"{spec.outer} variant"

        def _closed(self, spec, levels):
            return super()._closed(spec, levels) / (2 if spec.outer == "tree" else 1)

    registry = dict(algorithms._registry(), halving=Halving())
    monkeypatch.setattr(algorithms, "_registry", lambda: registry)
    p = 200  # 2 p^2 transfers > STEP_LIMIT: priced in closed form
    topo = Topology.ideal(p, A, B, G)
    est = collectives.estimate(topo, "all_reduce", 1 << 20, algorithm="halving")
    direct = collectives.estimate(topo, "all_reduce", 1 << 20, algorithm="direct")
    assert set(est.alternatives) == {"halving(ring)", "halving(tree)"}
    assert est.alternatives["halving(ring)"] == pytest.approx(direct.seconds)
    assert est.seconds == pytest.approx(direct.seconds / 2) and est.detail == "tree variant"
    assert ("tree", False, p) in bound and all(not schedule for _, schedule, _ in bound)
    # A candidate of the automatic choice too.
    auto = collectives.estimate(topo, "all_reduce", 1 << 20)
    assert auto.alternatives["halving(tree)"] == pytest.approx(est.seconds)
