"""Formatting helpers shared by the CLI, the demo and the reports."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """Binary units, two decimals: ``1.50 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


def table(headers: list[str], rows: list[list[object]], align: str | None = None) -> str:
    """A plain-text table; ``align`` is one of 'l'/'r' per column (default: text left, numbers right)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if align is None:
        align = "".join("r" if rows and isinstance(rows[0][i], (int, float)) else "l" for i in range(len(headers)))

    def fmt(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, align)).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)
