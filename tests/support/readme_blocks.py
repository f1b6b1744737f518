"""The fenced ```python blocks of the repository's Markdown documents, as runnable code.

A block may sit in a list item (indented fence); its code is dedented by the
fence's indentation. Each block knows its file, the line its code starts on
and the heading it sits under, so that a failure points at the document.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from tests.support import ROOT

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t]*#*[ \t]*$")


@dataclass(frozen=True)
class Block:
    """One fenced python block."""

    path: str
    """The document, relative to the repository root (``README.md``, ``docs/racks.md``)."""
    line: int
    """1-based line of the block's first code line in the document."""
    heading: str
    """The nearest heading above the block ('' before the first)."""
    code: str
    """The code, dedented by the fence's indentation."""


def documents() -> list[str]:
    """README.md and every docs/*.md, relative to the repository root: the documents whose examples run."""
    found = ["README.md"] if os.path.exists(os.path.join(ROOT, "README.md")) else []
    found += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                                                  recursive=True))
    return found


def blocks_of(path: str) -> list[Block]:
    """Every fenced block tagged ``python`` (or ``py``) in ``path``, in order."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    blocks: list[Block] = []
    heading = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence is None:
            title = _HEADING.match(line)
            if title:
                heading = title.group("title")
            i += 1
            continue
        indent, marker = fence.group("indent"), fence.group("fence")
        language = fence.group("info").split()[0].lower() if fence.group("info").strip() else ""
        close = re.compile(rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        start = i + 1
        while i < len(lines) and not close.match(lines[i]):
            text = lines[i]
            body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
            i += 1
        i += 1  # the closing fence
        if language in ("python", "py", "python3"):
            blocks.append(Block(path, start, heading, "\n".join(body) + "\n"))
    return blocks
