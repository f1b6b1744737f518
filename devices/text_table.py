"""The one plain-text table of the project: every listing, report and CLI prints through :func:`table`."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence


def table(headers: list[str], rows: list[list[object]], align: str | None = None, rule: bool = True,
          wrap: Sequence[int | None] | None = None) -> str:
    """A plain-text table; ``align`` is one of 'l'/'r' per column (default: text left, numbers right);
    ``rule``: a line of dashes under the headers; ``wrap``: per column, a width past which the column's cells
    continue on the next lines (None: no limit).

    Cells are never cut: a column is as wide as its widest cell, or its cells wrap (every character kept).
    """
    if wrap is not None and len(wrap) != len(headers):
        raise ValueError(f"table: wrap gives {len(wrap)} widths for {len(headers)} columns")
    cells = [[str(c) for c in row] for row in rows]
    if align is None:
        align = "".join("r" if rows and isinstance(rows[0][i], (int, float)) else "l" for i in range(len(headers)))
    lines_of = [[_wrapped(c, None if wrap is None else wrap[i]) for i, c in enumerate(row)] for row in cells]
    widths = [max([len(h)] + [len(line) for r in lines_of for line in r[i]]) for i, h in enumerate(headers)]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, align)).rstrip()

    lines = [fmt(headers)] + ([fmt(["-" * w for w in widths])] if rule else [])
    for row in lines_of:
        for k in range(max(len(c) for c in row)):
            lines.append(fmt([c[k] if k < len(c) else "" for c in row]))
    return "\n".join(lines)


def _wrapped(text: str, width: int | None) -> list[str]:
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
