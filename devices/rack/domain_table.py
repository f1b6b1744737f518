"""The domains of a rack, stored as runs of identical domains so a huge rack costs nothing per domain.

A flat ``"trn2:100000000"`` has 6,250,000 tori of 16 chips; kept one object
each, parsing it took ~40 s and ``"h100:1000000000000"`` exhausted memory.
:class:`DomainTable` keeps :class:`DomainRun` entries instead (one domain and
how many times it repeats back to back) and builds a :class:`DomainSpec` only
when one is asked for.  To every reader it is a sequence of domains, indexable
and iterable exactly as the tuple it replaces; :attr:`DomainTable.runs` is the
compact form for code that wants to work per run (a topology over a million
chips).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, overload

from devices.rack.parts import DomainSpec, INT64_MAX, check_int64

_NUMBERED = re.compile(r"^(.*?)(0|[1-9][0-9]*)$")


def split_name(name: str) -> tuple[str, int | None]:
    """``"torus12"`` -> ``("torus", 12)``; a name without a trailing number -> ``(name, None)``."""
    match = _NUMBERED.match(name)
    return (match.group(1), int(match.group(2))) if match else (name, None)


@dataclass(frozen=True, slots=True)
class DomainRun:
    """``repeat`` identical domains back to back: copy ``i`` starts ``i * domain.count`` slots after
    ``domain.first`` and is named with the number of ``domain.name`` plus ``i`` (``torus0``, ``torus1``, ...)."""

    domain: DomainSpec
    """The first domain of the run."""
    repeat: int = 1
    """How many domains the run holds, positive."""

    def __post_init__(self) -> None:
        if not isinstance(self.domain, DomainSpec):
            raise ValueError(f"domains: expected DomainSpec entries, got {self.domain!r}")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat <= 0:
            raise ValueError(f"repeat: expected a positive integer, got {self.repeat!r}")
        if self.repeat > 1 and split_name(self.domain.name)[1] is None:
            raise ValueError(f"repeat: a repeated domain's name must end in a number (its copies count up from "
                             f"it), got {self.domain.name!r}")
        check_int64(self.domain.first + self.domain.count * self.repeat, "repeat", "the last slot of the run")

    @property
    def first(self) -> int:
        """First slot of the run."""
        return self.domain.first

    @property
    def stop(self) -> int:
        """One past the last slot of the run."""
        return self.domain.first + self.domain.count * self.repeat

    def copy(self, i: int) -> DomainSpec:
        """Domain ``i`` of the run (``0 <= i < repeat``)."""
        if i == 0:
            return self.domain
        stem, number = split_name(self.domain.name)
        return replace(self.domain, name=f"{stem}{number + i}", first=self.domain.first + i * self.domain.count)

    def last(self) -> DomainSpec:
        """The run's last domain."""
        return self.copy(self.repeat - 1)

    def _continues(self, nxt: DomainSpec) -> bool:
        # True when `nxt` is exactly the domain this run would hold next.
        stem, number = split_name(self.domain.name)
        return number is not None and nxt == replace(
            self.domain, name=f"{stem}{number + self.repeat}", first=self.stop)


def _runs(entries: Iterable[DomainSpec | DomainRun]) -> tuple[DomainRun, ...]:
    # Canonical form: sorted by first slot, consecutive copies merged, so equal layouts have equal runs.
    items = []
    for entry in entries:
        run = entry if isinstance(entry, DomainRun) else DomainRun(entry)
        items.append(run)
    items.sort(key=lambda r: r.first)
    merged: list[DomainRun] = []
    for run in items:
        if merged and merged[-1]._continues(run.domain):
            merged[-1] = DomainRun(merged[-1].domain, merged[-1].repeat + run.repeat)
        else:
            merged.append(run)
    return tuple(merged)


class DomainTable(Sequence):
    """The domains of a rack in slot order, held as :class:`DomainRun` entries (a read-only sequence)."""

    __slots__ = ("_runs", "_firsts", "_offsets", "_len")

    def __init__(self, entries: Iterable[DomainSpec | DomainRun] = ()):
        """From domains and runs in any order (sorted by first slot; consecutive copies are merged)."""
        runs = entries._runs if isinstance(entries, DomainTable) else _runs(entries)
        offsets, total = [], 0
        for run in runs:
            offsets.append(total)
            total += run.repeat
        self._runs = runs
        self._firsts = tuple(r.first for r in runs)
        self._offsets = tuple(offsets)
        self._len = total

    @property
    def runs(self) -> tuple[DomainRun, ...]:
        """The runs, in slot order: one entry per block of identical domains."""
        return self._runs

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> DomainSpec: ...

    @overload
    def __getitem__(self, index: slice) -> list[DomainSpec]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"domain index must be an int, got {type(index).__name__}")
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"domain {index} out of range: the rack has {self._len} domains")
        k = bisect_right(self._offsets, index) - 1
        return self._runs[k].copy(index - self._offsets[k])

    def __iter__(self) -> Iterator[DomainSpec]:
        for run in self._runs:
            for i in range(run.repeat):
                yield run.copy(i)

    def holding(self, slot: int) -> DomainSpec:
        """The domain holding ``slot`` (an index within one replica, inside the table's span)."""
        k = bisect_right(self._firsts, slot) - 1
        run = self._runs[k]
        return run.copy((slot - run.first) // run.domain.count)

    @property
    def stop(self) -> int:
        """One past the last slot the table covers."""
        return self._runs[-1].stop if self._runs else 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DomainTable):
            return self._runs == other._runs
        if isinstance(other, (tuple, list)):
            return len(other) == self._len and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._runs)

    def __repr__(self) -> str:
        if self._len <= 8:
            return f"DomainTable({list(self)!r})"
        return f"DomainTable({self._len} domains in {len(self._runs)} runs: {list(self._runs)!r})"


__all__ = ["DomainRun", "DomainTable", "INT64_MAX", "split_name"]
