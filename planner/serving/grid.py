"""Memoised cost functions on a geometric grid: exact at small sizes, interpolated between grid points above.

A discrete-event simulation asks for the time of thousands of iterations whose sizes
(tokens in the batch, KV tokens read) take thousands of values. Each exact price goes
through the per-op cost model; :class:`Grid` prices the grid points ``2 ** (i / STEPS)``
once and interpolates linearly in between, where a roofline time is affine in the size
on each side of its kink (the error is bounded in the tests), as
:class:`planner.comm.CommPricer` does for collectives. Sizes up to :data:`EXACT` are
priced exactly.
"""

from __future__ import annotations

import math
from typing import Callable

STEPS = 16
"""Grid points per doubling."""

EXACT = 256
"""Sizes up to this are priced exactly (decode batches, short prompts)."""

CALLS = 1 << 16
"""Most answers remembered per function (beyond the grid points themselves)."""


def _point(i: int) -> int:
    return round(2 ** (i / STEPS))


class Grid:
    """``f(x)`` for non-negative integer-valued sizes, memoised (see the module doc); ``f(0)`` is 0."""

    __slots__ = ("f", "_memo", "_calls", "_cells")

    def __init__(self, f: Callable[[int], float]) -> None:
        self.f = f
        self._memo: dict[int, float] = {}
        self._calls: dict[float, float] = {}
        self._cells: dict[int, tuple[int, int, float, float]] = {}

    def exact(self, x: int) -> float:
        hit = self._memo.get(x)
        if hit is None:
            hit = self._memo[x] = self.f(x) if x > 0 else 0.0
        return hit

    def __call__(self, x: float) -> float:
        hit = self._calls.get(x)
        if hit is None:
            if len(self._calls) > CALLS:
                self._calls.clear()
            hit = self._calls[x] = self.at(x)
        return hit

    def at(self, x: float) -> float:
        """``f(x)`` as a call gives it, not remembered (for a caller asking each size once)."""
        if x <= EXACT:
            return self.exact(int(math.ceil(x)))
        lo, width, t_lo, rise = self._cell(_cell_index(x))
        return t_lo if width <= 0 or x <= lo else t_lo + rise * (x - lo) / width

    def many(self, xs) -> list[float]:
        """:meth:`at` of each of ``xs`` (a run of equal sizes priced once)."""
        out = []
        last = value = None
        for x in xs:
            if x != last:
                last, value = x, self.at(x)
            out.append(value)
        return out

    def rising(self, xs):
        """:meth:`at` of each of ``xs``, a numpy array of sizes ``k / n`` of increasing integers ``k`` (below 2**40),
        as an array, bit for bit: each cell's run of sizes found by bisection on :meth:`at`'s own cell index, then
        the same IEEE operations on each element (numpy's round exactly, as Python's)."""
        import numpy as np

        out = np.empty(len(xs))
        j = int(np.searchsorted(xs, EXACT, side="right"))  # the sizes priced exactly
        out[:j] = self.many(xs[:j].tolist())
        while j < len(xs):
            # The index is monotone over these sizes: log2 errs by under an ulp of its value, and sizes that differ
            # by a part in 2**40 differ in log2 by far more.
            i = _cell_index(float(xs[j]))
            lo_k, hi_k = j + 1, len(xs)  # the first size past cell i lies in [lo_k, hi_k]
            while lo_k < hi_k:
                m = (lo_k + hi_k) // 2
                if _cell_index(float(xs[m])) > i:
                    hi_k = m
                else:
                    lo_k = m + 1
            lo, width, t_lo, rise = self._cell(i)
            run = xs[j:lo_k]
            out[j:lo_k] = t_lo if width <= 0 else np.where(run <= lo, t_lo, t_lo + rise * (run - lo) / width)
            j = lo_k
        return out

    def _cell(self, i: int) -> tuple[int, int, float, float]:
        """Grid cell ``i``: its low point, its width, f at its low point and f's rise over it."""
        cell = self._cells.get(i)
        if cell is None:
            lo, hi = _point(i), _point(i + 1)
            t_lo = self.exact(lo)
            cell = self._cells[i] = lo, hi - lo, t_lo, (self.exact(hi) - t_lo if hi > lo else 0.0)
        return cell


def _cell_index(x: float) -> int:
    """The grid cell holding size ``x`` (above :data:`EXACT`): between points ``i`` and ``i + 1``."""
    return math.floor(math.log2(x) * STEPS)


class Grid2:
    """``f(x, y)`` memoised on the product of two :class:`Grid` axes (bilinear in between)."""

    __slots__ = ("f", "_rows", "_calls")

    def __init__(self, f: Callable[[int, int], float]) -> None:
        self.f = f
        self._rows: dict[int, Grid] = {}
        self._calls: dict[tuple[float, float], float] = {}

    def _row(self, x: int) -> Grid:
        row = self._rows.get(x)
        if row is None:
            row = self._rows[x] = Grid(lambda y, x=x: self.f(x, y))
        return row

    def __call__(self, x: float, y: float) -> float:
        hit = self._calls.get((x, y))
        if hit is None:
            if len(self._calls) > CALLS:
                self._calls.clear()
            hit = self._calls[(x, y)] = self._interpolate(x, y)
        return hit

    def _interpolate(self, x: float, y: float) -> float:
        if x <= 0 or y <= 0:
            return 0.0
        if x <= EXACT:
            return self._row(int(math.ceil(x)))(y)
        k = math.log2(x) * STEPS
        lo_i = math.floor(k)
        lo, hi = _point(lo_i), _point(lo_i + 1)
        if hi <= lo or x <= lo:
            return self._row(lo)(y)
        a, b = self._row(lo)(y), self._row(hi)(y)
        return a + (b - a) * (x - lo) / (hi - lo)


__all__ = ["CALLS", "EXACT", "STEPS", "Grid", "Grid2"]
