"""What the `hybrid` paper commands print fits a 120-column terminal and keeps every figure (issue 30).

The commands run in this process (no interpreter per command). The reference for "no figure lost" is the same
content unwrapped: the sources view printed at an unlimited width, the claims as their Markdown table, the goodput
table as Markdown and the estimate's own goodput figures. `hybrid plan`'s table is checked in
tests/interop/live/test_plan.py (it needs the device), `hybrid bench collectives`' in
tests/collectives/test_collectives_hybrid.py.
"""

from __future__ import annotations

import re
from collections import Counter

from devices.text_table import MAX_WIDTH

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> Counter:
    return Counter(NUMBER.findall(text))


def _printed(capsys, argv: list[str]) -> str:
    from hybrid_cli import main

    assert main(argv) == 0
    return capsys.readouterr().out


def _assert_fits(text: str, what: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > MAX_WIDTH]
    assert not wide, f"hybrid {what}: {len(wide)} line(s) over {MAX_WIDTH} columns, e.g. {wide[0]!r}"


def test_racks_sources_fits_and_keeps_every_character(capsys, monkeypatch):
    import hybrid_cli.cmd_racks as racks

    text = _printed(capsys, ["racks", "--sources"])
    _assert_fits(text, "racks --sources")
    monkeypatch.setattr(racks, "WIDTH", 10**6)  # the same view unwrapped: one line per figure and document
    whole = _printed(capsys, ["racks", "--sources"])
    assert max(len(line) for line in whole.splitlines()) > 130  # there was something to wrap (two URLs > 120)
    assert "".join(text.split()) == "".join(whole.split())  # every character kept, in order


def test_claims_fit_and_keep_every_figure_of_their_markdown_table(capsys, monkeypatch):
    import planner.claims as claims

    rows = claims.claims()  # computed once; the command prints these rows
    monkeypatch.setattr(claims, "claims", lambda model, **kw: rows if model == claims.MODEL else None)
    text = _printed(capsys, ["claims"])
    _assert_fits(text, "claims")
    markdown = claims.table(rows, markdown=True)
    assert _numbers(markdown) - _numbers(text) == Counter()  # every figure of every cell, as often
    assert max(len(line) for line in markdown.splitlines()) > 300  # the cells are long: they did wrap
    assert _printed(capsys, ["claims", "--markdown"]).endswith(markdown + "\n")


def test_whatif_goodput_fits_and_keeps_every_figure(capsys):
    from planner.goodput import FailureModel, scaling_table
    from planner.whatif import whatif

    # docs/whatif.md's example, without its plot
    argv = ["whatif", "--model", "llama3-70b", "--rack", "trn3:144+gb300:72", "--tp", "8", "--gbs", "288", "--goodput"]
    text = _printed(capsys, argv)
    _assert_fits(text, " ".join(argv))
    est = whatif("llama3-70b", "trn3:144+gb300:72", parallel={"tp": 8}, global_batch=288, seq_len=8192)
    for unwrapped in (est.goodput(FailureModel()).describe(), scaling_table(est, markdown=True)):
        assert _numbers(unwrapped) - _numbers(text) == Counter(), unwrapped
