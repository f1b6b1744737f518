"""Rack specs at the edges: sizes that must cost nothing per slot, and inputs that must be refused by field.

Each case here was a reliability-probe finding (issue 7): a parse that worked in
proportion to the slot count, an OverflowError, a capacity the allocator
cannot hold, a bare UnicodeDecodeError or RecursionError from a rack file.
"""

from __future__ import annotations

import tracemalloc

import pytest

import devices
from devices import parse_rack

INT64_MAX = 2**63 - 1


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("spec, chunk", [("trn2:100000000", 16), ("trn3:1048608", 144), ("h100:1000000000000", 576),
                                         ("trn1:99999999", 16), ("a100:100000001", 16),
                                         ("trn2:100000003+h100:1000000000+trn3:7777777", None)])
def test_huge_flat_specs_build_nothing_per_slot(spec, chunk):
    parse_rack("trn2:16")  # warm the catalogue and the caches
    small = _peak_bytes(lambda: parse_rack("trn2:48"))
    rack = None

    def build():
        nonlocal rack
        rack = parse_rack(spec)

    big = _peak_bytes(build)
    # Memory independent of the chip count: the same few objects as a 48-chip rack, within a small margin.
    assert big < small + 64 * 1024, (big, small)
    expected = sum(int(term.split(":")[1]) for term in spec.split("+"))
    assert len(rack) == expected
    if chunk is not None:
        # Still one domain per instance / switch, reachable by index without materialising the others.
        assert len(rack.domains) == -(-expected // chunk)
        last = rack.domain_of(len(rack) - 1)
        assert last.stop == len(rack) and last.count == (expected % chunk or chunk)
        assert rack.domains[-1] == last and rack.domains[len(rack.domains) - 1] == last
        assert rack.slot(len(rack) - 1).domain == last.name


def test_huge_flat_spec_matches_the_small_one_domain_by_domain():
    # The compact form must be exactly the layout the flat rules describe.
    rack = parse_rack("trn2:40")
    assert [(d.name, d.first, d.count, d.shape) for d in rack.domains] == [
        ("torus0", 0, 16, (4, 4)), ("torus1", 16, 16, (4, 4)), ("torus2", 32, 8, (8,))]
    big = parse_rack("trn2:160000008")
    assert big.domains[9999999] == devices.DomainSpec("torus9999999", "neuronlink-torus", 159999984, 16, (4, 4),
                                                        link_bandwidth=512e9)
    assert big.domains[10000000].shape == (8,) and big.domains[10000000].name == "torus10000000"
    with pytest.raises(IndexError):
        big.domains[10000001]
    assert big.domain_of(17).name == "torus1" and big.slot(17).domain == "torus1"


@pytest.mark.parametrize("spec, field", [
    ("h100:3*99999999999999999999", "replicas"),
    ("h100:99999999999999999999", "count"),
    ("h100:" + "9" * 5000, "count"),
    ("h100:8*" + "9" * 5000, "replicas"),
    ("h100:4611686018427387904*2", "replicas"),
    ("h100:4611686018427387904+trn2:4611686018427387904", "count"),
])
def test_slot_totals_beyond_int64_are_refused_by_field(spec, field):
    with pytest.raises(ValueError, match=rf"^{field}: .*{INT64_MAX}|^{field}: .*2\^63"):
        parse_rack(spec)


_SLOTS = '[[slots]]\nkind = "h100"\ncount = 2\n'


@pytest.mark.parametrize("text, field", [
    ('[[slots]]\nkind = "h100"\ncapacity = 1e300\n', r"slots\[0\]\.capacity"),
    ('[[slots]]\nkind = "h100"\ncapacity = "16777216TiB"\n', r"slots\[0\]\.capacity"),
    ('[[slots]]\nkind = "h100"\ncapacity = 9223372036854775807\n', None),  # the largest the allocator counts: fine
    (_SLOTS + '[[overrides]]\nslots = 1\ncapacity = "8EiB"\n', r"overrides\[0\]\.capacity"),
    (_SLOTS + '[[overrides]]\nslots = 1\ncapacity = 1e19\n', r"overrides\[0\]\.capacity"),
    ('[[slots]]\nkind = "h100"\ncount = 9223372036854775807\n[[slots]]\nkind = "h100"\n', r"slots\[1\]\.count"),
    ('[rack]\nreplicas = 9223372036854775807\n' + _SLOTS, r"rack\.replicas"),
])
def test_capacities_and_counts_the_allocator_cannot_hold_are_refused_at_parse_time(text, field):
    if field is None:
        rack = devices.loads_rack(text)
        assert rack.slot(0).capacity == INT64_MAX
        return
    with pytest.raises(ValueError, match=rf"^{field}: .*(2\^63|{INT64_MAX}|unknown size unit)"):
        devices.loads_rack(text)


def test_slot_group_refuses_a_capacity_beyond_int64():
    with pytest.raises(ValueError, match=r"^capacity: .*2\^63"):
        devices.SlotGroup("h100", 1, 0, capacity=2**63)


def test_rack_file_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('# caf\xe9\n[[slots]]\nkind = "h100"\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"^file: rack file .*latin1\.toml.* is not UTF-8 \(byte 0xe9 at offset 5\)"):
        parse_rack(path)
    with pytest.raises(ValueError, match=r"^file: .*latin1\.toml"):
        devices.load_rack(str(path))


@pytest.mark.parametrize("nested", ["x = " + "[" * 100_000 + "]" * 100_000,
                                    "x = " + "{a = " * 50_000 + "1" + "}" * 50_000])
def test_deeply_nested_rack_file_is_a_value_error_naming_it(tmp_path, nested):
    path = tmp_path / "deep.toml"
    path.write_text(nested + '\n[[slots]]\nkind = "h100"\n')
    with pytest.raises(ValueError, match=r"^toml: file deep\.toml: "):
        parse_rack(path)
    with pytest.raises(ValueError, match=r"^toml: toml text: "):
        devices.loads_rack(nested)


def test_live_rack_refuses_a_huge_spec_before_building_anything():
    interop = pytest.importorskip("interop", reason="the live Rack needs the compiled interop._C")
    with pytest.raises(ValueError, match="a live rack may have at most"):
        interop.Rack.from_spec("h100:1000000000000")


def test_repeated_domains_in_a_rack_file_and_a_compact_round_trip():
    text = ('[[slots]]\nkind = "trn2"\ncount = 64\n'
            '[[domains]]\nname = "torus0"\nfabric = "neuronlink-torus"\nslots = "0-15"\nshape = [4, 4]\nrepeat = 4\n')
    rack = devices.loads_rack(text)
    assert [(d.name, d.first, d.shape) for d in rack.domains] == [
        ("torus0", 0, (4, 4)), ("torus1", 16, (4, 4)), ("torus2", 32, (4, 4)), ("torus3", 48, (4, 4))]
    assert rack.domains == devices.DomainTable(
        [devices.DomainSpec(f"torus{i}", "neuronlink-torus", 16 * i, 16, (4, 4)) for i in range(4)])
    big = parse_rack("trn2:100000003")
    dumped = devices.dumps_rack(big)
    assert dumped.count("[[domains]]") == 2 and "repeat = 6250000" in dumped and len(dumped) < 2000
    again = devices.loads_rack(dumped)
    assert (again.groups, again.domains, again.network) == (big.groups, big.domains, big.network)


@pytest.mark.parametrize("domains, field", [
    ('name = "bus"\nfabric = "nvlink"\nslots = "0-1"\nrepeat = 2\n', r"domains\[0\]\.repeat: a repeated domain's name"),
    ('name = "nv0"\nfabric = "nvlink"\nslots = "0-1"\nrepeat = 3\n', r"domains\[0\]\.repeat: 3 copies of slots 0-1 "
                                                                     r"reach slot 5, outside the rack's 4 slots"),
    ('name = "nv0"\nfabric = "nvlink"\nslots = "0-1"\nrepeat = 0\n', r"domains\[0\]\.repeat: expected a positive"),
])
def test_bad_repeat_is_refused_by_field(domains, field):
    with pytest.raises(ValueError, match=field):
        devices.loads_rack('[[slots]]\nkind = "h100"\ncount = 4\n[[domains]]\n' + domains)


def test_repeated_names_may_not_collide():
    entries = [devices.DomainRun(devices.DomainSpec("nv0", "nvlink", 0, 2), 2),
               devices.DomainRun(devices.DomainSpec("nv1", "nvlink", 4, 4))]
    with pytest.raises(ValueError, match="domains: domain name 'nv1' is used twice"):
        devices.RackSpec("r", (devices.SlotGroup("h100", 8, 0),), entries, devices.NetworkSpec("infiniband", 1e9, 0),
                         "test")
