"""What the CUDA layer met: every CUDA API touched (count, first call sites, how it was served), the
torch.backends flags set, and the divergences from the real target it saw.

Recording is a dict increment per call; the call site is read (a walk up the
Python stack to the first frame of the user's code) only for the first few
calls of each API, so a call in a loop costs one increment. Calls torch.compile
makes while it compiles are counted apart (``compile_count``), on no line of
the script.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from interop.callsite import call_site
from interop.compile.compile_time import compiling

SERVED: dict[str, str] = {
    "same": "same semantics",
    "mapped": "mapped to the rack slot",
    "modelled": "modelled",
    "unsupported": "unsupported on the target",
}
"""How an API was served, and the words the report uses for it."""

SITES_KEPT = 3
"""Distinct call sites kept per API (the first ones met)."""
_SITE_LOOKUPS = 16  # calls of one API whose call site is looked up


@dataclass
class ApiUse:
    """One CUDA API as the script used it."""

    api: str
    served: str
    note: str
    count: int = 0
    sites: list[str] = field(default_factory=list)
    compile_count: int = 0
    """Calls torch.compile made while compiling (its own, not the script's: on no line of it)."""


@dataclass
class FlagSet:
    """A torch.backends flag (or a numerics setting such as set_float32_matmul_precision) the script set."""

    name: str
    value: object
    changes_numerics: bool
    note: str
    site: str


class UsageLog:
    """The record of one run (thread-safe enough for DataLoader threads: counts may race by one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.apis: dict[str, ApiUse] = {}
        self.flags: dict[str, FlagSet] = {}

    def touch(self, api: str, served: str, note: str = "", depth: int = 2) -> None:
        use = self.apis.get(api)
        if use is None:
            with self._lock:
                use = self.apis.setdefault(api, ApiUse(api, served, note))
        if compiling():
            use.compile_count += 1
            return
        use.count += 1
        if use.count <= _SITE_LOOKUPS and len(use.sites) < SITES_KEPT:
            site = call_site(depth + 1)
            if site not in use.sites:
                use.sites.append(site)

    def flag(self, name: str, value, changes_numerics: bool, note: str, depth: int = 2) -> None:
        self.flags[name] = FlagSet(name, value, changes_numerics, note, call_site(depth + 1))

    def clear(self) -> None:
        with self._lock:
            self.apis.clear()
            self.flags.clear()


LOG = UsageLog()
"""The process's log (``interop.cuda_layer.usage.LOG``)."""


def touch(api: str, served: str, note: str = "") -> None:
    """Count one call of ``api`` (served ``served``, one of :data:`SERVED`) from the caller's caller."""
    LOG.touch(api, served, note, depth=3)
