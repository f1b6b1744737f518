"""A stack's own collective costs (planner.comm.ScaledPricer): the Trainium family's fitted factor and per-step
latency on the collectives of its chips, against the formula; nothing changes for other kinds."""

from __future__ import annotations

import pytest

import devices
from planner.comm import STEPS, CommPricer, ScaledPricer, scaled_pricer
from planner.fitted_efficiency import TRAINIUM, collective_factors


def test_factor_and_latency_per_ring_step():
    spec = devices.parse_rack("trn1-instance*2")
    base = CommPricer(spec)
    times, latency = 0.5, 45e-6
    pricer = ScaledPricer(base, spec, {"trn1": (times, latency)})
    for op, nbytes, group in (("all_gather", 64 << 20, range(0, 16)), ("reduce_scatter", 8 << 20, range(0, 4)),
                              ("all_reduce", 1 << 30, range(0, 32, 16))):
        steps = {"all_reduce": 2 * (len(group) - 1)}.get(op, len(group) - 1)
        assert pricer.seconds(op, nbytes, group) == pytest.approx(times * base.seconds(op, nbytes, group)
                                                                  + steps * latency)
    assert pricer.send(1 << 20, 0, 16) == pytest.approx(times * base.send(1 << 20, 0, 16) + latency)
    assert pricer.send(1 << 20, 3, 3) == 0.0 and pricer.seconds("all_gather", 1024, (5,)) == 0.0
    assert STEPS["all_reduce"](4) == 6 and STEPS["send_recv"](2) == 1


def test_only_kinds_with_their_own_costs_are_scaled():
    assert collective_factors(["h100", "b200"]) == {}
    assert collective_factors(["trn1", "trn3"]) == {
        k: (TRAINIUM.collectives.value, TRAINIUM.collective_latency.value) for k in ("trn1", "trn3")}
    spec = devices.parse_rack("h100-node")
    base = CommPricer(spec)
    assert scaled_pricer(base, spec, collective_factors(["h100"])) is base
    # A group spanning kinds pays the larger of its ends' costs.
    mixed = devices.parse_rack("trn1:2+h100:2")
    pricer = ScaledPricer(CommPricer(mixed), mixed, {"trn1": (2.0, 0.0)})
    assert pricer.seconds("all_reduce", 1 << 20, (0, 3)) == pytest.approx(
        2.0 * pricer.pricer.seconds("all_reduce", 1 << 20, (0, 3)))
