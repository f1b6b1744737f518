"""Where a serving configuration runs on a rack: pools of chips, each cut into instances of ``tp x pp x ep`` chips.

Colocated serving is one pool of identical replicas (``parallel=dict(tp=..., pp=..., ep=...,
replicas=...)``). Disaggregated serving is two pools, ``prefill=`` and ``decode=``, each
``dict(kind=..., chips=..., tp=..., pp=..., ep=...)`` (the first free chips of that kind, in
slot order) or ``dict(slots=[...], tp=...)`` on a live rack. Every mismatch with the rack
is a ValueError naming the argument and what the rack holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

PARALLEL_KEYS = ("tp", "pp", "ep", "replicas")
"""Keys of ``parallel=`` (chips per replica = tp x pp x ep)."""

POOL_KEYS = ("kind", "chips", "slots", "tp", "pp", "ep")
"""Keys of ``prefill=`` and ``decode=``."""


@dataclass(frozen=True, slots=True)
class Pool:
    """Chips of one kind serving one role, cut into instances of ``tp x pp x ep`` chips."""

    role: str
    """``colocated``, ``prefill`` or ``decode``."""
    kind: str
    slots: Sequence[int]
    """The pool's slots (a ``range`` for large pools)."""
    tp: int = 1
    pp: int = 1
    ep: int = 1

    @property
    def per_instance(self) -> int:
        return self.tp * self.pp * self.ep

    @property
    def instances(self) -> int:
        return len(self.slots) // self.per_instance

    @property
    def chips(self) -> int:
        return len(self.slots)

    def instance(self, i: int) -> Sequence[int]:
        """The slots of instance ``i``."""
        per = self.per_instance
        return self.slots[i * per:(i + 1) * per]

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "chips": self.chips, "tp": self.tp, "pp": self.pp, "ep": self.ep,
               "instances": self.instances}
        if len(self.slots) <= 16:
            out["slots"] = list(self.slots)
        return out

    def describe(self) -> str:
        """``8 h100 as 4 x (tp 2)``."""
        cut = " x ".join(f"{k} {v}" for k, v in (("tp", self.tp), ("pp", self.pp), ("ep", self.ep)) if v > 1) \
            or "1 chip"
        return f"{self.chips:,} {self.kind} as {self.instances:,} x ({cut})"


def _degree(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def _check_keys(given: dict, accepted: tuple[str, ...], name: str) -> None:
    if not isinstance(given, dict):
        raise ValueError(f"{name}: expected a dict with keys {', '.join(accepted)}, got {given!r}")
    unknown = [k for k in given if k not in accepted]
    if unknown:
        raise ValueError(f"{name}: unknown key {unknown[0]!r}; accepted: {', '.join(accepted)}")


def colocated(spec, parallel: dict) -> Pool:
    """The pool of ``parallel`` on a rack of one chip kind."""
    _check_keys(parallel, PARALLEL_KEYS, "parallel")
    counts = spec.counts()
    if len(counts) > 1:
        raise ValueError(f"prefill and decode: {spec.name} mixes {', '.join(counts)}; serve on it with "
                         f"disaggregated pools (prefill=dict(kind=..., chips=...), decode=dict(...)) or on a rack "
                         f"of one kind")
    kind = next(iter(counts))
    tp, pp, ep = (_degree(parallel.get(k, 1), f"parallel {k}") for k in ("tp", "pp", "ep"))
    per = tp * pp * ep
    most = len(spec) // per
    if most < 1:
        raise ValueError(f"parallel: one replica of tp {tp} x pp {pp} x ep {ep} = {per} chips; {spec.name} has "
                         f"{len(spec):,}")
    replicas = parallel.get("replicas")
    replicas = most if replicas is None else _degree(replicas, "parallel replicas")
    if replicas > most:
        raise ValueError(f"parallel: {replicas} replicas of {per} chips need {replicas * per:,} chips; "
                         f"{spec.name} has {len(spec):,} (at most {most:,} replicas)")
    return Pool("colocated", kind, range(0, replicas * per), tp, pp, ep)


def _runs_of(spec, kind: str):
    width = spec.slots_per_replica
    for replica in range(spec.replicas):
        for g in spec.groups:
            if g.kind == kind:
                yield replica * width + g.first, replica * width + g.first + g.count


def _take(spec, kind: str, count: int, skip: Sequence[int]) -> Sequence[int]:
    skip_range = (skip.start, skip.stop) if isinstance(skip, range) and skip.step == 1 else None
    skip_set = set(skip) if skip_range is None else set()
    runs: list[range] = []
    need = count
    for start, stop in _runs_of(spec, kind):
        a = start
        while a < stop and need:
            if skip_range is not None and skip_range[0] <= a < skip_range[1]:
                a = skip_range[1]
                continue
            if a in skip_set:
                a += 1
                continue
            b = min(stop, a + need)
            if skip_range is not None and a < skip_range[0] < b:
                b = skip_range[0]
            for s in skip_set:
                if a <= s < b:
                    b = s
            runs.append(range(a, b))
            need -= b - a
            a = b
        if not need:
            break
    if len(runs) == 1:
        return runs[0]
    return tuple(s for r in runs for s in r)


def disaggregated(spec, prefill: dict, decode: dict) -> tuple[Pool, Pool]:
    """The prefill and decode pools on ``spec`` (see the module doc)."""
    counts = spec.counts()
    pools: list[Pool] = []
    for role, given in (("prefill", prefill), ("decode", decode)):
        _check_keys(given, POOL_KEYS, role)
        tp, pp, ep = (_degree(given.get(k, 1), f"{role} {k}") for k in ("tp", "pp", "ep"))
        per = tp * pp * ep
        if "slots" in given:
            if "kind" in given or "chips" in given:
                raise ValueError(f"{role}: give slots, or kind and chips, not both")
            slots = given["slots"]
            if not isinstance(slots, (list, tuple, range)) or not slots:
                raise ValueError(f"{role}: slots must be a non-empty list of slot indices, got {slots!r}")
            for s in slots:
                if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < len(spec):
                    raise ValueError(f"{role}: slot {s!r} is not a slot of {spec.name} (0-{len(spec) - 1})")
            kinds = {spec.group_of(s).kind for s in slots}
            if len(kinds) > 1:
                raise ValueError(f"{role}: slots {list(slots)} mix {', '.join(sorted(kinds))}; a pool is one kind")
            kind = kinds.pop()
            slots = tuple(slots)
        else:
            if "kind" not in given or "chips" not in given:
                raise ValueError(f"{role}: give kind and chips (e.g. dict(kind='h100', chips=8, tp=2)) or slots")
            kind = str(given["kind"]).strip().lower()
            chips = _degree(given["chips"], f"{role} chips")
            have = counts.get(kind, 0)
            used = sum(p.chips for p in pools if p.kind == kind)
            if not have:
                raise ValueError(f"{role}: {spec.name} has no {kind} chips; it holds "
                                 + ", ".join(f"{n:,} {k}" for k, n in counts.items()))
            if chips > have - used:
                raise ValueError(f"{role}: {chips:,} {kind} chips asked; {spec.name} has {have:,}"
                                 + (f", {used:,} of them in the prefill pool" if used else ""))
            skip = next((p.slots for p in pools if p.kind == kind), ())
            slots = _take(spec, kind, chips, skip)
        if len(slots) % per:
            raise ValueError(f"{role}: {len(slots)} chips do not split into instances of tp {tp} x pp {pp} x "
                             f"ep {ep} = {per} chips")
        pools.append(Pool(role, kind, slots, tp, pp, ep))
    if _overlap(pools[0].slots, pools[1].slots):
        raise ValueError("prefill and decode: the pools share slots; give each its own")
    return pools[0], pools[1]


def _overlap(a: Sequence[int], b: Sequence[int]) -> bool:
    if isinstance(a, range) and isinstance(b, range) and a.step == b.step == 1:
        return max(a.start, b.start) < min(a.stop, b.stop)
    return bool(set(a) & set(b))


__all__ = ["PARALLEL_KEYS", "POOL_KEYS", "Pool", "colocated", "disaggregated"]
