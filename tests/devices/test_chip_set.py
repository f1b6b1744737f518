"""devices.ChipSet: the peak, power, price on one basis, MFU and per-token cost and energy of a set of chips,
against the catalogue's figures summed by hand; a kind without a figure makes the set's figure unset, with why."""

from __future__ import annotations

import pytest

import devices
from devices import ChipSet, chip


def test_sums_match_the_catalogue_by_hand():
    chips = ChipSet.of({"h100": 8, "a100": 8})
    assert chips.chips == 16 and not chips.projected
    assert chips.peak("bfloat16") == pytest.approx(8 * 989e12 + 8 * 312e12)
    assert chips.power().value == pytest.approx(8 * 700 + 8 * 400) and chips.power().unit == "W"
    price = chips.price("capacity-block")
    assert price.value == pytest.approx(39.33 + 14.75) and price.basis == "capacity-block"
    assert price.statuses == ("secondary",) and len(price.figures) == 2
    assert chips.bases() == ("on-demand", "capacity-block")
    # MFU: model FLOPs done over the set's peak in the dtype.
    assert chips.mfu(1e15, 1.0, "bfloat16") == pytest.approx(1e15 / (8 * 989e12 + 8 * 312e12))
    assert chips.mfu(1e15, 0.0) == 0.0


def test_economics_per_step_and_per_token():
    money = ChipSet.of({"trn1": 512}).economics(seconds=21.36, tokens=1024 * 8192, basis="reserved-effective")
    usd = 512 * 8.197 / 16 * 21.36 / 3600
    assert money.usd == pytest.approx(usd)
    assert money.usd_per_million_tokens == pytest.approx(usd / (1024 * 8192) * 1e6)
    assert "reserved-effective; published" in money.cost_text()
    h100 = ChipSet.of({"h100": 8}).economics(seconds=2.0, tokens=1e6)
    assert h100.joules == pytest.approx(8 * 700 * 2.0) and h100.joules_per_token == pytest.approx(8 * 700 * 2.0 / 1e6)
    assert h100.basis == devices.DEFAULT_BASIS == "on-demand"


def test_a_kind_without_the_figure_unsets_the_whole_set_and_says_why():
    mixed = ChipSet.of({"h100": 8, "trn2": 4})
    price = mixed.price("on-demand")
    assert price.value is None and price.reason.startswith("trn2: ") and "third-party figures conflict" in price.reason
    money = mixed.economics(1.0, 1e6)
    assert money.usd is None and money.usd_per_million_tokens is None and "unset on on-demand" in money.cost_text()
    trn1 = ChipSet.of({"trn1": 16}).economics(1.0, 1e6)
    assert trn1.joules is None and "no Trainium (Trn1) board power" in trn1.energy_text()
    # A basis one kind lacks: the reason names the bases it has.
    assert "bases with a price: on-demand" in ChipSet.of({"b200": 8}).price("capacity-block").reason


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="price_basis: unknown basis 'spot'; accepted: on-demand, capacity-block"):
        ChipSet.of({"h100": 1}).price("spot")
    with pytest.raises(ValueError, match="counts: expected a non-negative chip count for 'h100', got -1"):
        ChipSet({"h100": -1})
    with pytest.raises(ValueError, match="kind: unknown chip kind 'h900'"):
        ChipSet({"h900": 1})
    assert ChipSet.of(devices.parse_rack("trn1-cluster-16")).counts == {"trn1": 256}
    assert ChipSet.of([("h100", 4), ("h100", 4)]).counts == {"h100": 8}
    assert ChipSet.of({"H100": 2, "h100": 1}).counts == {"h100": 3}


def test_every_kind_has_a_price_or_a_reason_and_a_power_or_a_reason():
    for kind in devices.kinds():
        c = chip(kind)
        for basis in devices.PRICE_BASES:
            rate = ChipSet.of({kind: 1}).price(basis)
            assert (rate.value is None) == (basis not in c.prices)
            assert rate.value is not None or rate.reason.strip()
        power = ChipSet.of({kind: 1}).power()
        assert power.value is not None or power.reason.strip()
