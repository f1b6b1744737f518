"""``devices/SOURCES.md``, rendered from :data:`devices.sources.DOCUMENTS`.

``python -m devices.sources_md`` prints it, ``--write`` rewrites the file,
``--check`` exits 1 when the file is out of date (a test runs the same check).
"""

from __future__ import annotations

import sys
from pathlib import Path

from devices.sources import DOCUMENTS, KINDS

_HEADINGS = {"vendor": "Vendor documents", "press": "Press", "third party": "Third-party reproductions and papers",
             "code": "Source code and maintainers' answers", "measurement": "Measurements (not published)"}


def render() -> str:
    """``devices/SOURCES.md``: every document, grouped by kind, with what the catalogue takes from it."""
    lines = ["# Sources of the device catalogue", "",
             "Generated from `devices/sources.py` by `python -m devices.sources_md --write`; a test keeps this file and "
             "the catalogue in step. Every figure's source in `hybrid racks` cites one of these. Where the original "
             "could not be opened, the reproduction it was read through is named and the figure's status is "
             "`secondary`.", ""]
    for kind in KINDS:
        docs = [d for d in DOCUMENTS if d.kind == kind]
        if not docs:
            continue
        lines += [f"## {_HEADINGS[kind]}", ""]
        for d in docs:
            via = f" Read through {', '.join(d.via)}." if d.via else ""
            lines.append(f"- **{d.title}**. {d.publisher}. {d.url}. Read {d.read}.{via}"
                         + (f" Used for: {d.note}." if d.note else ""))
        lines.append("")
    return "\n".join(lines)


SOURCES_MD = Path(__file__).with_name("SOURCES.md")
"""Where :func:`render` is kept in the repository."""


def main(argv: list[str] | None = None) -> int:
    """``python -m devices.sources_md [--write | --check]``: print, write or check ``devices/SOURCES.md``."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args == ["--write"]:
        SOURCES_MD.write_text(text, encoding="utf-8")
        return 0
    if args == ["--check"]:
        current = SOURCES_MD.read_text(encoding="utf-8") if SOURCES_MD.exists() else ""
        if current != text:
            print(f"{SOURCES_MD} is out of date: run python -m devices.sources_md --write", file=sys.stderr)
            return 1
        return 0
    if args:
        print("usage: python -m devices.sources_md [--write | --check]", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
