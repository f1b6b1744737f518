"""The failure model against Meta's Llama 3 405B run, and its behaviour from 16K to 1M chips (pure Python)."""

from __future__ import annotations

import math

import pytest

from planner.goodput import (CHIP_FAILURE_RATE, LLAMA3_CHIPS, LLAMA3_DAYS, LLAMA3_EFFECTIVE, LLAMA3_PLANNED,
                                      LLAMA3_UNEXPECTED, FailureModel, job_goodput, scaling_table)


def test_llama3_run_reproduced():
    g = job_goodput(LLAMA3_CHIPS)
    # 466 interruptions in 54 days (the rate was derived from the unexpected ones: this checks the units).
    assert g.interruptions_per_day * LLAMA3_DAYS == pytest.approx(LLAMA3_UNEXPECTED + LLAMA3_PLANNED, rel=1e-9)
    # "More than 90 % effective training time", with the restart and checkpoint assumptions stated in the model.
    assert g.fraction > LLAMA3_EFFECTIVE
    assert g.fraction < 0.99  # and not trivially: failures do cost
    assert CHIP_FAILURE_RATE.status == "secondary" and "section 3.3.4" in CHIP_FAILURE_RATE.source


def test_young_interval_is_optimal():
    best = job_goodput(LLAMA3_CHIPS)
    for factor in (0.5, 0.8, 1.25, 2.0):
        other = job_goodput(LLAMA3_CHIPS, FailureModel(checkpoint_interval=best.checkpoint_interval * factor))
        assert other.fraction < best.fraction


def test_goodput_falls_with_scale_and_recovers_with_fast_restarts():
    sizes = [16384, 65536, 262144, 1048576]
    slow = [job_goodput(n).fraction for n in sizes]
    fast = [job_goodput(n, FailureModel(restart=30.0, checkpoint_cost=1.0)).fraction for n in sizes]
    assert slow == sorted(slow, reverse=True) and fast == sorted(fast, reverse=True)
    assert slow[-1] < 0.05  # a million chips fail every ~3 minutes: 5-minute restarts never catch up
    assert fast[-1] > 0.7
    table = scaling_table()
    assert "1,048,576" in table and "modelled" in table


def test_no_failures_means_full_goodput():
    g = job_goodput(1000, FailureModel(chip_failure_rate=0.0, planned_rate=0.0))
    assert g.fraction == 1.0 and math.isinf(g.mtbi)


def test_bad_inputs():
    with pytest.raises(ValueError, match="chips: expected a positive integer, got 0"):
        job_goodput(0)
    with pytest.raises(ValueError, match="restart: expected a non-negative number, got -1"):
        FailureModel(restart=-1)
    with pytest.raises(ValueError, match="checkpoint_interval: expected a positive number of seconds or None"):
        FailureModel(checkpoint_interval=0)
