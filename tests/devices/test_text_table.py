"""The one text table: within 120 columns, wrapped between words or split into blocks, never a character lost."""

from __future__ import annotations

from collections import Counter

import pytest

from devices.text_table import MAX_WIDTH, markdown, paragraph, table


def _words(rows) -> Counter:
    return Counter(w for row in rows for cell in row for w in str(cell).split())


def test_a_table_that_fits_is_printed_as_it_always_was():
    assert table(["kind", "TFLOP/s"], [["h100", 989], ["trn2", 667]]) == (
        "kind  TFLOP/s\n----  -------\nh100      989\ntrn2      667")


def test_a_wide_table_wraps_its_widest_columns_between_words_and_keeps_every_word():
    rows = [[f"row {i}", "weights 72.7 GB + KV cache 72.6 GB per chip, " * 3, f"p50 {i}.5 / p90 10,383.61 ms",
             "compute-bound: compute 417.25 ms (95%), memory 13.38 ms (3%), overhead 8.61 ms (2%)"]
            for i in range(3)]
    text = table(["", "replicas", "TTFT", "prefill iteration"], rows, rule=False)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= MAX_WIDTH < len(" ".join(rows[0]))
    assert Counter(text.split()) == _words(rows) + Counter(["replicas", "TTFT", "prefill", "iteration"])
    assert lines[1].startswith("row 0 ")  # the label column is kept whole while the others can wrap


def test_columns_that_cannot_sit_side_by_side_follow_in_blocks_under_their_labels():
    heads = ["figure"] + [f"rack{k}" for k in range(12)]
    rows = [[name] + [f"{name}-{k}-{'x' * 14}" for k in range(12)] for name in ("TTFT", "TPOT")]
    text = table(heads, rows, rule=False, width=80)
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and max(len(line) for line in text.splitlines()) <= 80
    for block in blocks:  # each block repeats the labels and heads its own columns
        assert block.splitlines()[0].startswith("figure") and "TTFT" in block and "TPOT" in block
    assert Counter(text.split()) - Counter(["figure"] * len(blocks) + ["TTFT", "TPOT"] * len(blocks)) == \
        _words([heads[1:]] + [row[1:] for row in rows])


def test_bad_widths_are_refused_by_name():
    with pytest.raises(ValueError, match="width: expected a positive number of columns or None, got 0"):
        table(["a"], [["b"]], width=0)
    with pytest.raises(ValueError, match="table: wrap gives 2 widths for 1 columns"):
        table(["a"], [["b"]], wrap=[3, 4])


def test_a_paragraph_splits_a_word_longer_than_a_line_after_a_slash_and_keeps_every_character():
    url = "https://example.org/" + "/".join(f"part{k:02d}" for k in range(30)) + ".pdf"  # 233 characters
    text = f"[7] A document (its publisher, {url}; read 2025-12-02) [primary]"
    lines = paragraph(text, 80, "    ").splitlines()
    assert max(len(line) for line in lines) <= 80 < len(url)
    assert "".join(text.split()) == "".join("".join(lines).split())  # every character, in order
    pieces = [line for line in lines if "part" in line]
    assert "".join(p.strip() for p in pieces) == url + ";"
    # each piece ends after a '/' and is as long as fits: the next segment ("partNN/") would pass the width
    assert all(p.endswith("/") and len(p) + len("part00/") > 80 for p in pieces[:-1]) and len(pieces) == 4
    assert paragraph("x" * 30, 12) == "x" * 12 + "\n" + "x" * 12 + "\n" + "x" * 6  # no slash: at the width
    with pytest.raises(ValueError, match="indent: 12 columns leave no room in a width of 12"):
        paragraph("a b", 12, " " * 12)


def test_the_markdown_form_keeps_cells_whole_and_escapes_bars():
    assert markdown(["a", "b"], [[1, "x | y"], ["long " * 40, 2.5]]) == (
        "| a | b |\n|---|---|\n| 1 | x \\| y |\n| " + "long " * 40 + " | 2.5 |")
