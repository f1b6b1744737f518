"""Memory statistics of the hybrid slots, in torch.cuda's shapes and names.

Every byte a slot holds is counted against its capacity (the chip's modelled
HBM unless the rack overrides it). The allocator keeps no cache, so reserved
memory equals allocated memory and :func:`empty_cache` has nothing to free.
"""

from __future__ import annotations

from typing import Any

from interop.hybrid._utils import slot_index


def _raw(device) -> dict[str, int]:
    from interop import _C

    return _C._memory_stats(slot_index(device))


def memory_stats(device=None) -> dict[str, Any]:
    """torch.cuda.memory_stats-style counters for a slot (``allocated_bytes.all.current``...)."""
    s = _raw(device)
    out: dict[str, Any] = {}
    for family in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        out[f"{family}.all.current"] = s["allocated_bytes"]
        out[f"{family}.all.peak"] = s["peak_allocated_bytes"]
        out[f"{family}.all.allocated"] = s["allocated_bytes_total"]
        out[f"{family}.all.freed"] = s["freed_bytes_total"]
    for family in ("allocation", "active", "segment"):
        out[f"{family}.all.current"] = s["live_allocations"]
        out[f"{family}.all.peak"] = s["peak_live_allocations"]
        out[f"{family}.all.allocated"] = s["num_allocs"]
        out[f"{family}.all.freed"] = s["num_frees"]
    out["num_ooms"] = s["num_ooms"]
    out["num_alloc_retries"] = 0
    out["capacity"] = s["capacity"]
    return dict(sorted(out.items()))


def memory_allocated(device=None) -> int:
    """Bytes currently held by tensors on the slot."""
    return _raw(device)["allocated_bytes"]


def max_memory_allocated(device=None) -> int:
    """Peak of :func:`memory_allocated` since the rack was installed or the last reset."""
    return _raw(device)["peak_allocated_bytes"]


def memory_reserved(device=None) -> int:
    """Bytes reserved by the allocator; equal to allocated (no caching)."""
    return _raw(device)["allocated_bytes"]


def max_memory_reserved(device=None) -> int:
    """Peak reserved bytes; equal to :func:`max_memory_allocated` (no caching)."""
    return _raw(device)["peak_allocated_bytes"]


def reset_peak_memory_stats(device=None) -> None:
    """Start peak tracking afresh from the current usage."""
    from interop import _C

    _C._reset_peak_stats(slot_index(device))


def reset_max_memory_allocated(device=None) -> None:
    """Alias of :func:`reset_peak_memory_stats`, as in torch.cuda."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the cumulative counters (allocations, frees, OOMs)."""
    from interop import _C

    _C._reset_accumulated_stats(slot_index(device))


def mem_get_info(device=None) -> tuple[int, int]:
    """``(free, total)`` bytes of the slot's capacity, like torch.cuda.mem_get_info."""
    s = _raw(device)
    return max(0, s["capacity"] - s["allocated_bytes"]), s["capacity"]


def empty_cache() -> None:
    """Release cached memory. The hybrid allocator caches nothing, so this is a no-op."""


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A short human-readable table of a slot's memory counters."""
    from interop import _C
    from interop.fmt import format_bytes

    idx = slot_index(device)
    s = _C._memory_stats(idx)
    lines = [
        f"{_C._slot_label(idx)} memory",
        f"  capacity        {format_bytes(s['capacity'])}",
        f"  allocated       {format_bytes(s['allocated_bytes'])}  (peak {format_bytes(s['peak_allocated_bytes'])})",
        f"  allocations     {s['live_allocations']} live, {s['num_allocs']} made, {s['num_frees']} freed",
        f"  out-of-memory   {s['num_ooms']}",
    ]
    return "\n".join(lines)
