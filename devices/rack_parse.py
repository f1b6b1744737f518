"""Rack spec strings, presets, and the default layout of domains for a list of chips.

Grammar accepted by :func:`parse` (and ``RackSpec.parse``, ``devices.parse_rack``):

* a preset name: ``"fusion-default"``, ``"h100-node"`` ... (see :func:`presets`);
* kind counts: ``"kind:count+kind:count"``, kinds case-insensitive, counts
  positive integers, whitespace anywhere between tokens (``" Trn3 : 4 + h100:4 "``);
* a path ending in ``.toml`` (see :mod:`devices.rack_toml`);
* any of the above followed by ``*N``: the rack repeated N times, joined by its
  network (``"trn3-ultraserver*7282"`` is a 1,048,608-chip what-if).

Default layout (:func:`default_domains`), applied to kind counts and to TOML
files without ``[[domains]]``; slots keep the order they were given in:

1. If any Trainium4 is present, the Trainium4 and every NVIDIA GPU form one
   ``nvlink-fusion`` domain (Trn4's NVLink Fusion port joins NVIDIA's switch).
   Those slots must be adjacent, since a domain is a contiguous slot range.
2. Otherwise each contiguous run of Hopper and Blackwell GPUs forms one
   ``nvlink`` domain, with in-switch reduction on (NVLS exists on their
   NVSwitch generations).  A100s (NVLink 3) never join NVLink Fusion and form
   ``nvlink`` domains of their own, without in-switch reduction.
3. NVLink and NVLink Fusion domains hold at most 576 GPUs (NVLink's
   published largest domain), NVLink 3 domains 16 A100s; longer runs are
   split.
4. Trainium2 (NeuronLink-v3): a 4x4 ``neuronlink-torus`` per 16 chips, one
   trn2.48xlarge each, at the in-instance 1,024 GB/s per chip (512 GB/s per
   direction); a remainder r < 16 forms a ring, shape (r,).  The 4x4x4
   UltraServer torus is the ``trn2-ultraserver`` preset, not a default.
5. Trainium (Trn1, NeuronLink-v2): a 2x2x2x2 torus (the 4D hypercube of a
   trn1.32xlarge) per 16 chips; a remainder forms a ring.
6. Trainium3 (NeuronLink-v4): a ``neuronswitch`` domain per 144 chips (one
   Gen2 UltraServer); a remainder forms a smaller one.
7. Domains are joined by the network of :func:`default_network`: EFA when any
   Trainium is present, InfiniBand otherwise, at the per-slot bandwidth of the
   slowest chip's scale-out share, with NCCL's network hop latency.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from importlib import resources
from typing import Iterable, Sequence

from devices.fabrics import (NVLINK3_MAX_DOMAIN, NVLINK_MAX_DOMAIN, TRN1_INSTANCE_CHIPS, TRN2_INSTANCE_CHIPS,
                             TRN2_INSTANCE_LINK, TRN3_ULTRASERVER_CHIPS, default_network_fabric, fabric as fabric_defaults,
                             network_bandwidth)
from devices.chip import chip, kinds as catalogue_kinds
from devices.rack import DomainSpec, NetworkSpec, RackSpec, SlotGroup

DEFAULT_PRESET = "fusion-default"
"""The preset used when nothing else is asked for (the embedded default rack)."""

_COUNT = re.compile(r"^[0-9]+$")
_PREFIX = {"nvlink-fusion": "fusion", "nvlink": "nvlink", "neuronlink-torus": "torus",
           "neuronswitch": "switch", "pcie": "pcie"}


def parse(spec: str | os.PathLike | RackSpec) -> RackSpec:
    """A rack from a preset name, kind counts, a ``.toml`` path, or any of these followed by ``*N``."""
    if isinstance(spec, RackSpec):
        return spec
    if isinstance(spec, os.PathLike):
        from devices.rack_toml import load

        return load(spec)
    if not isinstance(spec, str):
        raise ValueError(f"spec: expected a rack spec string or a path, got {spec!r}")
    text = spec.strip()
    if not text:
        raise ValueError(f"spec: empty rack spec; accepted: a preset ({', '.join(presets())}), "
                         f"'kind:count+kind:count' with kinds {', '.join(catalogue_kinds())}, or a .toml path")
    if "*" in text:
        base, _, times = text.rpartition("*")
        times = times.strip()
        if not _COUNT.match(times) or int(times) == 0:
            raise ValueError(f"replicas: expected a positive integer after '*' in {spec!r}, got {times!r}")
        return parse(base).with_replicas(int(times))
    if text.lower().endswith(".toml"):
        from devices.rack_toml import load

        return load(text)
    if ":" in text:
        return from_kind_counts(text)
    return load_preset(text)


def parse_kind_counts(text: str) -> list[tuple[str, int]]:
    """``"trn3:4+h100:4"`` -> ``[("trn3", 4), ("h100", 4)]``, with ValueError naming the bad field."""
    accepted_kinds = ", ".join(catalogue_kinds())
    out: list[tuple[str, int]] = []
    for position, term in enumerate(text.split("+"), start=1):
        if ":" not in term:
            raise ValueError(f"spec: term {position} {term.strip()!r} of {text!r} is not 'kind:count'; "
                             f"accepted kinds: {accepted_kinds}")
        kind, _, count = term.partition(":")
        kind, count = kind.strip().lower(), count.strip()
        if kind not in catalogue_kinds():
            raise ValueError(f"kind: unknown chip kind {kind!r} in {text!r}; accepted kinds: {accepted_kinds}")
        if not _COUNT.match(count) or int(count) == 0:
            raise ValueError(f"count: expected a positive integer for {kind} in {text!r}, got {count!r}")
        out.append((kind, int(count)))
    return out


def build_groups(runs: Iterable[tuple[str, int, int | None, str]]) -> tuple[SlotGroup, ...]:
    """Slot groups from ``(kind, count, capacity, backing)`` runs, merging adjacent identical runs."""
    merged: list[list] = []
    for kind, count, capacity, backing in runs:
        if merged and merged[-1][0] == kind and merged[-1][2] == capacity and merged[-1][3] == backing:
            merged[-1][1] += count
        else:
            merged.append([kind, count, capacity, backing])
    groups: list[SlotGroup] = []
    first = 0
    for kind, count, capacity, backing in merged:
        groups.append(SlotGroup(kind, count, first, capacity, backing))
        first += count
    return tuple(groups)


def from_kind_counts(text: str) -> RackSpec:
    """A rack from ``"kind:count+kind:count"`` with the default domains and network."""
    pairs = parse_kind_counts(text)
    groups = build_groups((kind, count, None, "auto") for kind, count in pairs)
    name = "+".join(f"{kind}:{count}" for kind, count in pairs)
    return RackSpec(name=name, groups=groups, domains=default_domains(groups),
                    network=default_network(g.kind for g in groups), source=f"spec {text.strip()!r}")


def _domain_class(kind: str, fusion: bool) -> str:
    member = chip(kind)
    if member.scale_up_fabric == "nvlink3":
        return "nvlink3"  # an A100 cannot join NVLink 5 / NVLink Fusion switches
    if member.scale_up_fabric == "nvlink-fusion" or (fusion and member.vendor == "nvidia"):
        return "nvlink-fusion"
    if member.vendor == "nvidia":
        return "nvlink"
    return member.scale_up_fabric  # neuronlink-v2 / -v3 / -v4


def default_domains(groups: Sequence[SlotGroup]) -> tuple[DomainSpec, ...]:
    """The documented default layout (module docstring, rules 1-6) for slot groups in index order."""
    fusion = any(chip(g.kind).scale_up_fabric == "nvlink-fusion" for g in groups)
    runs: list[list] = []  # [class, first, count]
    for group in groups:
        klass = _domain_class(group.kind, fusion)
        if runs and runs[-1][0] == klass:
            runs[-1][2] += group.count
        else:
            runs.append([klass, group.first, group.count])
    fusion_runs = [r for r in runs if r[0] == "nvlink-fusion"]
    if len(fusion_runs) > 1:
        spans = ", ".join(f"{first}-{first + count - 1}" for _, first, count in fusion_runs)
        raise ValueError(f"slots: Trainium4 and NVIDIA GPU slots share one nvlink-fusion domain, so they must be "
                         f"adjacent; they sit at slots {spans}. Reorder the spec (Trainium4 and GPUs together, "
                         f"e.g. 'trn4:4+b200:4+trn3:4') or give [[domains]] in a TOML file")
    nvlink_max = int(NVLINK_MAX_DOMAIN.value)
    layout = {
        # class: (fabric, chunk, full shape, link bandwidth, in-switch reduction)
        "nvlink-fusion": ("nvlink-fusion", nvlink_max, None, None, False),
        "nvlink": ("nvlink", nvlink_max, None, None, True),
        # No NVLS before third-generation NVSwitch (Hopper): A100 domains reduce on the GPUs.
        "nvlink3": ("nvlink", int(NVLINK3_MAX_DOMAIN.value), None, None, False),
        "neuronlink-v3": ("neuronlink-torus", int(TRN2_INSTANCE_CHIPS.value), (4, 4),
                          TRN2_INSTANCE_LINK.value, False),
        "neuronlink-v2": ("neuronlink-torus", int(TRN1_INSTANCE_CHIPS.value), (2, 2, 2, 2), None, False),
        "neuronlink-v4": ("neuronswitch", int(TRN3_ULTRASERVER_CHIPS.value), None, None, False),
    }
    numbering: dict[str, int] = {}
    domains: list[DomainSpec] = []
    for klass, first, count in runs:
        fabric_name, chunk, full_shape, link, reduction = layout[klass]
        start = first
        while start < first + count:
            size = min(chunk, first + count - start)
            shape = None
            if fabric_name == "neuronlink-torus":
                shape = full_shape if size == chunk else (size,)
            prefix = _PREFIX[fabric_name]
            number = numbering.get(prefix, 0)
            numbering[prefix] = number + 1
            domains.append(DomainSpec(f"{prefix}{number}", fabric_name, start, size, shape=shape,
                                      link_bandwidth=link, in_switch_reduction=reduction))
            start += size
    return tuple(domains)


def default_network(kinds: Iterable[str], fabric: str | None = None) -> NetworkSpec:
    """EFA if any Trainium is present else InfiniBand, at the slowest kind's per-slot scale-out bandwidth."""
    present = sorted(set(kinds))
    if not present:
        raise ValueError("slots: a rack needs at least one slot")
    chosen = default_network_fabric(present) if fabric is None else fabric
    bandwidth = min(network_bandwidth(k).value for k in present)
    return NetworkSpec(chosen, bandwidth, fabric_defaults(chosen).latency.value)


def _preset_dir():
    return resources.files("devices") / "presets"


@lru_cache(maxsize=1)
def _preset_names() -> tuple[str, ...]:
    names = sorted(p.name[: -len(".toml")] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))
    # The embedded default first, so listings start with it.
    return tuple(sorted(names, key=lambda n: (n != DEFAULT_PRESET, n)))


@lru_cache(maxsize=None)
def _load_preset_text(name: str) -> tuple[RackSpec, str]:
    from devices.rack_toml import loads_with_description

    text = (_preset_dir() / f"{name}.toml").read_text(encoding="utf-8")
    rack, description = loads_with_description(text, source=f"preset {name}")
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


__all__ = ["DEFAULT_PRESET", "parse", "parse_kind_counts", "from_kind_counts", "build_groups",
           "default_domains", "default_network", "load_preset", "presets"]
