"""The one plain-text table of the project: every listing, report and CLI prints through :func:`table`."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[object]], align: str | None = None, rule: bool = True) -> str:
    """A plain-text table; ``align`` is one of 'l'/'r' per column (default: text left, numbers right);
    ``rule``: a line of dashes under the headers.

    Cells are never cut: a column is as wide as its widest cell.
    """
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if align is None:
        align = "".join("r" if rows and isinstance(rows[0][i], (int, float)) else "l" for i in range(len(headers)))

    def fmt(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, align)).rstrip()

    lines = [fmt(headers)] + ([fmt(["-" * w for w in widths])] if rule else [])
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)
