"""One point-to-point transfer model (collectives.transfer): a copy between slots, a host copy and the
send_recv collective on the same route cost the same, from the topology's sourced figures; and the
topology/plan caches are one each and bounded."""

from __future__ import annotations

import pytest
import torch

import collectives
import devices
import interop
from collectives import algorithm_choice as planner
from collectives.rack_topology import from_rack
from collectives.topology import HOST, Topology
from interop.timelines import PS


def _copies():
    return [r for r in interop.timeline() if r.kind == "copy"]


def test_a_slot_copy_costs_what_send_recv_costs_on_the_same_route():
    spec = interop.current_rack().spec
    for src, dst, n in [(0, 5, 1 << 16), (4, 6, 4096), (1, 2, 1 << 20)]:  # fusion domain, both ways round
        x = torch.ones(n // 4, device=f"hybrid:{src}")
        interop.reset_timeline()
        y = x.to(f"hybrid:{dst}")
        (copy,) = _copies()
        out = torch.empty_like(y)
        res = collectives.send_recv(x, out)
        assert copy.duration_ps == round(res.estimate.seconds * PS)
        assert copy.duration_ps == round(collectives.transfer(spec, src, dst, n).seconds * PS)
        del x, y, out


def test_the_transfer_formula_on_a_route():
    # base latency + hops x hop latency + bytes / (bottleneck bandwidth x protocol factor), best protocol.
    topo = from_rack("h100-node*2")
    for src, dst in [(0, 3), (0, 9), (HOST, 2), (5, HOST)]:
        route = topo.route(src, dst)
        bw = min(topo.bandwidth(link) for link in route.links)
        for n in (8, 1 << 26):
            want = min(p.base["ring"].value + route.latency * p.hop_scale[route.hw] + n / (bw * p.bandwidth.value)
                       for p in topo.protocols)
            got = collectives.transfer(topo, src, dst, n)
            assert got.seconds == pytest.approx(want, rel=1e-12), (src, dst, n)
            assert got.modelled and got.hops == route.hops


def test_host_copies_cross_the_slots_pcie_link_of_the_topology():
    topo = collectives.topology(interop.current_rack().spec)
    pcie = devices.fabric("pcie")
    route = topo.route(HOST, 3)
    assert route.links == (("h2d", 3),) and route.fabric == "pcie" and route.hw == "pci"
    assert topo.route(3, HOST).links == (("d2h", 3),)
    # The catalogue's PCIe figures, with the same efficiency a PCIe domain gets.
    assert topo.bandwidth(("h2d", 3)) == pytest.approx(pcie.bandwidth.value * collectives.tuning.PCIE_EFFICIENCY.value)
    assert route.latency == pcie.latency.value
    est = collectives.transfer(interop.current_rack().spec, HOST, 3, 4000)
    assert any(pcie.bandwidth.source in s for s in est.sources) and est.fabric == "pcie"
    interop.reset_timeline()
    x = torch.ones(1000).to("hybrid:3")
    back = x.cpu()
    up, down = _copies()
    assert up.link == "host->hybrid:3 (pcie)" and down.link == "hybrid:3->host (pcie)"
    assert up.duration_ps == round(est.seconds * PS) == down.duration_ps
    del x, back


def test_transfer_refuses_what_is_not_a_transfer():
    topo = from_rack("h100-node")
    with pytest.raises(ValueError, match="src and dst"):
        collectives.transfer(topo, 2, 2, 10)
    with pytest.raises(ValueError, match="nbytes"):
        collectives.transfer(topo, 0, 1, -1)
    with pytest.raises(IndexError, match="slot 8"):
        collectives.transfer(topo, HOST, 8, 10)
    with pytest.raises(ValueError, match="no host link"):
        collectives.transfer(Topology.ideal(4, 1e-6, 1e-9), HOST, 1, 10)


def test_one_topology_cache_keyed_so_it_cannot_leak():
    spec = devices.parse_rack("h100-node")
    assert collectives.topology(spec) is collectives.topology(spec)  # a spec: by identity
    assert collectives.topology("h100-node") is collectives.topology(" h100-node ")  # a preset: by its text
    for i in range(planner.TOPOLOGY_CACHE_SIZE + 20):
        collectives.topology(devices.parse_rack(f"h100:{i + 1}"))
    assert len(planner._topologies) <= planner.TOPOLOGY_CACHE_SIZE


def test_one_plan_cache_is_bounded_and_shared():
    topo = collectives.topology("h100-node")
    a = planner.cached_plan(topo, "all_reduce", 1000, 4, (0, 1, 2))
    assert planner.cached_plan(topo, "all_reduce", 1000, 4, [0, 1, 2]) is a
    for n in range(planner.PLAN_CACHE_SIZE + 10):
        planner.cached_plan(topo, "all_gather", n + 1, 4, (0, 1), build=False)
    assert planner._cached_plan.cache_info().currsize <= planner.PLAN_CACHE_SIZE


def test_a_flat_rack_is_one_run_of_domains():
    flat = from_rack("trn3:1440")  # ten 144-chip NeuronSwitch domains
    assert len(flat.domains) == 1 and flat.domains[0].repeat == 10 and flat.domain_count == 10
    replicated = from_rack("trn3:144*10")
    assert flat.domain_name(1439) == "switch9" and flat.domain_name(150) == "switch1"
    assert replicated.domain_name(150) == "switch0@1"
    # The same routes and the same estimates as the replicated form of the same rack.
    for a, b in [(0, 143), (0, 144), (300, 301), (1439, 0)]:
        assert flat.route(a, b).links == replicated.route(a, b).links
    for op in ("all_reduce", "all_gather"):
        assert collectives.estimate(flat, op, 1 << 24).seconds == pytest.approx(
            collectives.estimate(replicated, op, 1 << 24).seconds, rel=1e-12)
    sub = [150, 151, 152, 400]  # explicit slots in two domains of the run
    assert flat.group_ranks(sub) == ((0, 1, 2), (3,))
