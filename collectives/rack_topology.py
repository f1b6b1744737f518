"""Building the :class:`~collectives.topology.Topology` of a :class:`devices.RackSpec`.

What the catalogue says about a rack's chips and fabrics becomes link
bandwidths with the efficiencies of :mod:`collectives.tuning` applied, hop
latencies, reduce rates, in-switch reduction, the network, and each slot's
PCIe link to the host.  Consecutive domains alike in all but name and position
become one run (one :class:`~collectives.topology.DomainModel` with a
``repeat``), so a flat million-chip spec costs what its replicated form does.

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

import re
from dataclasses import replace

from collectives import tuning
from collectives.topology import DomainModel, HostLinkModel, NetworkModel, Topology

_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")


def build(rack) -> Topology:
    """The topology of a :class:`devices.RackSpec` (uncached: ``collectives.topology(rack)`` caches it)."""
    from devices import fabric

    # Consecutive domains alike in all but name and position become one run (one model), so that a flat
    # million-chip spec costs what its replicated form does once built. The spec's domain table already holds
    # runs: they are read run by run (split where the slot groups' kinds change), never domain by domain.
    runs: list[list] = []  # [key, spec of the first domain, repeat, numbering]
    for d, count in _pieces(rack):
        key = (d.fabric, d.count, d.shape, d.link_bandwidth, d.latency, d.in_switch_reduction, _kinds(rack, d))
        if runs:
            last = runs[-1]
            first, repeat, numbering = last[1], last[2], last[3]
            if (last[0] == key and first.first + repeat * first.count == d.first and numbering is not None
                    and d.name == f"{numbering[0]}{numbering[1] + repeat}"):
                last[2] += count
                continue
        m = _NUMBERED.match(d.name)
        runs.append([key, d, count, (m.group(1), int(m.group(2))) if m else None])
    built: dict[tuple, DomainModel] = {}
    models = []
    for key, d, repeat, numbering in runs:
        base = built.get(key)
        if base is None:
            base = built[key] = _domain_model(rack, d, key[-1])
        models.append(replace(base, name=d.name, first=d.first, repeat=repeat,
                              numbering=numbering if repeat > 1 else None))
    network = None
    if rack.network is not None:
        figs = rack.network_figures()
        eff = tuning.NETWORK_EFFICIENCY
        network = NetworkModel(rack.network.fabric, figs["bandwidth"].value * eff.value, figs["bandwidth"], eff,
                               figs["latency"])
    pcie = fabric("pcie")
    host = HostLinkModel("pcie", pcie.bandwidth.value * tuning.PCIE_EFFICIENCY.value, pcie.bandwidth,
                         tuning.PCIE_EFFICIENCY, pcie.latency)
    return Topology(rack.name, rack.slots_per_replica, rack.replicas, tuple(models), network,
                    tuning.NCCL_PROTOCOLS, True, rack.source, host)


def _kinds(rack, d) -> tuple[str, ...]:
    """The chip kinds of the slot groups a domain holds, sorted."""
    return tuple(sorted({g.kind for g in rack.groups if g.first < d.stop and g.stop > d.first}))


def _pieces(rack):
    """(first domain, how many) of consecutive domains that are alike for the topology: the domain table's runs
    cut where the kinds of the slot groups they hold change, each piece's copies numbered one after the other
    as :data:`_NUMBERED` reads names (a run whose copies it would not read so is given domain by domain)."""
    for run in rack.domains.runs:
        first, count, repeat = run.domain.first, run.domain.count, run.repeat
        cuts = {0, repeat}
        for g in rack.groups:
            for edge in (g.first, g.stop):
                if first < edge < run.stop:
                    k, off = divmod(edge - first, count)
                    cuts.update((k, k + 1) if off else (k,))
        cuts = sorted(c for c in cuts if 0 <= c <= repeat)
        for lo, hi in zip(cuts, cuts[1:]):
            head = run.copy(lo)
            m = _NUMBERED.match(head.name)
            if hi - lo == 1 or (m and run.copy(lo + 1).name == f"{m.group(1)}{int(m.group(2)) + 1}"):
                yield head, hi - lo
            else:
                for k in range(lo, hi):
                    yield run.copy(k), 1


def _domain_model(rack, d, kinds: tuple[str, ...]) -> DomainModel:
    from devices import chip

    chips = [chip(k) for k in kinds]
    if d.fabric == "pcie":
        eff = tuning.link_efficiency("pcie")
        hw = "pci"
    else:
        eff = min((tuning.link_efficiency(c.scale_up_fabric) for c in chips), key=lambda f: f.value)
        hw = "nvlink"
    raw = rack.link_bandwidth_figure(d)
    slow = min(chips, key=lambda c: c.hbm_bandwidth.value)
    g = tuning.REDUCE_PASSES / slow.hbm_bandwidth.value
    switch_eff = None
    if d.in_switch_reduction:
        switch_eff = min((tuning.nvls_efficiency(c.scale_up_fabric) for c in chips), key=lambda f: f.value)
    return DomainModel(
        d.name, d.fabric, d.first, d.count, d.shape, raw.value * eff.value, raw, eff, rack.latency_figure(d), hw,
        d.in_switch_reduction, switch_eff, g,
        f"{tuning.REDUCE_PASSES:g} HBM passes per reduced byte at {slow.kind} HBM bandwidth: "
        f"{slow.hbm_bandwidth.source}")


def from_rack(rack) -> Topology:
    """Build the topology of a rack: a :class:`devices.RackSpec`, a preset name or a spec string.

    This builds a new object each time; ``collectives.topology(rack)`` is the
    cached way to get one.
    """
    import devices

    return build(devices.parse_rack(rack))
