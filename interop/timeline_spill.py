"""A timeline's older records in a file: JSON lines, one record each, written as they leave the
timeline's window (``interop.set_timeline_window(spill=...)``) and read back by the trace export.

A record's sources are kept as their one-line text (``Figure.source``), which is all a trace shows. This
module does not import :mod:`interop.timelines` (which opens and reads its spill file here): it writes any
object with a record's fields and reads back the fields, which the timeline makes records of.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

_TUPLES = ("in_shapes", "out_shapes", "participants", "grid")


def _line(r) -> str:
    return json.dumps({
        "slot": r.slot, "stream": r.stream, "kind": r.kind, "op": r.op, "in_shapes": r.in_shapes,
        "out_shapes": r.out_shapes, "dtype": r.dtype, "start_ps": r.start_ps, "duration_ps": r.duration_ps,
        "flops": r.flops, "bytes": r.bytes, "bound": r.bound, "estimated_by_default": r.estimated_by_default,
        "projected": r.projected, "sources": [getattr(f, "source", str(f)) for f in r.sources], "peer": r.peer,
        "link": r.link, "participants": r.participants, "measured_s": r.measured_s, "grid": r.grid,
        "asynchronous": r.asynchronous,
    }, separators=(",", ":"))


def _tuple(value):
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


class SpillWriter:
    """The spill file of one timeline, truncated when opened (the timeline starts with it)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self._file = open(self.path, "w", encoding="utf-8")
        except OSError as error:
            raise ValueError(f"spill: cannot write the timeline's spill file {self.path!r}: "
                             f"{error.strerror or error}") from None

    def write(self, record) -> None:
        """Append one record (a ``TimelineRecord``)."""
        self._file.write(_line(record))
        self._file.write("\n")

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_spill(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The fields of each record of a spill file, oldest first (``TimelineRecord(**fields)``)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = json.loads(line)
            for name in _TUPLES:
                fields[name] = _tuple(fields[name])
            fields["sources"] = tuple(fields["sources"])
            yield fields


__all__ = ["SpillWriter", "read_spill"]
