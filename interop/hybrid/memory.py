"""Memory statistics of the hybrid slots, in torch.cuda's shapes and names.

Every byte a slot holds is counted against its capacity (the chip's modelled
HBM unless the rack overrides it). The counters are c10's own DeviceStats,
kept per slot by the runtime and read under torch.cuda.memory_stats' keys;
these functions answer for the current rack, as torch.cuda's answer for this
process's devices (a retired rack answers through its interop.Rack). The
allocator keeps no cache, so reserved memory equals allocated memory and
:func:`empty_cache` has nothing to free.
"""

from __future__ import annotations

from typing import Any

from interop.hybrid._utils import slot_index


def _rack():
    from interop import session

    rack = session.current()
    if rack is None:
        raise RuntimeError("no rack is installed; call interop.set_rack(...) first")
    return rack


def memory_stats(device=None) -> dict[str, Any]:
    """torch.cuda.memory_stats' counters for a slot (``allocated_bytes.all.current``...),
    plus ``capacity``, the slot's modelled HBM in bytes."""
    return _rack().memory_stats(slot_index(device))


def memory_allocated(device=None) -> int:
    """Bytes currently held by tensors on the slot."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    """Peak of :func:`memory_allocated` since the rack was made or the last reset."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes reserved by the allocator; equal to allocated (no caching)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    """Peak reserved bytes; equal to :func:`max_memory_allocated` (no caching)."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    """Start peak tracking afresh from the current usage."""
    _rack()._table.reset_peak_stats(slot_index(device))


def reset_max_memory_allocated(device=None) -> None:
    """Alias of :func:`reset_peak_memory_stats`, as in torch.cuda."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the cumulative counters (allocations, frees, OOMs)."""
    _rack()._table.reset_accumulated_stats(slot_index(device))


def mem_get_info(device=None) -> tuple[int, int]:
    """``(free, total)`` bytes of the slot's capacity, like torch.cuda.mem_get_info."""
    s = memory_stats(device)
    return max(0, s["capacity"] - s["allocated_bytes.all.current"]), s["capacity"]


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Let this process hold at most ``fraction`` of the slot's capacity (torch.cuda's semantics): an
    allocation past it raises ``torch.OutOfMemoryError`` naming the limit. 1.0 lifts the limit."""
    if not isinstance(fraction, float):
        raise TypeError(f"set_per_process_memory_fraction: fraction must be a float in [0, 1], got "
                        f"{type(fraction).__name__}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"set_per_process_memory_fraction: fraction must be in [0, 1], got {fraction}")
    idx = slot_index(device)
    rack = _rack()
    capacity = rack.memory_stats(idx)["capacity"]
    rack._table.set_memory_limit(idx, -1 if fraction == 1.0 else int(fraction * capacity))


def get_per_process_memory_fraction(device=None) -> float:
    """The fraction of the slot's capacity this process may hold (1.0 unless
    :func:`set_per_process_memory_fraction` lowered it)."""
    idx = slot_index(device)
    rack = _rack()
    limit = rack._table.memory_limit(idx)
    return 1.0 if limit < 0 else limit / rack.memory_stats(idx)["capacity"]


def empty_cache() -> None:
    """Release cached memory. The hybrid allocator caches nothing, so this is a no-op."""


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A short human-readable table of a slot's memory counters."""
    from devices.units import format_bytes

    idx = slot_index(device)
    rack = _rack()
    s = rack.memory_stats(idx)
    lines = [
        f"{rack._table.label(idx)} memory, rack {rack.label}",
        f"  capacity        {format_bytes(s['capacity'])}",
        f"  allocated       {format_bytes(s['allocated_bytes.all.current'])}"
        f"  (peak {format_bytes(s['allocated_bytes.all.peak'])})",
        f"  allocations     {s['allocation.all.current']} live, {s['allocation.all.allocated']} made, "
        f"{s['allocation.all.freed']} freed",
        f"  out-of-memory   {s['num_ooms']}",
    ]
    return "\n".join(lines)
