"""The op ledger: per rack, ATen op and slot, how it ran and how often (``interop.ledger()``).

Counted in C++ on the per-op path (a thread-local lookup and one relaxed
atomic increment), for every op that reaches a slot whether or not the CUDA
layer is installed.  Like its memory accounting and timeline, each rack's
counts are its own (``hybrid:0`` of one rack need not be the chip of
another's): a row names its rack, and an op on a retired rack's tensor (a copy
to the host) counts on that rack.  Paths:

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
    only; None when the op is not on its rack's timeline (recording off, the timeline was reset, or the
    rack no longer exists)."""
    rack: str = ""
    """The rack's label (``'trn2:1+h100:1'``, ``'fusion-default' (trn4:4+b200:4)``)."""


def _estimates_by_default(rack) -> dict[tuple[str, int], bool]:
    """(op, slot) -> whether any of its records on ``rack``'s timeline got the default estimate."""
    t = rack.timeline
    t.ingest()
    out: dict[tuple[str, int], bool] = {}
    for (slot, _, kind, op), stats in t.folded.per_op.items():  # the records that left the window
        if kind == "op":
            out[(op, slot)] = out.get((op, slot), False) or stats.estimated_by_default > 0
    for r in t.records:
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
        """Plain text: op, slot (kind), path, count, default estimate; busiest first. A rack column is
        added when the rows span more than one rack."""
        from devices.text_table import table

        rows = sorted(self.rows, key=lambda r: (-r.count, r.op, r.rack, r.slot))
        if limit is not None:
            rows = rows[:limit]
        racks = len({r.rack for r in self.rows}) > 1
        return table((["rack"] if racks else []) + ["op", "slot", "path", "count", "cost"],
                     [([r.rack] if racks else []) + [r.op, f"hybrid:{r.slot} ({r.kind})", r.path, str(r.count),
                                                     _COST_TEXT[r.default_estimate]] for r in rows],
                     align=("l" if racks else "") + "lllrl")


_COST_TEXT = {True: "default (bytes only)", False: "modelled", None: "-"}


def ledger(rack=None) -> Ledger:
    """The op ledger since the process started (or :func:`reset_ledger`): every rack's rows, or only
    ``rack``'s (an :class:`interop.Rack`, current or retired)."""
    from interop import _C, session

    wanted = None
    if rack is not None:
        table = getattr(rack, "_table", None)
        if table is None:
            raise TypeError(f"rack: expected an interop.Rack or None (every rack), got {rack!r}")
        wanted = table.generation
    defaults: dict[int, dict[tuple[str, int], bool]] = {}
    rows = []
    for op, generation, label, slot, kind, path, count in _C._ledger():
        if wanted is not None and generation != wanted:
            continue
        # Dedicated kernels (allocation, views, copies) are not op records: copies are on the timeline as
        # transfers, the rest does no device work.
        estimate = None
        if path != 0:
            if generation not in defaults:
                owner = session.rack_of(generation)
                defaults[generation] = {} if owner is None else _estimates_by_default(owner)
            estimate = defaults[generation].get((op, slot))
        rows.append(LedgerRow(op, slot, kind, PATHS[path], int(count), estimate, label))
    rows.sort(key=lambda r: (r.rack, r.op, r.slot, r.path))
    return Ledger(rows)


def reset_ledger() -> None:
    """Zero every counter."""
    from interop import _C

    _C._ledger_reset()


__all__ = ["PATHS", "Ledger", "LedgerRow", "ledger", "reset_ledger"]
