"""README.md's sample outputs are what the commands print today (tests/support/readme_samples.py runs them).

When a figure changes on purpose, `python -m tests.support.readme_samples --write` rewrites the samples.
"""

from __future__ import annotations

from tests.support import readme_samples as rs


def test_readme_sample_outputs_are_what_the_commands_print():
    messages = rs.check()
    assert not messages, "README.md's samples are stale (python -m tests.support.readme_samples --write):\n" + \
        "\n".join(messages)


def test_the_readme_has_sessions_to_check():
    _, commands = rs.sessions()
    assert any(c.text.startswith("hybrid run") for c in commands)
    assert all(c.samples for c in commands)


def test_a_changed_figure_is_reported_with_the_line_printed_instead():
    command = rs.Command(0, "x", [(1, "5 steps: 1.713 ms, peak memory 10.1 MiB"),
                                  (2, "hybrid run: a.py on rack (cuda:0 -> hybrid:4 (b200), ...)")])
    printed = ["noise", "5 steps: 1.049 ms, peak memory 10.1 MiB",
               "hybrid run: a.py on rack (cuda:0 -> hybrid:4 (b200), cuda:1 -> hybrid:5 (b200))"]
    assert rs.compare(command, printed) == [(1, command.samples[0][1], printed[1])]
    assert rs._with_figures(command.samples[0][1], printed[1]) == printed[1]
    assert rs.compare(command, printed[:1] + printed[2:]) == [(1, command.samples[0][1], None)]
    assert rs.compare(command, ["5 steps: 1.713 ms, peak memory 10.1 MiB"] + printed[2:]) == []


def test_a_float32_figure_may_print_one_unit_away_at_its_last_digit():
    # A loss to 6 decimals, as another CPU sums it: one unit at the last digit is the same figure; two are not.
    command = rs.Command(0, "x", [(1, "cpu: final loss 0.654923 after 5 steps")])
    assert rs.compare(command, ["cpu: final loss 0.654924 after 5 steps"]) == []
    assert rs.compare(command, ["cpu: final loss 0.654922 after 5 steps"]) == []
    assert rs.compare(command, ["cpu: final loss 0.654925 after 5 steps"]) != []
    assert rs.compare(command, ["cpu: final loss 0.65492 after 5 steps"]) != []  # printed otherwise
    assert rs.compare(command, ["cpu: final loss 0.654923 after 6 steps"]) != []  # counts stay exact
    # Modelled figures printed short stay exact.
    short = rs.Command(0, "x", [(1, "5 steps: 1.713 ms")])
    assert rs.compare(short, ["5 steps: 1.714 ms"]) != []
