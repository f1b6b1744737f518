"""Rack files at the edges (issue 17): a seed a generator cannot take, a number longer than Python reads,
and many overrides, each refused by file and key or resolved exactly as applying them one after another."""

from __future__ import annotations

import random

import pytest

from devices.rack.intervals import last_wins, value_at
from devices.rack.numerics import NumericsSpec
from devices.rack.toml_file import loads

SLOTS = '[[slots]]\nkind = "h100"\ncount = 8\n'


@pytest.mark.parametrize("seed", [-1, 2**64, 10**30])
def test_a_seed_outside_64_bits_is_refused_by_its_key(seed):
    with pytest.raises(ValueError, match=r"stochastic_rounding_seed: expected .*0 to 2\*\*64 - 1"):
        loads(f"[rack]\nnumerics = \"device\"\nstochastic_rounding_seed = {seed}\n" + SLOTS)


def test_a_large_seed_loads_and_is_kept():
    spec = loads("[rack]\nnumerics = \"device\"\nstochastic_rounding = true\nstochastic_rounding_seed = "
                 f"{10**14}\n" + SLOTS)
    assert spec.numerics.seed == 10**14


@pytest.mark.parametrize("where", ["rack", "slots"])
def test_an_integer_longer_than_python_reads_names_the_file_line_and_key(where):
    huge = "9" * 4301
    text = (f"[rack]\nreplicas = {huge}\n" + SLOTS) if where == "rack" else \
        f'[[slots]]\nkind = "h100"\ncount = {huge}\n'
    with pytest.raises(ValueError) as error:
        loads(text, source="file big.toml")
    message = str(error.value)
    key = "replicas" if where == "rack" else "count"
    assert message.startswith("toml: file big.toml: line ") and f"key '{key}'" in message
    assert "4300 digits" in message


def _sequential(width: int, ranges):
    """The reference: paint each range in order over a list (what applying overrides one by one means)."""
    cells = [None] * width
    for start, stop, value in ranges:
        for i in range(start, stop):
            cells[i] = value
    return cells


@pytest.mark.parametrize("seed", range(5))
def test_last_wins_equals_painting_the_ranges_in_order(seed):
    rng = random.Random(seed)
    width = rng.randint(1, 60)
    ranges = []
    for _ in range(rng.randint(0, 40)):
        a = rng.randrange(width)
        ranges.append((a, rng.randint(a, width), rng.choice("abc")))
    pieces = last_wins(ranges)
    starts = [p[0] for p in pieces]
    assert [value_at(pieces, starts, i, None) for i in range(width)] == _sequential(width, ranges)
    assert all(p[1] <= q[0] for p, q in zip(pieces, pieces[1:]))  # sorted and disjoint
    assert all(p[1] < q[0] or p[2] != q[2] for p, q in zip(pieces, pieces[1:]))  # equal neighbours merged


@pytest.mark.parametrize("seed", range(3))
def test_overrides_and_numerics_ranges_equal_applying_them_one_by_one(seed):
    rng = random.Random(100 + seed)
    width = 24
    lines = ['[[slots]]\nkind = "h100"\ncount = 12\n', '[[slots]]\nkind = "trn2"\ncount = 12\n']
    caps, backs, modes = [], [], []
    for _ in range(30):
        a = rng.randrange(width)
        b = rng.randrange(a, width)
        entry = f'[[overrides]]\nslots = "{a}-{b}"\n'
        if rng.random() < 0.6:
            cap = rng.choice([2, 3, 4]) * 2**30
            entry += f"capacity = {cap}\n"
            caps.append((a, b + 1, cap))
        if rng.random() < 0.4:
            backing = rng.choice(["emulated", "auto"])
            entry += f'backing = "{backing}"\n'
            backs.append((a, b + 1, backing))
        if rng.random() < 0.5:
            mode = rng.choice(["exact", "device"])
            entry += f'numerics = "{mode}"\n'
            modes.append((a, b + 1, mode))
        lines.append(entry)
    spec = loads("".join(lines))
    want_caps, want_backs, want_modes = (_sequential(width, r) for r in (caps, backs, modes))
    for i in range(width):
        slot = spec.slot(i)
        assert slot.kind == ("h100" if i < 12 else "trn2")
        assert spec.groups[[g.first <= i < g.stop for g in spec.groups].index(True)].capacity == want_caps[i]
        assert slot.backing == (want_backs[i] or "auto")
        if spec.numerics is not None:
            assert spec.numerics.mode_of(i) == (want_modes[i] or "exact")


def test_many_overrides_resolve_per_slot():
    # Applied one after another, each override split every run made so far (quadratic: 100,000 took 25 s);
    # the benchmark times 100,000 (benchmarks/bench_rack_file.py), this checks what 20,000 resolve to.
    n = 20_000
    text = f'[[slots]]\nkind = "h100"\ncount = {2 * n}\n' + "".join(
        f'[[overrides]]\nslots = "{2 * i}"\ncapacity = {2**30 + i}\nnumerics = "device"\n' for i in range(n))
    spec = loads(text)
    assert len(spec.groups) == 2 * n
    assert spec.groups[2 * 777].capacity == 2**30 + 777 and spec.groups[2 * 777 + 1].capacity is None
    assert spec.numerics.mode_of(2 * 777) == "device" and spec.numerics.mode_of(2 * 777 + 1) == "exact"


def test_numerics_spec_ranges_after_construction():
    spec = NumericsSpec("exact", ((0, 4, "device"), (2, 1, "exact")))
    assert [spec.mode_of(i) for i in range(5)] == ["device", "device", "exact", "device", "exact"]
