"""The one plain-text table of the project: every listing, report and CLI prints through :func:`table`.

A table fits :data:`MAX_WIDTH` columns: past it, the widest columns wrap between words (never a word cut, never a
character lost); a table whose columns cannot fit side by side even wrapped is printed as several tables one under
the other, each repeating the first column (the labels) and its header. :func:`paragraph` wraps the free text
around a table to the same width; :func:`markdown` writes a table for a Markdown renderer instead of a terminal.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

MAX_WIDTH = 120
"""Columns a table may take (a terminal's, a report's); wider tables wrap, then split (see the module doc)."""

_GAP = 2
"""Spaces between two columns."""

_NARROWEST = 12
"""A column that wraps is at least this wide (or its longest word, if longer)."""


def table(headers: list[str] | None, rows: list[list[object]], align: str | None = None, rule: bool = True,
          wrap: Sequence[int | None] | None = None, width: int | None = MAX_WIDTH) -> str:
    """A plain-text table; ``headers``: one per column, or None for no header line; ``align`` is one of 'l'/'r' per
    column (default: text left, numbers right); ``rule``: a line of dashes under the headers; ``wrap``: per column,
    a width past which the column's cells continue on the next lines (None: no limit); ``width``: the most
    columns of text the table takes (default :data:`MAX_WIDTH`; None: no limit): see the module doc.

    Cells are never cut: a column is as wide as its widest cell, or its cells wrap (every character kept).
    """
    count = len(headers) if headers is not None else max((len(r) for r in rows), default=0)
    if wrap is not None and len(wrap) != count:
        raise ValueError(f"table: wrap gives {len(wrap)} widths for {count} columns")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise ValueError(f"width: expected a positive number of columns or None, got {width!r}")
    cells = [[str(c) for c in row] + [""] * (count - len(row)) for row in rows]
    if align is None:
        align = "".join("r" if rows and i < len(rows[0]) and isinstance(rows[0][i], (int, float)) else "l"
                        for i in range(count))
    heads = list(headers) if headers is not None else None
    limits = list(wrap) if wrap is not None else [None] * count
    natural = [max([len(heads[i]) if heads else 0] + [max((len(x) for x in _wrapped(r[i], limits[i])), default=0)
                                                      for r in cells]) for i in range(count)]
    if width is not None and sum(natural) + _GAP * (count - 1) > width:
        narrowest = _narrowest(heads, cells, limits)
        # the first column (the labels) whole where the others can wrap enough; else every column wraps
        fitted = _fit(natural, [natural[0]] + narrowest[1:], width) or _fit(natural, narrowest, width)
        if fitted is None:
            return "\n\n".join(table(None if heads is None else [heads[0]] + [heads[i] for i in part],
                                     [[r[0]] + [r[i] for i in part] for r in cells],
                                     align[0] + "".join(align[i] for i in part), rule,
                                     None if wrap is None else [wrap[0]] + [wrap[i] for i in part], width)
                               for part in _groups(natural, _narrowest(heads, cells, limits), width))
        limits = [f if f < n else lim for f, n, lim in zip(fitted, natural, limits)]
    lines_of = [[_wrapped(c, limits[i]) for i, c in enumerate(row)] for row in cells]
    head_lines = [_wrapped(h, limits[i]) for i, h in enumerate(heads)] if heads is not None else None
    widths = [max([max(len(x) for x in head_lines[i]) if head_lines else 0]
                  + [len(line) for r in lines_of for line in r[i]]) for i in range(count)]

    def fmt(row: list[str]) -> str:
        return (" " * _GAP).join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, align)).rstrip()

    def block(row: list[list[str]]) -> list[str]:
        return [fmt([c[k] if k < len(c) else "" for c in row]) for k in range(max(len(c) for c in row))]

    lines = block(head_lines) + ([fmt(["-" * w for w in widths])] if rule else []) if head_lines is not None else []
    for row in lines_of:
        lines.extend(block(row))
    return "\n".join(lines)


def _narrowest(heads: list[str] | None, cells: list[list[str]], limits: list[int | None]) -> list[int]:
    """Per column, the narrowest it may wrap to: its longest word (nothing is cut), at least :data:`_NARROWEST`
    (or its widest cell, when that is narrower)."""
    out = []
    for i in range(len(limits)):
        texts = ([heads[i]] if heads else []) + [r[i] for r in cells]
        words = max((len(w) for t in texts for w in t.split()), default=0)
        widest = max((len(t) for t in texts), default=0)
        out.append(min(widest, max(words, _NARROWEST)) if limits[i] is None else min(limits[i], widest))
    return out


def _fit(natural: list[int], narrowest: list[int], width: int) -> list[int] | None:
    """Column widths within ``width``: every column capped at one common width (the widest cap that fits, no column
    under its narrowest); None when the narrowest widths do not fit side by side."""
    room = width - _GAP * (len(natural) - 1)
    if sum(narrowest) > room:
        return None
    low, high = 1, max(natural)
    while low < high:  # the largest cap whose widths fit the room
        cap = (low + high + 1) // 2
        if sum(max(lo, min(n, cap)) for n, lo in zip(natural, narrowest)) <= room:
            low = cap
        else:
            high = cap - 1
    return [max(lo, min(n, low)) for n, lo in zip(natural, narrowest)]


def _groups(natural: list[int], narrowest: list[int], width: int) -> list[list[int]]:
    """The columns after the first in runs that fit ``width`` beside the first, each at most as wide as an even
    share of the room (every column at least its narrowest)."""
    first = min(natural[0], max(narrowest[0], width // 3))
    room = width - first - _GAP
    groups: list[list[int]] = [[]]
    used = 0
    for i in range(1, len(natural)):
        need = max(narrowest[i], min(natural[i], room // 2)) + _GAP
        if groups[-1] and used + need > room:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += need
    return groups


def paragraph(text: str, width: int = MAX_WIDTH, indent: str = "") -> str:
    """``text`` wrapped between words into lines of at most ``width`` columns (continuation lines after
    ``indent``): the free text a CLI prints around its tables. A word longer than a line (a long URL) is split
    after its last ``/`` that fits (else at the width) and continues on the next line: every character is kept,
    and no line passes the width."""
    if len(indent) >= width:
        raise ValueError(f"indent: {len(indent)} columns leave no room in a width of {width}")
    out = []
    for line in textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                              break_on_hyphens=False):
        while len(line) > width:
            cut = line.rfind("/", 0, width) + 1
            if cut <= len(indent) or not line[:cut].strip():
                cut = width
            out.append(line[:cut])
            line = indent + line[cut:]
        out.append(line)
    return "\n".join(out)


def markdown(headers: list[str], rows: list[list[object]]) -> str:
    """The same table as Markdown, for a renderer (a document, an issue): one line per row, no cell wrapped, a
    ``|`` in a cell escaped. A terminal reads :func:`table` instead."""
    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "---|" * len(headers)] + [line(r) for r in rows])


def _wrapped(text: str, width: int | None) -> list[str]:
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
