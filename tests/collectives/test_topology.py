"""Topology: routes, bandwidths, latencies, in-switch domains, link sharing, million-chip racks kept symbolic."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import pytest

import devices
from collectives import tuning as cal
from collectives.tuning import IDEAL, SIMPLE
from collectives.cost import levels, schedule_time
from collectives.schedule import CollectiveSpec, Rounds, Transfer, make
from collectives.rack_topology import from_rack
from collectives.topology import Topology


def test_switch_route_is_one_hop_through_the_switch():
    topo = from_rack("h100-node")
    route = topo.route(2, 5)
    assert route.links == (("tx", 2), ("rx", 5))
    assert route.hops == 1 and route.hw == "nvlink"
    assert route.latency == pytest.approx(0.6e-6)  # devices' NVLink hop (NCCL LL)
    assert topo.route(3, 3).links == ()


def test_bandwidth_is_per_direction_with_the_nccl_link_efficiency():
    topo = from_rack("h100-node")
    # 450 GB/s per direction (H100 datasheet) x 20.6/25 (NCCL SM90_NVLINK_BW): 370.8 GB/s
    assert topo.bandwidth(("tx", 0)) == pytest.approx(450e9 * 20.6 / 25)
    assert topo.bandwidth(("rx", 7)) == pytest.approx(370.8e9)
    assert "SM90_NVLINK_BW" in topo.domains[0].efficiency.note


def test_nvlink_fusion_domain_joins_trainium4_and_gpus():
    topo = from_rack("fusion-default")
    trn4, b200 = 0, 7
    assert devices.parse_rack("fusion-default").slot(trn4).kind == "trn4"
    route = topo.route(trn4, b200)
    assert route.links == (("tx", trn4), ("rx", b200)) and route.hops == 1
    # the slower port sets the pace; both are NVLink 5 class at 900 GB/s per direction
    assert topo.bandwidth(("tx", trn4)) == pytest.approx(900e9 * 40.1 / 50)


def test_torus_routes_hop_neighbour_to_neighbour_the_short_way_round():
    topo = from_rack("trn2-instance")  # 4x4
    assert topo.route(0, 1).hops == 1
    assert topo.route(0, 3).hops == 1  # wraps around
    assert topo.route(0, 5).hops == 2
    assert topo.route(0, 10).hops == 4  # (0,0) -> (2,2): two each way is the diameter
    for link in topo.route(0, 10).links:
        assert link[0] == "t"
    dom = topo.domains[0]
    assert dom.links_per_slot == 4
    assert topo.bandwidth(topo.route(0, 1).links[0]) == pytest.approx(dom.bandwidth / 4)


def test_torus_3d_and_hypercube():
    topo = from_rack("trn2-ultraserver")  # 4x4x4
    assert topo.domains[0].links_per_slot == 6
    assert topo.route(0, 63).hops == 3  # (0,0,0) -> (3,3,3): one wrap per dimension
    torus = from_rack("trn1-instance")  # 4x4 torus, the graph of the 4D hypercube older Neuron pages name
    assert torus.domains[0].links_per_slot == 4
    assert torus.route(0, 15).hops == 2  # (0,0) -> (3,3): one wrap per dimension
    cube = from_rack(devices.loads_rack(
        "[[slots]]\nkind='trn1'\ncount=16\n[[domains]]\nname='t'\nfabric='neuronlink-torus'\nslots='0-15'\n"
        "shape=[2,2,2,2]"))
    assert cube.domains[0].links_per_slot == 4 and cube.route(0, 15).hops == 4


def test_neuronswitch_is_all_to_all():
    topo = from_rack("trn3-ultraserver")
    assert topo.route(0, 143).hops == 1
    assert topo.domains[0].fabric == "neuronswitch"
    assert not topo.domains[0].in_switch


def test_network_joins_domains_and_replicas():
    topo = from_rack("h100-node*2")
    route = topo.route(1, 9)
    assert route.links == (("ntx", 1), ("nrx", 9)) and route.hw == "net"
    assert topo.bandwidth(("ntx", 1)) == pytest.approx(50e9 * cal.NETWORK_EFFICIENCY.value)
    mixed = from_rack("trn3:2+h100:2")
    assert mixed.route(0, 1).hw == "nvlink" and mixed.route(1, 2).hw == "net"


def test_in_switch_domains():
    assert from_rack("h100-node").switch_domain(range(8)) is not None
    assert from_rack("h100-node").switch_domain([1, 4]) is not None
    assert from_rack("fusion-default").switch_domain(range(8)) is None  # none announced
    assert from_rack("h100-node*2").switch_domain(range(16)) is None  # two switches
    assert from_rack("h100-node*2").switch_domain(range(8, 16)) is not None
    dom = from_rack("gb300-nvl72").switch_domain(range(72))
    assert dom.switch_efficiency.value == pytest.approx(0.74)  # Blackwell NVLS (NCCL)
    assert from_rack("h100-node").domains[0].switch_efficiency.value == pytest.approx(0.85)


def test_million_chip_rack_is_symbolic():
    tracemalloc.start()
    topo = from_rack("trn3-ultraserver*7282")
    placement = topo.placement()
    route = topo.route(5, 1_048_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(topo) == 1_048_608
    assert placement.groups == 7282 and placement.group_size == 144
    assert route.hw == "net"
    assert peak < 5_000_000  # bytes: far below one object per chip
    assert len(topo.domains) == 1


def test_link_sharing_divides_bandwidth():
    topo = Topology.ideal(4, alpha=1e-6, beta=1e-9)
    spec = CollectiveSpec(op="all_to_all", participants=4, count=1000)
    one = make(spec, "test", [[Transfer((0,), (1,), "in", 0, "out", 0, 1000)]])
    # two transfers leaving rank 0 share its port; two into rank 3 share its port
    two = make(spec, "test", [[Transfer((0,), (1,), "in", 0, "out", 0, 1000),
                               Transfer((0,), (2,), "in", 1000, "out", 0, 1000)]])
    slots = list(range(4))
    assert schedule_time(one, topo, slots, IDEAL) == pytest.approx(1e-6 + 1000e-9)
    assert schedule_time(two, topo, slots, IDEAL) == pytest.approx(1e-6 + 2000e-9)
    # disjoint ports do not share
    apart = make(spec, "test", [[Transfer((0,), (1,), "in", 0, "out", 0, 1000),
                                 Transfer((2,), (3,), "in", 0, "out", 0, 1000)]])
    assert schedule_time(apart, topo, slots, IDEAL) == pytest.approx(1e-6 + 1000e-9)


def test_rounds_add_up_and_reduce_time_is_added_on_ideal_topologies():
    topo = Topology.ideal(2, alpha=2e-6, beta=1e-9, gamma=5e-10)
    spec = CollectiveSpec(op="all_reduce", participants=2, count=100)
    r = Rounds()
    r.send(0, 0, 1, "in", 0, "out", 0, 100, reduce=True, acc_buf="in")
    r.send(1, 1, 0, "out", 0, "out", 0, 100)
    sched = make(spec, "test", r)
    assert schedule_time(sched, topo, [0, 1], IDEAL) == pytest.approx(2 * 2e-6 + 100e-9 + 100 * 5e-10 + 100e-9)


def test_reduce_overlaps_the_transfer_on_real_racks():
    # NCCL fuses the reduce into the copy: on an H100 the 3 HBM passes per byte (3/3.35 TB/s)
    # are faster than NVLink, so no reduce time shows.
    topo = from_rack("h100-node")
    assert topo.overlap_reduce
    assert topo.reduce_g(0) == pytest.approx(3 / 3.35e12)
    spec = CollectiveSpec(op="all_reduce", participants=2, count=10**6)
    r = Rounds()
    r.send(0, 0, 1, "in", 0, "out", 0, 10**6, reduce=True, acc_buf="in")
    t = schedule_time(make(spec, "test", r), topo, [0, 1], SIMPLE)
    assert t == pytest.approx(3.4e-6 + 1e6 / 370.8e9)


def test_protocols_scale_latency_and_bandwidth():
    topo = from_rack("h100-node")
    placement = topo.placement()
    simple, ll = levels(topo, placement, SIMPLE), levels(topo, placement, cal.LL)
    assert simple.flat.a == pytest.approx(3.4e-6) and ll.flat.a == pytest.approx(0.6e-6)
    assert ll.flat.b == pytest.approx(2 * simple.flat.b)
    assert levels(topo, placement, cal.LL128).flat.b == pytest.approx(simple.flat.b / 0.92)


def test_sources_cite_every_figure():
    text = "\n".join(from_rack("trn3:2+h100:2").sources())
    for needle in ("H100", "Trainium3", "topo.h", "tuning.cc", "HBM", "network"):
        assert needle in text


def test_importing_topology_does_not_import_torch():
    code = "import collectives, collectives.topology, collectives.algorithm_choice, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_rack_raises_value_error():
    with pytest.raises(ValueError):
        from_rack("no-such-rack")


# -- costs that do not grow with counts (issue 17, section 2) --------------------------------------------------


def _walked_layout(topo, slots):
    # The member-by-member layout the counted one replaces (kept here as the reference).
    groups = topo.group_ranks(slots)
    sizes = {len(g) for g in groups}
    doms = {id(d): d for d in (topo.domain_of(slots[g[0]])[1] for g in groups)}
    return len(groups), sizes.pop() if len(sizes) == 1 else None, tuple(doms.values())


@pytest.mark.parametrize("rack", ["h100-node*40", "h100:1000", "trn3-ultraserver*30", "trn3:4+h100:4*50",
                                  "trn3:144+gb300:72*3", "trn2:512", "h100:12+b200:12+trn2:32*7",
                                  "trn2-ultraserver*9"])
def test_strided_groups_are_counted_as_the_walk_counts_them(rack):
    import random

    topo = from_rack(rack)
    rng = random.Random(rack)
    n = len(topo)
    for _ in range(120):
        step = rng.choice([1, 2, 3, 5, 8, 9, 16, 17, 64, 72, 100, 144, 145, 288, rng.randint(1, n)])
        start = rng.randrange(n)
        count = rng.randint(2, (n - 1 - start) // step + 1) if start + step < n else 1
        slots = range(start, start + count * step, step)
        counted = topo.placement(slots) if len(slots) > 256 else None
        c, sizes, doms = topo._range_groups(start, step, count)
        assert (c, sizes.pop() if len(sizes) == 1 else None, tuple(doms.values())) == _walked_layout(topo, slots)
        if counted is not None:
            assert (counted.groups, counted.group_size, counted.domains) == _walked_layout(topo, slots)
            assert counted.ranks is None and counted.participants == len(slots)


def _domain_by_domain(rack):
    # The construction the run-by-run build replaces: one key per domain, consecutive alike ones merged.
    import re

    numbered = re.compile(r"^(.*?)([0-9]+)$")
    runs = []
    for d in rack.domains:
        kinds = tuple(sorted({g.kind for g in rack.groups if g.first < d.stop and g.stop > d.first}))
        key = (d.fabric, d.count, d.shape, d.link_bandwidth, d.latency, d.in_switch_reduction, kinds)
        if runs and runs[-1][0] == key and runs[-1][1].first + runs[-1][2] * runs[-1][1].count == d.first \
                and runs[-1][3] is not None and d.name == f"{runs[-1][3][0]}{runs[-1][3][1] + runs[-1][2]}":
            runs[-1][2] += 1
            continue
        m = numbered.match(d.name)
        runs.append([key, d, 1, (m.group(1), int(m.group(2))) if m else None])
    return [(d.name, d.first, repeat, key[-1]) for key, d, repeat, _ in runs]


@pytest.mark.parametrize("rack", ["h100:64", "trn3:4+h100:4", "trn3:8+h100:8*3", "trn4:4+b200:4", "h100:20+b200:20",
                                  "trn3:144+gb300:72", "h100:12+b200:12+trn2:32", "trn2:100", "h100:100003",
                                  "fusion-default", "trn2-ultraserver*2", "gb300-nvl72*3"])
def test_topology_is_built_run_by_run_as_domain_by_domain(rack):
    spec = devices.parse_rack(rack)
    built = from_rack(spec)
    assert [(d.name, d.first, d.repeat, None) for d in built.domains] == [
        (name, first, repeat, None) for name, first, repeat, _ in _domain_by_domain(spec)]


def test_a_trillion_chip_rack_builds_one_domain_run():
    tracemalloc.start()
    topo = from_rack("h100:1000000000000")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(topo) == 10**12 and len(topo.domains) <= 2 and peak < 1_000_000
    layout = topo.placement(range(3, 10**12, 10**5 + 7))  # ten million members, counted
    assert layout.participants == len(range(3, 10**12, 10**5 + 7)) and layout.group_size == 1
