"""Progress of long work, one protocol for every layer: ``progress(done, total, what)``.

A long loop (a search, a sweep, a set of training runs) takes ``progress``: a callable it calls with the
items finished so far, the number it will do in all (None when unknown) and a few words on what runs now;
it calls it once more with ``done == total`` when it ends (early or not), which closes a bar. What a
caller may pass, turned into such a callable by :func:`reporter`:

* ``None``: a bar on a terminal (tqdm when installed), nothing otherwise (a log, a pipe, a test);
* ``True`` / ``False``: a bar (when tqdm is installed) / nothing;
* a callable: it (:func:`lines` writes ``[3/10] what`` lines, for logs).

The planner owns the protocol because it is the lowest layer that reports progress; :mod:`interop` (the
collective sweep, the numerics drift) and the CLI use the same one.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional, TextIO, Union

Progress = Callable[[int, Optional[int], str], None]
"""``progress(done, total, what)``: ``done`` items of ``total`` (None: unknown) finished, ``what`` running."""


def _silent(done: int, total: int | None, what: str) -> None:
    return None


class _Bar:
    """A tqdm bar behind the protocol: made on the first report, closed when ``done`` reaches ``total``."""

    def __init__(self, desc: str, unit: str, leave: bool) -> None:
        self.desc, self.unit, self.leave = desc, unit, leave
        self.bar = None

    def __call__(self, done: int, total: int | None, what: str) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.desc, unit=self.unit, leave=self.leave)
        self.bar.update(done - self.bar.n)
        if what:
            self.bar.set_postfix_str(what, refresh=False)
        if total is not None and done >= total:
            self.bar.close()
            self.bar = None


def bar(desc: str, *, unit: str = "item", leave: bool = False) -> Progress:
    """A progress bar (tqdm) as a :data:`Progress`; nothing when tqdm is not installed."""
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return _silent
    return _Bar(desc, unit, leave)


def lines(stream: TextIO | None = None) -> Progress:
    """A :data:`Progress` writing ``[done+1/total] what`` before each item (to stderr unless given)."""

    def write(done: int, total: int | None, what: str) -> None:
        if total is None or done < total:
            print(f"[{done + 1}/{total if total is not None else '?'}] {what}", file=stream or sys.stderr,
                  flush=True)

    return write


def reporter(progress: Union[None, bool, Progress], desc: str, *, unit: str = "item") -> Progress:
    """What a long loop calls, from what its caller passed (see the module doc); ``desc`` names the bar."""
    if progress is None:
        return bar(desc, unit=unit) if sys.stderr is not None and sys.stderr.isatty() else _silent
    if progress is True:
        return bar(desc, unit=unit)
    if progress is False:
        return _silent
    if callable(progress):
        return progress
    raise TypeError(f"progress: expected None, True, False or a callable progress(done, total, what), got "
                    f"{progress!r}")


__all__ = ["Progress", "bar", "lines", "reporter"]
