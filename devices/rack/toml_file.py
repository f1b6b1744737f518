"""TOML rack files: reading (with every key checked) and writing.

Format (every table optional except ``[[slots]]``; unknown keys are errors)::

    [rack]
    name = "my-rack"              # default: the file's stem
    description = "one line"      # shown by `hybrid racks`
    replicas = 1                  # the whole rack repeated, joined by [network]
    numerics = "exact"            # "exact" | "device": round the way each slot's kind does
    stochastic_rounding = false   # device mode: stochastic rounding where the kind does it (Trainium)
    stochastic_rounding_seed = 0

    [[slots]]                     # runs of identical slots, in index order
    kind = "h100"
    count = 8                     # default 1
    capacity = "80GB"             # "2GiB", "80GB" or integer bytes; default: the chip's HBM
    backing = "auto"              # "auto" | "emulated" | "cuda:N"
    numerics = "device"           # this run's mode (default: the [rack] numerics)

    [[domains]]                   # default: the layout of devices.rack.layout.default_domains
    name = "nvlink0"
    fabric = "nvlink"             # nvlink-fusion | nvlink | neuronlink-torus | neuronswitch | pcie
    slots = "0-7"                 # inclusive range, one index, or a list of consecutive indices
    shape = [4, 4]                # neuronlink-torus only; product = slot count
    link_bandwidth = "450GB/s"    # bytes/s per direction per slot, a number, or "figure:NAME" (devices.fabrics.NAME)
    latency = "0.6us"             # seconds per hop, or a number
    in_switch_reduction = true
    repeat = 1                    # this domain and repeat - 1 copies right after it, named nvlink0, nvlink1, ...

    [network]                     # default: devices.rack.layout.default_network
    fabric = "efa"                # efa | infiniband
    bandwidth = "25GB/s"          # per slot per direction; "3200Gbps" reads bits; "figure:NAME" as above
    latency = "2.7us"

    [[overrides]]                 # per-slot changes on top of [[slots]]
    slots = "3"                   # same forms as domains.slots
    capacity = "2GiB"
    backing = "cuda:0"
    numerics = "exact"

Capacities and slot counts are int64 where they end up, so anything above
2^63-1 is refused here, naming the key.  A file that is not UTF-8, or nested
deeper than the TOML reader can follow, is a ValueError naming the file.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from devices.chip import kinds
from devices.rack.domain_table import DomainRun
from devices.fabrics import NETWORK_FABRICS
from devices.backing import Backing
from devices.figure import Figure
from devices.rack.parts import DomainSpec, NetworkSpec, check_int64
from devices.rack.numerics import SEED_LIMIT, NumericsSpec, check_mode
from devices.rack.intervals import last_wins, value_at
from devices.rack.layout import build_groups, default_domains, default_network
from devices.rack.spec import RackSpec
from devices.units import parse_bandwidth, parse_duration, parse_size

_KEYS: dict[str, tuple[str, ...]] = {
    "": ("rack", "slots", "domains", "network", "overrides"),
    "rack": ("name", "description", "replicas", "numerics", "stochastic_rounding", "stochastic_rounding_seed"),
    "slots": ("kind", "count", "capacity", "backing", "numerics"),
    "domains": ("name", "fabric", "slots", "shape", "link_bandwidth", "latency", "in_switch_reduction", "repeat"),
    "network": ("fabric", "bandwidth", "latency"),
    "overrides": ("slots", "capacity", "backing", "numerics"),
}

_RANGE = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?")


def _long_number_place(text: str) -> str:
    """``line N, key 'k': `` of the first number longer than Python reads (its int() digit limit), or ''."""
    limit = sys.get_int_max_str_digits() or 0
    if limit:
        long_number = re.compile(rf"[0-9][0-9_]{{{limit},}}")
        for number, line in enumerate(text.splitlines(), 1):
            if long_number.search(line):
                key = line.split("=", 1)[0].strip() if "=" in line else ""
                return f"line {number}" + (f", key {key!r}" if key else "") + ": "
    return ""


def _check_keys(table: Any, section: str, where: str) -> dict:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table, got {table!r}")
    accepted = _KEYS[section]
    for key in table:
        if key not in accepted:
            place = f"{where}.{key}" if where else key
            scope = f" in [{section}]" if section else " at the top level"
            raise ValueError(f"{place}: unknown key; accepted keys{scope}: {', '.join(accepted)}")
    return table


def _array_of_tables(doc: dict, section: str) -> list[dict]:
    value = doc.get(section, [])
    if not isinstance(value, list):
        raise ValueError(f"{section}: expected an array of tables ([[{section}]]), got {value!r}")
    return [_check_keys(item, section, f"{section}[{i}]") for i, item in enumerate(value)]


def _int(value: Any, where: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{where}: expected {kind}, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a non-empty string, got {value!r}")
    return value.strip()


def _capacity(value: Any, where: str) -> int:
    capacity = parse_size(value, where)
    if capacity <= 0:
        raise ValueError(f"{where}: must be positive, got {value!r}")
    return check_int64(capacity, where, "the slot capacity in bytes")


def _slot_range(value: Any, where: str, width: int) -> tuple[int, int]:
    """``"0-3"`` / ``3`` / ``"3"`` / ``[0, 1, 2, 3]`` -> ``(first, count)``; consecutive and inside the rack."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a range 'a-b', an index, or a list of consecutive indices, got {value!r}")
    if isinstance(value, int):
        first, last = value, value
    elif isinstance(value, str):
        match = _RANGE.fullmatch(value)
        if not match:
            raise ValueError(f"{where}: cannot read slot range {value!r}; accepted: 'a-b' (inclusive), 'a', "
                             f"or a list of consecutive indices")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
    elif isinstance(value, list) and value:
        if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ValueError(f"{where}: slot lists hold integers, got {value!r}")
        if list(value) != list(range(value[0], value[0] + len(value))):
            raise ValueError(f"{where}: slots {value!r} must be consecutive and ascending (a domain is a "
                             f"contiguous slot range)")
        first, last = value[0], value[-1]
    else:
        raise ValueError(f"{where}: expected a range 'a-b', an index, or a list of consecutive indices, got {value!r}")
    if first < 0 or last < first:
        raise ValueError(f"{where}: empty or reversed slot range {value!r}")
    if last >= width:
        raise ValueError(f"{where}: slot {last} is outside the rack's {width} slots (0-{width - 1})")
    return first, last - first + 1


def _slot_runs(doc: dict) -> list[list]:
    entries = _array_of_tables(doc, "slots")
    if not entries:
        raise ValueError("slots: a rack file needs at least one [[slots]] entry with kind and count")
    runs: list[list] = []
    total = 0
    for i, entry in enumerate(entries):
        where = f"slots[{i}]"
        if "kind" not in entry:
            raise ValueError(f"{where}.kind: missing; accepted kinds: {', '.join(kinds())}")
        kind = _str(entry["kind"], f"{where}.kind").lower()
        if kind not in kinds():
            raise ValueError(f"{where}.kind: unknown chip kind {entry['kind']!r}; accepted kinds: {', '.join(kinds())}")
        count = _int(entry.get("count", 1), f"{where}.count")
        total = check_int64(total + count, f"{where}.count", "the slot count up to this entry")
        capacity = _capacity(entry["capacity"], f"{where}.capacity") if "capacity" in entry else None
        backing = Backing.parse(entry.get("backing", "auto"), f"{where}.backing")
        runs.append([kind, count, capacity, backing])
    return runs


def _apply_overrides(runs: list[list], doc: dict) -> list[list]:
    # Each override sets capacity and backing on its slots, a later one winning (devices.rack.intervals);
    # build_groups merges what ends up identical again.
    width = sum(r[1] for r in runs)
    capacities, backings = [], []
    for i, entry in enumerate(_array_of_tables(doc, "overrides")):
        where = f"overrides[{i}]"
        if "slots" not in entry:
            raise ValueError(f"{where}.slots: missing; accepted: 'a-b', an index, or a list of consecutive indices")
        first, count = _slot_range(entry["slots"], f"{where}.slots", width)
        if "capacity" in entry:
            capacities.append((first, first + count, _capacity(entry["capacity"], f"{where}.capacity")))
        if "backing" in entry:
            backings.append((first, first + count, Backing.parse(entry["backing"], f"{where}.backing")))
    if not capacities and not backings:
        return runs
    capacity_pieces, backing_pieces = last_wins(capacities), last_wins(backings)
    cuts = {0, width}
    start = 0
    for run in runs:
        start += run[1]
        cuts.add(start)
    for a, b, _ in (*capacity_pieces, *backing_pieces):
        cuts.update((a, b))
    bounds = sorted(cuts)
    run_starts = [0]
    for run in runs:
        run_starts.append(run_starts[-1] + run[1])
    cap_starts = [p[0] for p in capacity_pieces]
    back_starts = [p[0] for p in backing_pieces]
    out: list[list] = []
    r = 0
    for a, b in zip(bounds, bounds[1:]):
        while run_starts[r + 1] <= a:
            r += 1
        kind, _, cap, back = runs[r]
        out.append([kind, b - a, value_at(capacity_pieces, cap_starts, a, cap),
                    value_at(backing_pieces, back_starts, a, back)])
    return out


def _domains(doc: dict, width: int) -> list[DomainRun] | None:
    entries = _array_of_tables(doc, "domains")
    if not entries:
        return None
    out = []
    for i, entry in enumerate(entries):
        where = f"domains[{i}]"
        for required in ("name", "fabric", "slots"):
            if required not in entry:
                raise ValueError(f"{where}.{required}: missing (a domain needs name, fabric and slots)")
        first, count = _slot_range(entry["slots"], f"{where}.slots", width)
        repeat = _int(entry.get("repeat", 1), f"{where}.repeat")
        if first + count * repeat > width:
            raise ValueError(f"{where}.repeat: {repeat} copies of slots {first}-{first + count - 1} reach slot "
                             f"{first + count * repeat - 1}, outside the rack's {width} slots (0-{width - 1})")
        shape = entry.get("shape")
        if shape is not None and not isinstance(shape, list):
            raise ValueError(f"{where}.shape: expected a list of positive integers such as [4, 4], got {shape!r}")
        link = entry.get("link_bandwidth")
        latency = entry.get("latency")
        reduction = entry.get("in_switch_reduction", False)
        try:
            out.append(DomainRun(DomainSpec(
                name=_str(entry["name"], f"{where}.name"),
                fabric=_str(entry["fabric"], f"{where}.fabric"),
                first=first, count=count,
                shape=tuple(shape) if shape is not None else None,
                link_bandwidth=None if link is None else _bandwidth(link, f"{where}.link_bandwidth"),
                latency=None if latency is None else parse_duration(latency, f"{where}.latency"),
                in_switch_reduction=reduction,
            ), repeat))
        except ValueError as error:
            message = str(error)
            raise ValueError(message if message.startswith(where) else f"{where}.{message}") from None
    return out


def _bandwidth(value, where: str):
    """A bandwidth: ``"figure:NAME"`` is the sourced :class:`Figure` ``devices.fabrics.NAME`` (so a preset keeps
    its citation), anything else :func:`parse_bandwidth`."""
    if isinstance(value, str) and value.startswith("figure:"):
        from devices import fabrics

        name = value.removeprefix("figure:").strip()
        figure = getattr(fabrics, name, None)
        if not isinstance(figure, Figure) or figure.unit != "B/s":
            known = sorted(k for k, v in vars(fabrics).items() if isinstance(v, Figure) and v.unit == "B/s")
            raise ValueError(f"{where}: {value!r} names no bandwidth figure of devices.fabrics; accepted: "
                             f"{', '.join('figure:' + k for k in known)}")
        return figure
    return parse_bandwidth(value, where)


def _network(doc: dict, kinds: list[str]) -> NetworkSpec:
    if "network" not in doc:
        return default_network(kinds)
    table = _check_keys(doc["network"], "network", "network")
    fabric_name = None
    if "fabric" in table:
        fabric_name = _str(table["fabric"], "network.fabric").lower()
        if fabric_name not in NETWORK_FABRICS:
            raise ValueError(f"network.fabric: unknown network fabric {table['fabric']!r}; "
                             f"accepted: {', '.join(NETWORK_FABRICS)}")
    base = default_network(kinds, fabric=fabric_name)
    bandwidth = (_bandwidth(table["bandwidth"], "network.bandwidth") if "bandwidth" in table
                 else base.bandwidth_source or base.bandwidth)
    latency = (parse_duration(table["latency"], "network.latency") if "latency" in table
               else base.latency_source or base.latency)
    return NetworkSpec(base.fabric, bandwidth, latency)


def _numerics(doc: dict, rack_table: dict, width: int) -> NumericsSpec | None:
    """[rack] numerics / stochastic_rounding(_seed), [[slots]] numerics, [[overrides]] numerics."""
    ranges: list[tuple[int, int, str]] = []
    first = 0
    for i, entry in enumerate(doc.get("slots", [])):
        count = entry.get("count", 1)
        if "numerics" in entry:
            ranges.append((first, count, check_mode(entry["numerics"], f"slots[{i}].numerics")))
        first += count
    for i, entry in enumerate(doc.get("overrides", [])):
        if "numerics" in entry:
            start, count = _slot_range(entry["slots"], f"overrides[{i}].slots", width)
            ranges.append((start, count, check_mode(entry["numerics"], f"overrides[{i}].numerics")))
    keys = ("numerics", "stochastic_rounding", "stochastic_rounding_seed")
    if not ranges and not any(k in rack_table for k in keys):
        return None
    default = check_mode(rack_table.get("numerics", "exact"), "rack.numerics")
    rounding = rack_table.get("stochastic_rounding", False)
    if not isinstance(rounding, bool):
        raise ValueError(f"rack.stochastic_rounding: expected true or false, got {rounding!r}")
    seed = rack_table.get("stochastic_rounding_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"rack.stochastic_rounding_seed: expected an integer from 0 to 2**64 - 1 (a generator "
                         f"seed), got {seed!r}")
    return NumericsSpec(default, tuple(ranges), rounding, seed)


def loads_with_description(text: str, source: str = "toml text", default_name: str = "rack") -> tuple[RackSpec, str]:
    """A rack and its ``[rack] description`` from TOML text; ValueError naming the bad key or field."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"toml: {source}: {error}") from None
    except RecursionError:
        raise ValueError(f"toml: {source}: nested deeper than the TOML reader can follow; a rack file needs "
                         f"only tables, arrays of tables and flat values") from None
    except ValueError as error:  # tomllib passes int()'s limit on digits through, without a place
        raise ValueError(f"toml: {source}: {_long_number_place(text)}{error}") from None
    _check_keys(doc, "", "")
    rack_table = _check_keys(doc.get("rack", {}), "rack", "rack")
    name = _str(rack_table.get("name", default_name), "rack.name")
    description = rack_table.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"rack.description: expected a string, got {description!r}")
    replicas = _int(rack_table.get("replicas", 1), "rack.replicas")
    runs = _apply_overrides(_slot_runs(doc), doc)
    groups = build_groups(tuple(r) for r in runs)
    width = groups[-1].stop
    check_int64(width * replicas, "rack.replicas", f"the slot count ({width} x {replicas} replicas)")
    domains = _domains(doc, width)
    if domains is None:
        domains = default_domains(groups)
    network = _network(doc, [g.kind for g in groups])
    numerics = _numerics(doc, rack_table, width)
    return RackSpec(name=name, groups=groups, domains=domains, network=network, source=source,
                    replicas=replicas, numerics=numerics), description


def loads(text: str, source: str = "toml text") -> RackSpec:
    """A rack from TOML rack-file text."""
    return loads_with_description(text, source=source)[0]


def load(path: str | os.PathLike) -> RackSpec:
    """A rack from a TOML rack file; the file's stem names the rack unless ``[rack] name`` does."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"file: rack file {str(file)!r} not found") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"file: rack file {str(file)!r} is not UTF-8 (byte 0x{error.object[error.start]:02x} at "
                         f"offset {error.start}); TOML files are UTF-8, save it as UTF-8") from None
    except OSError as error:
        raise ValueError(f"file: cannot read rack file {str(file)!r}: {error}") from None
    return loads_with_description(text, source=f"file {file.name}", default_name=file.stem)[0]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # TOML basic strings share JSON's escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def dumps(rack: RackSpec, description: str = "") -> str:
    """TOML text for ``rack``; :func:`loads` of it gives back equal groups, domains, network and replicas."""
    lines = [f"# rack file written from {rack.source}", "", "[rack]", f"name = {_value(rack.name)}"]
    if description:
        lines.append(f"description = {_value(description)}")
    if rack.replicas != 1:
        lines.append(f"replicas = {rack.replicas}")
    numerics = rack.numerics
    if numerics is not None:
        lines += [f"numerics = {_value(numerics.default)}",
                  f"stochastic_rounding = {_value(numerics.stochastic_rounding)}",
                  f"stochastic_rounding_seed = {numerics.seed}"]
    for group in rack.groups:
        lines += ["", "[[slots]]", f"kind = {_value(group.kind)}", f"count = {group.count}"]
        if group.capacity is not None:
            lines.append(f"capacity = {group.capacity}")
        if group.backing != "auto":
            lines.append(f"backing = {_value(group.backing)}")
    for run in rack.domains.runs:
        domain = run.domain
        lines += ["", "[[domains]]", f"name = {_value(domain.name)}", f"fabric = {_value(domain.fabric)}",
                  f"slots = {_value(f'{domain.first}-{domain.stop - 1}')}"]
        if run.repeat != 1:
            lines.append(f"repeat = {run.repeat}")
        if domain.shape is not None:
            lines.append(f"shape = {_value(list(domain.shape))}")
        if domain.link_bandwidth is not None:
            lines.append(f"link_bandwidth = {_value(domain.link_bandwidth)}")
        if domain.latency is not None:
            lines.append(f"latency = {_value(domain.latency)}")
        lines.append(f"in_switch_reduction = {_value(domain.in_switch_reduction)}")
    for first, count, mode in (() if numerics is None else numerics.ranges):
        lines += ["", "[[overrides]]", f"slots = {_value(f'{first}-{first + count - 1}')}", f"numerics = {_value(mode)}"]
    if rack.network is not None:
        lines += ["", "[network]", f"fabric = {_value(rack.network.fabric)}",
                  f"bandwidth = {_value(rack.network.bandwidth)}", f"latency = {_value(rack.network.latency)}"]
    return "\n".join(lines) + "\n"
