"""Device fidelity: ops a slot's real chip would refuse, or compute in another format.

Emulated slots compute whatever the CPU computes.  The capability table
(:func:`devices.capabilities`) says what each kind's real stack does; this
module applies it to the ops that run.  By default an op the real chip would
refuse still runs (bit-identical to the CPU, as ever), and the divergence is
recorded with its call site and warned once (:class:`FidelityWarning`); with
:func:`set_strict` (``hybrid run --strict``) it raises the error the real stack
raises (``NotImplementedError``), with the reason and the source.

The per-op cost is one bit test in C++ (is this dtype ever a concern on this
slot?); only the (op, slot, dtype) combinations that are reach Python, once
each.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field

import torch

import devices
from interop import session


class FidelityWarning(UserWarning):
    """An op ran on a slot whose real chip would refuse it or compute it in another format."""


@dataclass
class Divergence:
    """One (op, slot, dtype) the slot's real chip treats other than natively: the capability table's answer
    (:class:`devices.Support`: level, reason, source, status, error, instead) and where the program met it."""

    op: str
    slot: int
    support: devices.Support
    """The capability table's rule for the slot's kind, op class and dtype."""
    sites: list[str] = field(default_factory=list)
    """First call sites (``file:line``)."""
    count: int = 0
    """Times the op ran (from the C++ counter)."""
    rack: str = ""
    """The label of the rack whose slot it ran on (a divergence is per rack: hybrid:0 of one rack need not
    be the chip of another's)."""

    kind = property(lambda self: self.support.kind)
    op_class = property(lambda self: self.support.op_class)
    dtype = property(lambda self: self.support.dtype)
    level = property(lambda self: self.support.level, doc="``unsupported`` (would fail on the real chip) or "
                                                          "``converted`` (would compute in another format).")
    reason = property(lambda self: self.support.reason)
    source = property(lambda self: self.support.source)
    status = property(lambda self: self.support.status)
    error = property(lambda self: self.support.error)
    instead = property(lambda self: self.support.instead)

    @property
    def outcome(self) -> str:
        """What would happen on the real chip, in words."""
        return "would fail" if self.level == "unsupported" else "would compute in another format"

    def to_dict(self) -> dict:
        """Flat, JSON-ready: the rule's fields beside where it was met."""
        return {"op": self.op, "slot": self.slot, "rack": self.rack, "kind": self.kind, "op_class": self.op_class,
                "dtype": self.dtype, "level": self.level, "outcome": self.outcome, "reason": self.reason,
                "source": self.source, "status": self.status, "error": self.error, "instead": self.instead,
                "sites": list(self.sites), "count": self.count}


_lock = threading.Lock()
_strict = False
_met: dict[tuple[int, str, int, str], Divergence] = {}
"""(rack generation, op, slot, dtype name) -> what was met there."""
_warned: set[tuple[str, str, str, str]] = set()

# c10's dtype names (what torch's own "not implemented for '...'" errors print).
_C10_NAMES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex128: "ComplexDouble", torch.complex64: "ComplexFloat",
    torch.complex32: "ComplexHalf",
}


def _c10_name(dtype: torch.dtype) -> str:
    known = _C10_NAMES.get(dtype)
    if known is not None:
        return known
    name = devices.dtype_label(dtype)
    return name[0].upper() + name[1:]


def set_strict(enabled: bool = True) -> None:
    """Raise what the real chip would raise (True), or run such ops and list them (False, the default)."""
    global _strict
    from interop import _C

    _strict = bool(enabled)
    _C._fidelity_reset()


def strict() -> bool:
    """Whether strict device fidelity is on."""
    return _strict


def apply(rack) -> None:
    """Give the C++ check each slot's dtypes of concern (called whenever a rack becomes current)."""
    from interop import _C

    _C._fidelity_reset()
    _C._fidelity_clear_masks()  # a slot index the new rack lacks concerns nothing
    for d in rack.devices:
        caps = devices.capabilities(d.kind)
        concern = [getattr(torch, name) for name in devices.capability.DTYPES
                   if hasattr(torch, name)
                   and any(not caps.support(c, name).native for c in devices.OP_CLASSES)]
        _C._fidelity_set_mask(d.index, concern)


session.on_rack_change(lambda rack, previous_slot: apply(rack))  # the C++ check reads the new kinds' masks


def _message(s: devices.Support, op: str, slot: int, dtype: torch.dtype) -> str:
    head = s.error.format(scalar_type=_c10_name(dtype)) if s.error else \
        f"{op} in {devices.dtype_label(dtype)} is not supported on {s.kind}"
    return (f"{head}\n  on hybrid:{slot} ({s.kind}), {op} ({s.op_class}, {devices.dtype_label(dtype)}): "
            f"{s.reason}\n  instead: {s.instead or '-'}\n  source: {s.source} [{s.status}]\n"
            "  (strict device fidelity; interop.set_strict(False), or `hybrid run` without --strict, runs it "
            "as the CPU does and lists it in the report)")


def _hook(op: str, generation: int, slot: int, dtype: torch.dtype) -> tuple[int, str]:

    # The C++ fallback asks only about tensors of the current rack (a retired rack's are refused first).
    rack = session.rack_of(generation)
    if rack is None or not 0 <= slot < len(rack):
        return 0, ""
    kind = rack.devices[slot].kind
    name = devices.dtype_label(dtype)
    try:
        s = devices.capabilities(kind).support(devices.op_class(op), name)
    except ValueError:  # a dtype the table does not cover (quantized): nothing to say
        return 0, ""
    if s.native:
        return 0, ""
    from interop.callsite import call_site, stacklevel

    site = call_site(2)
    key = (generation, op, slot, name)
    with _lock:
        div = _met.get(key)
        if div is None:
            div = _met[key] = Divergence(op, slot, s, rack=rack.label)
        if site not in div.sites and len(div.sites) < 3:
            div.sites.append(site)
        first_warning = (kind, s.op_class, name, s.level) not in _warned
        _warned.add((kind, s.op_class, name, s.level))
    if _strict and s.refused:
        return 2, _message(s, op, slot, dtype)
    if first_warning:
        # The source citation (often several documents) stays in the Divergence: a warning is read in a console.
        warnings.warn(f"{op} on hybrid:{slot} ({kind}) in {name} {div.outcome} on a real {kind}: {s.reason} "
                      f"[{s.status}]; instead: {s.instead or '-'} (warned once per kind, op class and dtype; "
                      f"interop.divergences() lists every one with its source)", FidelityWarning,
                      stacklevel=stacklevel(2))
    return 1, ""


def divergences() -> list[Divergence]:
    """Every divergence met since the start (or :func:`reset`), on any rack, with its count and first
    call sites."""
    from interop import _C

    counts = {(generation, op, slot, dtype): n for op, generation, slot, dtype, n in _C._fidelity_counts()}
    with _lock:
        met = list(_met.items())
    for (generation, op, slot, name), d in met:
        d.count = counts.get((generation, op, slot, getattr(torch, name)), d.count)
    return sorted((d for _, d in met), key=lambda d: (d.rack, d.slot, d.level != "unsupported", d.op, d.dtype))


def reset() -> None:
    """Forget the divergences met (and warn again)."""
    from interop import _C

    with _lock:
        _met.clear()
        _warned.clear()
    _C._fidelity_reset()
    _C._fidelity_reset_counts()


def install() -> None:
    """Install the C++ hook (``import interop`` does)."""
    from interop import _C

    _C._fidelity_set_hook(_hook)


__all__ = ["Divergence", "FidelityWarning", "apply", "divergences", "install", "reset", "set_strict", "strict"]
