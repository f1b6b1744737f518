"""Rack specs: grammar, default layout, presets, TOML files, replicas, and every malformed case."""

from __future__ import annotations

import dataclasses
import pathlib
import tracemalloc

import pytest

import devices
from devices import (DomainSpec, NetworkSpec, RackSpec, SlotGroup, parse_bandwidth, parse_duration, parse_rack,
                     parse_size, presets)
from devices.rack import parse as rack_parse

GiB = 2**30


# -- units -------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("2GiB", 2 * GiB), ("80GB", 80 * 10**9), ("96 GiB", 96 * GiB), ("1.5GiB", 3 * GiB // 2),
    ("4096", 4096), (4096, 4096), ("1KiB", 1024), ("1KB", 1000), ("3MiB", 3 * 2**20), ("1TB", 10**12),
    ("1TiB", 2**40), ("2gib", 2 * GiB), ("0B", 0), ("7 B", 7),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected
    assert isinstance(parse_size(text), int)


@pytest.mark.parametrize("bad", ["2XB", "abc", "-1GB", "0.5B", "", "GB", True, None, 2.5, [1]])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="capacity"):
        parse_size(bad, "capacity")


def test_parse_size_error_lists_units():
    with pytest.raises(ValueError, match="accepted units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"):
        parse_size("2 XB")


def test_parse_bandwidth_and_duration():
    assert parse_bandwidth("450GB/s") == pytest.approx(450e9)
    assert parse_bandwidth("3200Gbps") == pytest.approx(400e9)  # bits
    assert parse_bandwidth("1.8TB/s") == pytest.approx(1.8e12)
    assert parse_bandwidth(25e9) == 25e9
    assert parse_duration("0.6us") == pytest.approx(0.6e-6)
    assert parse_duration("2.7 us") == pytest.approx(2.7e-6)
    assert parse_duration("1ms") == pytest.approx(1e-3)
    for bad in ("450GB", "fast", 0, -1.0):
        with pytest.raises(ValueError, match="link_bandwidth"):
            parse_bandwidth(bad, "link_bandwidth")
    with pytest.raises(ValueError, match="latency.*accepted units: s, ms, us"):
        parse_duration("3 parsecs")


# -- grammar -----------------------------------------------------------------

def test_kind_count_spec():
    rack = parse_rack("trn3:2+h100:2")
    assert len(rack) == 4
    assert rack.kinds() == ["trn3", "trn3", "h100", "h100"]
    assert [(g.kind, g.count, g.first) for g in rack.groups] == [("trn3", 2, 0), ("h100", 2, 2)]
    assert rack.source == "spec 'trn3:2+h100:2'"
    assert [(d.fabric, d.first, d.count) for d in rack.domains] == [("neuronswitch", 0, 2), ("nvlink", 2, 2)]
    assert rack.network.fabric == "efa"
    # The slower chip's per-slot EFA share bounds the network: Trn3 25 GB/s vs H100 50 GB/s.
    assert rack.network.bandwidth == pytest.approx(25e9)
    assert rack.network.latency == pytest.approx(2.7e-6)


def test_spec_whitespace_and_case():
    assert parse_rack("  TRN3 : 2 +\th100:2 ").groups == parse_rack("trn3:2+h100:2").groups


def test_adjacent_runs_merge():
    rack = parse_rack("h100:4+h100:4")
    assert len(rack.groups) == 1 and rack.groups[0].count == 8


@pytest.mark.parametrize("spec, field", [
    ("x100:4", "kind"),
    ("h100:0", "count"),
    ("h100:-1", "count"),
    ("h100:1.5", "count"),
    ("h100:four", "count"),
    ("h100:", "count"),
    ("h100:4+", "spec"),
    ("h100:4++trn3:2", "spec"),
    ("", "spec"),
    ("   ", "spec"),
    ("fusion-defualt", "preset"),
    ("h100", "preset"),
    ("h100-node*0", "replicas"),
    ("h100-node*-3", "replicas"),
    ("h100-node*two", "replicas"),
    ("no/such/rack.toml", "file"),
    ("trn4:2+trn3:2+h100:2", "slots"),
])
def test_malformed_specs(spec, field):
    with pytest.raises(ValueError, match=rf"^{field}\b") as info:
        parse_rack(spec)
    message = str(info.value)
    assert "accepted" in message or "expected" in message or "not found" in message or "Reorder" in message


def test_unknown_kind_lists_accepted_kinds():
    with pytest.raises(ValueError, match="accepted kinds: a100, b200, gb200, gb300, h100, h200, trn1, trn2, trn3, trn4"):
        parse_rack("x100:4")


def test_unknown_preset_lists_presets():
    with pytest.raises(ValueError, match="accepted presets: fusion-default, .*h100-node"):
        parse_rack("nope")


# -- default layout ------------------------------------------------------------

def test_trn4_and_gpus_share_one_fusion_domain():
    rack = parse_rack("b200:2+trn4:2+h100:2+trn3:2")
    fusion, switch = rack.domains
    assert (fusion.fabric, fusion.first, fusion.count) == ("nvlink-fusion", 0, 6)
    assert (switch.fabric, switch.first, switch.count) == ("neuronswitch", 6, 2)
    assert not fusion.in_switch_reduction
    # The slowest port in the domain sets its per-slot bandwidth: H100 NVLink 4, 450 GB/s per direction.
    assert rack.link_bandwidth(fusion) == pytest.approx(450e9)


def test_gpus_without_trn4_form_an_nvlink_domain_with_reduction():
    rack = parse_rack("h100:8")
    (domain,) = rack.domains
    assert domain.fabric == "nvlink" and domain.in_switch_reduction and domain.count == 8
    assert rack.network.fabric == "infiniband" and rack.network.bandwidth == pytest.approx(50e9)
    assert rack.latency(domain) == pytest.approx(0.6e-6)


def test_a100s_form_nvlink3_domains_of_16_without_reduction_and_never_join_fusion():
    assert [(d.fabric, d.count, d.in_switch_reduction) for d in parse_rack("a100:20").domains] == [
        ("nvlink", 16, False), ("nvlink", 4, False)]
    rack = parse_rack("trn4:2+b200:2+a100:4")
    assert [(d.fabric, d.count) for d in rack.domains] == [("nvlink-fusion", 4), ("nvlink", 4)]
    assert rack.link_bandwidth(rack.domains[1]) == pytest.approx(600e9 / 2)
    # One 200 Gb/s HDR NIC per A100 in a DGX A100; one 400 Gb/s NIC per GB200 GPU.
    assert parse_rack("a100-node").network.bandwidth == pytest.approx(200e9 / 8)
    assert parse_rack("gb200:8").network.bandwidth == pytest.approx(400e9 / 8)


def test_nvlink_domains_cap_at_576():
    rack = parse_rack("h100:600")
    assert [(d.first, d.count) for d in rack.domains] == [(0, 576), (576, 24)]


def test_trn2_tori_per_instance():
    rack = parse_rack("trn2:40")
    assert [(d.fabric, d.count, d.shape) for d in rack.domains] == [
        ("neuronlink-torus", 16, (4, 4)), ("neuronlink-torus", 16, (4, 4)), ("neuronlink-torus", 8, (8,))]
    # 1,024 GB/s per chip inside a trn2.48xlarge (specs.md), halved per direction.
    assert all(d.link_bandwidth == pytest.approx(512e9) for d in rack.domains)
    assert "trn2.48xlarge" in rack.link_bandwidth_figure(rack.domains[0]).source


def test_trn1_torus_and_trn3_switches():
    # The Neuron docs' 2D torus (their older "4D hypercube" is the same graph: C4 x C4 = Q4).
    assert parse_rack("trn1:16").domains[0].shape == (4, 4)
    rack = parse_rack("trn3:300")
    assert [(d.fabric, d.count) for d in rack.domains] == [
        ("neuronswitch", 144), ("neuronswitch", 144), ("neuronswitch", 12)]
    assert rack.link_bandwidth(rack.domains[0]) == pytest.approx(2.56e12 / 2)


# -- presets -------------------------------------------------------------------

REQUIRED_PRESETS = {
    # name: (kind counts, [(fabric, count, shape, in_switch_reduction)])
    "fusion-default": ({"trn4": 4, "b200": 4}, [("nvlink-fusion", 8, None, False)]),
    "h100-node": ({"h100": 8}, [("nvlink", 8, None, True)]),
    "h200-node": ({"h200": 8}, [("nvlink", 8, None, True)]),
    "b200-node": ({"b200": 8}, [("nvlink", 8, None, True)]),
    "trn2-instance": ({"trn2": 16}, [("neuronlink-torus", 16, (4, 4), False)]),
    "trn1-instance": ({"trn1": 16}, [("neuronlink-torus", 16, (4, 4), False)]),
    "trn1n-instance": ({"trn1": 16}, [("neuronlink-torus", 16, (4, 4), False)]),
    "trn2-ultraserver": ({"trn2": 64}, [("neuronlink-torus", 64, (4, 4, 4), False)]),
    "trn3-ultraserver": ({"trn3": 144}, [("neuronswitch", 144, None, False)]),
    "gb300-nvl72": ({"gb300": 72}, [("nvlink", 72, None, True)]),
    "gb200-nvl72": ({"gb200": 72}, [("nvlink", 72, None, True)]),
    # No NVLS before Hopper's third-generation NVSwitch.
    "a100-node": ({"a100": 8}, [("nvlink", 8, None, False)]),
}


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS))
def test_required_presets(name):
    counts, layout = REQUIRED_PRESETS[name]
    rack = devices.load_preset(name)
    assert rack.name == name and rack.source == f"preset {name}"
    assert rack.counts() == counts
    assert [(d.fabric, d.count, d.shape, d.in_switch_reduction) for d in rack.domains] == layout
    assert rack.network is not None


def test_trn1n_and_trn1_clusters():
    # AWS Trn1/Trn1n architecture: trn1n doubles the NeuronLink-v2 (768 GiB/s per chip, 384 per direction) and the
    # EFA (1,600 Gbps per instance of 16 chips = 12.5 GB/s per chip); the figures keep their citations.
    trn1, trn1n = devices.load_preset("trn1-instance"), devices.load_preset("trn1n-instance")
    assert trn1.link_bandwidth(trn1.domains[0]) == 192 * 2**30 and trn1.network.bandwidth == 800e9 / 8 / 16
    assert trn1n.link_bandwidth(trn1n.domains[0]) == 384 * 2**30 and trn1n.network.bandwidth == 1600e9 / 8 / 16
    assert "768 GiB/s" in trn1n.link_bandwidth_figure(trn1n.domains[0]).source
    assert "1,600 Gbps" in trn1n.network.bandwidth_source.source
    for nodes in (16, 32):
        cluster = devices.load_preset(f"trn1-cluster-{nodes}")
        assert len(cluster) == 16 * nodes and cluster.counts() == {"trn1": 16 * nodes}
        assert cluster.network.fabric == "efa" and cluster.network.bandwidth == trn1.network.bandwidth
    bad = "[[slots]]\nkind='trn1'\ncount=16\n[[domains]]\nname='t'\nfabric='neuronlink-torus'\nslots='0-15'\n"
    with pytest.raises(ValueError, match="domains\\[0\\].link_bandwidth: 'figure:NOPE' names no bandwidth figure "
                                         "of devices.fabrics; accepted: figure:PCIE_GEN5_X16"):
        devices.loads_rack(bad + "link_bandwidth='figure:NOPE'")
    with pytest.raises(ValueError, match="network.bandwidth: 'figure:TRN1_INSTANCE_CHIPS' names no bandwidth"):
        devices.loads_rack(bad + "[network]\nbandwidth='figure:TRN1_INSTANCE_CHIPS'")


def test_preset_listing():
    listed = presets()
    assert list(listed)[0] == devices.DEFAULT_PRESET == "fusion-default"
    assert set(REQUIRED_PRESETS) <= set(listed)
    assert all(description.strip() for description in listed.values())
    assert devices.load_preset(" H100-Node ") == devices.load_preset("h100-node")
    with pytest.raises(ValueError, match="preset: unknown preset 'h100-nodes'"):
        devices.load_preset("h100-nodes")


def test_preset_figures_from_specs():
    trn2 = devices.load_preset("trn2-instance")
    assert trn2.link_bandwidth(trn2.domains[0]) == pytest.approx(1024e9 / 2)
    assert trn2.network.bandwidth == pytest.approx(3.2e12 / 8 / 16)
    # The figures keep the documents they came from (no provenance recovered by matching numbers).
    from devices.sources import TRN2_ARCH

    for fig in (trn2.network_figures()["bandwidth"], trn2.link_bandwidth_figure(trn2.domains[0])):
        assert TRN2_ARCH.marker in fig.source and "trn2.48xlarge" in fig.source
    ultra = devices.load_preset("trn2-ultraserver")
    assert ultra.link_bandwidth(ultra.domains[0]) == pytest.approx(1.28e12 / 2)
    nvl72 = devices.load_preset("gb300-nvl72")
    # 72 GPUs x 1.8 TB/s bidirectional = 130 TB/s aggregate (specs.md)
    assert 72 * 2 * nvl72.link_bandwidth(nvl72.domains[0]) == pytest.approx(129.6e12)
    fusion = devices.load_preset("fusion-default")
    assert fusion.link_bandwidth(fusion.domains[0]) == pytest.approx(900e9)  # B200's port, the slower one
    assert fusion.slot(0).capacity == 288 * GiB and fusion.slot(4).capacity == 180 * 10**9


# -- slots ---------------------------------------------------------------------

def test_slot_lookup():
    rack = parse_rack("trn2:2+h100:1")
    assert rack.slot(0) == devices.Slot(0, "trn2", 96 * GiB, "auto", "torus0", 0)
    assert rack.slot(2).kind == "h100" and rack.slot(2).capacity == 80 * 10**9 and rack.slot(2).domain == "nvlink0"
    assert [s.index for s in rack.iter_slots()] == [0, 1, 2]
    assert rack.domain_of(2).name == "nvlink0" and rack.group_of(1).kind == "trn2"
    for bad in (3, -1):
        with pytest.raises(IndexError):
            rack.slot(bad)
    with pytest.raises(TypeError):
        rack.slot("0")


def test_million_slot_spec_is_small():
    # How fast it builds is measured in benchmarks/bench_scale.py; here: nothing is built per slot.
    rack_parse._load_preset_text.cache_clear()
    cold = parse_rack("trn3-ultraserver*7282")
    assert len(cold) == 144 * 7282 == 1_048_608
    tracemalloc.start()
    rack = parse_rack("trn3-ultraserver*7282")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 256 * 1024, peak  # nothing per slot
    assert rack.replicas == 7282 and rack.slots_per_replica == 144
    last = rack.slot(len(rack) - 1)
    assert (last.kind, last.replica, last.domain) == ("trn3", 7281, "switch0@7281")
    assert rack.counts() == {"trn3": 1_048_608}
    assert rack.name == "trn3-ultraserver*7282"
    with pytest.raises(ValueError, match="kinds: the rack has 1048608 slots"):
        rack.kinds()
    with pytest.raises(IndexError):
        rack.slot(len(rack))


def test_replicas_multiply():
    rack = parse_rack("h100-node*2*3")
    assert rack.replicas == 6 and len(rack) == 48
    assert parse_rack("h100:8*2").replicas == 2


# -- TOML ----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(presets()))
def test_preset_round_trips_through_toml(name):
    rack = devices.load_preset(name)
    again = devices.loads_rack(devices.dumps_rack(rack), source="round trip")
    assert again == dataclasses.replace(rack, source="round trip")


def test_round_trip_through_a_file(tmp_path):
    rack = parse_rack("trn2:16+h100:8*3")
    path = tmp_path / "mine.toml"
    path.write_text(devices.dumps_rack(rack))
    for spec in (str(path), path):
        again = parse_rack(spec)
        assert again.source == "file mine.toml"
        assert (again.groups, again.domains, again.network, again.replicas) == (
            rack.groups, rack.domains, rack.network, rack.replicas)
    assert parse_rack(f"{path}*2").replicas == 6


def test_full_toml_file(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text("""
[rack]
description = "two Trn2 and four H100, one H100 on a real GPU"

[[slots]]
kind = "trn2"
count = 2
capacity = "2GiB"

[[slots]]
kind = "H100"
count = 4
backing = "emulated"

[[domains]]
name = "ring"
fabric = "neuronlink-torus"
slots = [0, 1]
shape = [2]

[[domains]]
name = "gpus"
fabric = "nvlink"
slots = "2-5"
link_bandwidth = "450GB/s"
latency = "1us"
in_switch_reduction = true

[network]
fabric = "efa"
bandwidth = "3200Gbps"
latency = 5e-6

[[overrides]]
slots = 5
backing = "cuda:0"
capacity = 80000000000
""")
    rack = devices.load_rack(path)
    assert rack.name == "lab"  # the file's stem
    assert [s.capacity for s in rack.iter_slots()] == [2 * GiB] * 2 + [80 * 10**9] * 4
    assert [s.backing for s in rack.iter_slots()] == ["auto"] * 2 + ["emulated"] * 3 + ["cuda:0"]
    gpus = rack.domains[1]
    assert rack.link_bandwidth(gpus) == 450e9 and rack.latency(gpus) == 1e-6 and gpus.in_switch_reduction
    assert rack.latency_figure(gpus).note == "set by the rack spec"
    assert rack.network == NetworkSpec("efa", 400e9, 5e-6)
    assert devices.loads_rack(devices.dumps_rack(rack)).groups == rack.groups


def test_toml_without_domains_gets_the_default_layout():
    rack = devices.loads_rack('[[slots]]\nkind = "trn4"\ncount = 2\n[[slots]]\nkind = "b200"\n')
    assert rack.counts() == {"trn4": 2, "b200": 1}  # count defaults to 1
    assert [(d.fabric, d.count) for d in rack.domains] == [("nvlink-fusion", 3)]


_SLOTS4 = '[[slots]]\nkind = "h100"\ncount = 4\n'
_DOMAIN = '[[domains]]\nname = "a"\nfabric = "nvlink"\n'


@pytest.mark.parametrize("text, field", [
    ('[rack]\nname = "x"\n' + _SLOTS4 + "[extra]\nx = 1\n", r"extra: unknown key; accepted keys at the top level"),
    ('[rack]\nowner = "me"\n' + _SLOTS4, r"rack\.owner: unknown key; accepted keys in \[rack\]"),
    (_SLOTS4 + 'colour = "red"\n', r"slots\[0\]\.colour: unknown key; accepted keys in \[slots\]: kind, count"),
    ('[[slots]]\nkind = "h900"\n', r"slots\[0\]\.kind: unknown chip kind 'h900'; accepted kinds"),
    ('[[slots]]\ncount = 2\n', r"slots\[0\]\.kind: missing"),
    ('[[slots]]\nkind = "h100"\ncount = 0\n', r"slots\[0\]\.count: expected a positive integer"),
    ('[[slots]]\nkind = "h100"\ncount = -2\n', r"slots\[0\]\.count"),
    ('[[slots]]\nkind = "h100"\ncount = 2.5\n', r"slots\[0\]\.count"),
    ('[[slots]]\nkind = "h100"\ncount = "2"\n', r"slots\[0\]\.count"),
    ('[[slots]]\nkind = "h100"\ncapacity = "2 GiBs"\n', r"slots\[0\]\.capacity: unknown size unit.*GiB"),
    ('[[slots]]\nkind = "h100"\ncapacity = "0GB"\n', r"slots\[0\]\.capacity: must be positive"),
    ('[[slots]]\nkind = "h100"\nbacking = "gpu"\n', r"slots\[0\]\.backing: unknown backing 'gpu'; accepted: auto, "
                                                     r"emulated, cuda:N"),
    ('[rack]\nname = "x"\n', r"slots: a rack file needs at least one"),
    (_SLOTS4 + _DOMAIN.replace("nvlink", "nvlonk") + 'slots = "0-3"\n',
     r"domains\[0\]\.fabric: unknown domain fabric 'nvlonk'.*accepted: nvlink-fusion, nvlink"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-2"\n' + _DOMAIN.replace('"a"', '"b"') + 'slots = "2-3"\n',
     r"domains: domain 'b' \(slots 2-3\) overlaps domain 'a'"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-1"\n', r"domains: slots 2-3 are in no domain"),
    (_SLOTS4 + _DOMAIN + 'slots = "1-3"\n', r"domains: slots 0-0 are in no domain"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-4"\n', r"domains\[0\]\.slots: slot 4 is outside"),
    (_SLOTS4 + _DOMAIN + 'slots = [0, 2, 1, 3]\n', r"domains\[0\]\.slots: .* consecutive"),
    (_SLOTS4 + _DOMAIN + 'slots = "three"\n', r"domains\[0\]\.slots: cannot read"),
    (_SLOTS4 + _DOMAIN, r"domains\[0\]\.slots: missing"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-3"\n' + _DOMAIN + 'slots = "0-3"\n', r"domains: domain name 'a' is used twice"),
    ('[[slots]]\nkind = "trn2"\ncount = 16\n[[domains]]\nname = "t"\nfabric = "neuronlink-torus"\nslots = "0-15"\n'
     'shape = [4, 3]\n', r"domains\[0\]\.shape: torus shape \[4, 3\] holds 12 slots"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-3"\nshape = [2, 2]\n', r"domains\[0\]\.shape: only a neuronlink-torus"),
    (_SLOTS4 + _DOMAIN.replace("nvlink", "neuronswitch") + 'slots = "0-3"\n',
     r"domains: domain 'a' is neuronswitch but holds h100 slots; neuronswitch accepts Trainium"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-3"\nlink_bandwidth = "fast"\n', r"domains\[0\]\.link_bandwidth"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-3"\nlatency = "3 parsecs"\n', r"domains\[0\]\.latency: unknown duration unit"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-3"\nin_switch_reduction = "yes"\n', r"domains\[0\]\.in_switch_reduction"),
    (_SLOTS4 + _DOMAIN + 'slots = "0-3"\nspeed = 1\n', r"domains\[0\]\.speed: unknown key"),
    (_SLOTS4 + '[network]\nfabric = "ethernet"\n', r"network\.fabric: unknown network fabric 'ethernet'; "
                                                   r"accepted: efa, infiniband"),
    (_SLOTS4 + '[network]\nspeed = 1\n', r"network\.speed: unknown key; accepted keys in \[network\]"),
    (_SLOTS4 + '[network]\nbandwidth = "-3GB/s"\n', r"network\.bandwidth"),
    ('[rack]\nreplicas = 0\n' + _SLOTS4, r"rack\.replicas: expected a positive integer"),
    (_SLOTS4 + '[[overrides]]\nslots = "9"\ncapacity = "1GB"\n', r"overrides\[0\]\.slots: slot 9 is outside"),
    (_SLOTS4 + '[[overrides]]\ncapacity = "1GB"\n', r"overrides\[0\]\.slots: missing"),
    (_SLOTS4 + '[[overrides]]\nslots = 1\nkind = "b200"\n', r"overrides\[0\]\.kind: unknown key"),
    ('[[slots]\nkind =', r"toml: "),
])
def test_malformed_toml(text, field):
    with pytest.raises(ValueError, match=field):
        devices.loads_rack(text)


def test_overrides_split_groups():
    rack = devices.loads_rack(_SLOTS4 + '[[overrides]]\nslots = "1-2"\ncapacity = "2GiB"\n')
    assert [(g.count, g.capacity) for g in rack.groups] == [(1, None), (2, 2 * GiB), (1, None)]
    assert [s.capacity for s in rack.iter_slots()] == [80 * 10**9, 2 * GiB, 2 * GiB, 80 * 10**9]


# -- dataclasses ----------------------------------------------------------------

@pytest.mark.parametrize("make, field", [
    (lambda: SlotGroup("h900", 1, 0), "kind"),
    (lambda: SlotGroup("h100", 0, 0), "count"),
    (lambda: SlotGroup("h100", True, 0), "count"),
    (lambda: SlotGroup("h100", 1, -1), "first"),
    (lambda: SlotGroup("h100", 1, 0, capacity=0), "capacity"),
    (lambda: SlotGroup("h100", 1, 0, backing="cuda:-1"), "backing"),
    (lambda: DomainSpec("d", "infiniband", 0, 1), "fabric"),
    (lambda: DomainSpec("", "nvlink", 0, 1), "name"),
    (lambda: DomainSpec("d", "nvlink", 0, 1, link_bandwidth=0), "link_bandwidth"),
    (lambda: DomainSpec("d", "nvlink", 0, 1, latency=-1e-6), "latency"),
    (lambda: NetworkSpec("nvlink", 1e9, 1e-6), "fabric"),
    (lambda: NetworkSpec("efa", 0, 1e-6), "bandwidth"),
    (lambda: RackSpec("r", (SlotGroup("h100", 2, 0),), (DomainSpec("d", "nvlink", 0, 2),), None, "test", 2),
     "network"),
    (lambda: RackSpec("r", (SlotGroup("h100", 2, 1),), (DomainSpec("d", "nvlink", 1, 2),), None, "test"),
     r"groups\[0\]\.first"),
    (lambda: RackSpec("r", (SlotGroup("h100", 2, 0),), (), None, "test"), "domains"),
    (lambda: RackSpec("r", (SlotGroup("h100", 2, 0),), (DomainSpec("d", "nvlink", 0, 3),), None, "test"), "domains"),
    (lambda: RackSpec("r", (SlotGroup("h100", 2, 0),), (DomainSpec("d", "nvlink", 0, 2),), None, "test", 0),
     "replicas"),
])
def test_direct_construction_is_validated(make, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        make()


def test_specs_are_frozen_and_hashable():
    rack = parse_rack("h100-node")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rack.replicas = 2  # type: ignore[misc]
    assert hash(rack) == hash(parse_rack("h100-node"))
    assert parse_rack(rack) is rack


def test_pcie_domain_uses_the_pcie_figure():
    rack = devices.loads_rack(_SLOTS4 + '[[domains]]\nname = "bus"\nfabric = "pcie"\nslots = "0-3"\n')
    assert rack.link_bandwidth(rack.domains[0]) == pytest.approx(64e9)
    assert rack.latency(rack.domains[0]) == pytest.approx(1.0e-6)


def test_describe():
    assert parse_rack("fusion-default").describe() == (
        "fusion-default: 8 slots (4 trn4, 4 b200), 1 domain (nvlink-fusion), network efa")
    assert "per replica x2" in parse_rack("h100-node*2").describe()


def test_presets_ship_as_package_data():
    folder = pathlib.Path(devices.__file__).parent / "presets"
    assert sorted(p.stem for p in folder.glob("*.toml")) == sorted(presets())
