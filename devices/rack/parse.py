"""Rack spec strings and presets.

Grammar accepted by :func:`parse` (``devices.parse_rack``):

* a preset name: ``"fusion-default"``, ``"h100-node"`` ... (see :func:`presets`);
* kind counts: ``"kind:count+kind:count"``, kinds case-insensitive, counts
  positive integers, whitespace anywhere between tokens (``" Trn3 : 4 + h100:4 "``),
  laid out by the rules of :mod:`devices.rack.layout`;
* a path ending in ``.toml`` (see :mod:`devices.rack.toml_file`);
* any of the above followed by ``*N``: the rack repeated N times, joined by its
  network (``"trn3-ultraserver*7282"`` is a 1,048,608-chip what-if).

Parsing does work in proportion to the number of terms, never to the number
of slots: ``"trn2:100000000"`` is as cheap as ``"trn2:16"``.  A rack holds
at most 2^63-1 slots.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from importlib import resources

from devices.chip import kinds as catalogue_kinds
from devices.rack.parts import INT64_MAX, check_int64
from devices.rack.layout import build_groups, default_domains, default_network
from devices.rack.spec import RackSpec
from devices.rack.toml_file import load, loads_with_description

DEFAULT_PRESET = "fusion-default"
"""The preset used when nothing else is asked for (the embedded default rack)."""

_COUNT = re.compile(r"^[0-9]+$")
_DIGITS = len(str(INT64_MAX))


def _positive_count(text: str, where: str, what: str) -> int:
    # Length first: int() of a 5,000-digit string would raise Python's own digit-limit error.
    if not _COUNT.match(text) or (len(text.lstrip("0")) or 1) > _DIGITS or int(text) == 0:
        raise ValueError(f"{where}: expected a positive integer for {what} (at most 2^63-1 = {INT64_MAX}), "
                         f"got {text if len(text) <= 40 else text[:20] + '...' + text[-10:]!r}")
    return check_int64(int(text), where, what)


def parse(spec: str | os.PathLike | RackSpec) -> RackSpec:
    """A rack from a preset name, kind counts, a ``.toml`` path, or any of these followed by ``*N``."""
    if isinstance(spec, RackSpec):
        return spec
    if isinstance(spec, os.PathLike):
        return load(spec)
    if not isinstance(spec, str):
        raise ValueError(f"spec: expected a rack spec string or a path, got {spec!r}")
    text = spec.strip()
    if not text:
        raise ValueError(f"spec: empty rack spec; accepted: a preset ({', '.join(presets())}), "
                         f"'kind:count+kind:count' with kinds {', '.join(catalogue_kinds())}, or a .toml path")
    if "*" in text:
        base, _, times = text.rpartition("*")
        replicas = _positive_count(times.strip(), "replicas", f"the number after '*' in {spec!r}")
        return parse(base).with_replicas(replicas)
    if text.lower().endswith(".toml"):
        return load(text)
    if ":" in text:
        return from_kind_counts(text)
    return load_preset(text)


def parse_kind_counts(text: str) -> list[tuple[str, int]]:
    """``"trn3:4+h100:4"`` -> ``[("trn3", 4), ("h100", 4)]``, with ValueError naming the bad field."""
    accepted_kinds = ", ".join(catalogue_kinds())
    out: list[tuple[str, int]] = []
    total = 0
    for position, term in enumerate(text.split("+"), start=1):
        if ":" not in term:
            raise ValueError(f"spec: term {position} {term.strip()!r} of {text!r} is not 'kind:count'; "
                             f"accepted kinds: {accepted_kinds}")
        kind, _, count = term.partition(":")
        kind, count = kind.strip().lower(), count.strip()
        if kind not in catalogue_kinds():
            raise ValueError(f"kind: unknown chip kind {kind!r} in {text!r}; accepted kinds: {accepted_kinds}")
        n = _positive_count(count, "count", kind)
        total = check_int64(total + n, "count", f"the slot count up to term {position} ({kind})")
        out.append((kind, n))
    return out


def from_kind_counts(text: str) -> RackSpec:
    """A rack from ``"kind:count+kind:count"`` with the default domains and network."""
    pairs = parse_kind_counts(text)
    groups = build_groups((kind, count, None, "auto") for kind, count in pairs)
    name = "+".join(f"{kind}:{count}" for kind, count in pairs)
    return RackSpec(name=name, groups=groups, domains=default_domains(groups),
                    network=default_network(g.kind for g in groups), source=f"spec {text.strip()!r}")


def _preset_dir():
    return resources.files("devices") / "presets"


@lru_cache(maxsize=1)
def _preset_names() -> tuple[str, ...]:
    names = sorted(p.name[: -len(".toml")] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))
    # The embedded default first, so listings start with it.
    return tuple(sorted(names, key=lambda n: (n != DEFAULT_PRESET, n)))


@lru_cache(maxsize=None)
def _load_preset_text(name: str) -> tuple[RackSpec, str]:
    text = (_preset_dir() / f"{name}.toml").read_text(encoding="utf-8")
    rack, description = loads_with_description(text, source=f"preset {name}", default_name=name)
    return rack, description


def load_preset(name: str) -> RackSpec:
    """A preset rack by name (case-insensitive); ValueError listing the presets for an unknown one."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _preset_names():
        raise ValueError(f"preset: unknown preset {name!r}; accepted presets: {', '.join(_preset_names())} "
                         f"(or a spec 'kind:count+kind:count' with kinds {', '.join(catalogue_kinds())})")
    rack, _ = _load_preset_text(key)
    return rack


def presets() -> dict[str, str]:
    """Every preset's name and one-line description, the default first."""
    return {name: _load_preset_text(name)[1] for name in _preset_names()}


__all__ = ["DEFAULT_PRESET", "parse", "parse_kind_counts", "from_kind_counts", "load_preset", "presets"]
