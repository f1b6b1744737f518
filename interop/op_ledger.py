"""The op ledger: per ATen op and slot, how it ran and how often (``interop.ledger()``).

Counted in C++ on the per-op path (a thread-local lookup and one relaxed
atomic increment), for every op that reaches a slot whether or not the CUDA
layer is installed.  Paths:

- ``dedicated hybrid kernel``: the backend's own kernel (allocation, views, copies);
- ``zero-copy CPU kernel``: the CPU's own kernel, run on aliases of the slot's bytes;
- ``CPU composite``: an op with no CPU kernel of its own, run as the CPU's decomposition on aliases;
- ``real CUDA``: the CUDA kernel, on a cuda-backed slot.

Each op also says whether the cost model knew it or priced it with the default
bytes-only estimate (``default_estimate``), which the modelled times of such
ops rest on.
"""

from __future__ import annotations

from dataclasses import dataclass

PATHS: tuple[str, ...] = ("dedicated hybrid kernel", "zero-copy CPU kernel", "CPU composite", "real CUDA")
"""Path names, indexed by the C++ ledger's path code."""


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """How one op ran on one slot."""

    op: str
    """``aten::name.overload``."""
    slot: int
    kind: str
    path: str
    """One of :data:`PATHS`."""
    count: int
    default_estimate: bool | None
    """True when the cost model had no formula for the op (or its shapes) and priced it by bytes moved
    only; None when the op is not on the current timeline (recording off, or the timeline was reset)."""


def _estimates_by_default() -> dict[tuple[str, int], bool]:
    """(op, slot) -> whether any of its records on the current timeline got the default estimate."""
    import interop

    out: dict[tuple[str, int], bool] = {}
    for r in interop.timeline():
        if r.kind == "op":
            key = (r.op, r.slot)
            out[key] = out.get(key, False) or r.estimated_by_default
    return out


class Ledger:
    """A snapshot of the counters: rows, and views by op and by path."""

    def __init__(self, rows: list[LedgerRow]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def by_op(self) -> dict[str, dict[str, int]]:
        """op -> {path: count} over every slot."""
        out: dict[str, dict[str, int]] = {}
        for r in self.rows:
            paths = out.setdefault(r.op, {})
            paths[r.path] = paths.get(r.path, 0) + r.count
        return out

    def by_path(self) -> dict[str, int]:
        """path -> ops run that way (over every op and slot)."""
        out = {p: 0 for p in PATHS}
        for r in self.rows:
            out[r.path] += r.count
        return out

    def default_estimated(self) -> list[str]:
        """Ops whose modelled time is the default bytes-only estimate, sorted."""
        return sorted({r.op for r in self.rows if r.default_estimate})

    def count(self, op: str, slot: int | None = None, path: str | None = None) -> int:
        """Executions of ``op`` (``aten::mm`` matches every overload), optionally on one slot / path."""
        total = 0
        for r in self.rows:
            if (r.op == op or r.op.split(".", 1)[0] == op) and (slot is None or r.slot == slot) \
                    and (path is None or r.path == path):
                total += r.count
        return total

    def table(self, limit: int | None = None) -> str:
        """Plain text: op, slot (kind), path, count, default estimate; busiest first."""
        from interop.fmt import table

        rows = sorted(self.rows, key=lambda r: (-r.count, r.op, r.slot))
        if limit is not None:
            rows = rows[:limit]
        return table(["op", "slot", "path", "count", "cost"],
                     [[r.op, f"hybrid:{r.slot} ({r.kind})", r.path, str(r.count),
                       _COST_TEXT[r.default_estimate]] for r in rows],
                     align="lllrl")


_COST_TEXT = {True: "default (bytes only)", False: "modelled", None: "-"}


def ledger() -> Ledger:
    """The op ledger since the process started (or :func:`reset_ledger`)."""
    from interop import _C
    from interop.rack import current_rack

    rack = current_rack()
    defaults = _estimates_by_default()
    rows = []
    for op, slot, path, count in _C._ledger():
        kind = rack.devices[slot].kind if rack is not None and slot < len(rack) else "?"
        # Dedicated kernels (allocation, views, copies) are not op records: copies are on the timeline as
        # transfers, the rest does no device work.
        estimate = None if path == 0 else defaults.get((op, slot))
        rows.append(LedgerRow(op, slot, kind, PATHS[path], int(count), estimate))
    rows.sort(key=lambda r: (r.op, r.slot, r.path))
    return Ledger(rows)


def reset_ledger() -> None:
    """Zero every counter."""
    from interop import _C

    _C._ledger_reset()


__all__ = ["PATHS", "Ledger", "LedgerRow", "ledger", "reset_ledger"]
