"""The chip catalogue against the figures of specs.md (written out here as an independent reference)."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import subprocess
import sys

import pytest

import devices
from devices import STATUSES, Figure, catalogue, catalogue_rows, chip, kinds
from devices.catalogue_table import CATALOGUE_COLUMNS, PRESET_COLUMNS, presets_rows
from devices.fabrics import fabric, network_bandwidth

T = 1e12
GiB = 2**30

# specs.md, "Chips (dense TFLOP/s)": bf16, fp8, fp4, HBM bytes, HBM B/s, scale-up bidirectional B/s per chip, power W.
# Scale-up figures are the vendors' per-chip totals; the catalogue stores half (per direction). Trn1's NeuronLink-v2
# is the Neuron page's "GiB/sec/device" column (reference/trainium.md section 1); Trn2's ~500 W is a third-party
# estimate (section 5).
SPECS = {
    "trn1": (190 * T, 190 * T, None, 32 * GiB, 820 * GiB, 384 * GiB, None),
    "trn2": (667 * T, 1299 * T, None, 96 * GiB, 2.9e12, 1.28e12, 500.0),
    "trn3": (671 * T, 2517 * T, 2517 * T, 144 * GiB, 4.9e12, 2.56e12, 1000.0),
    "h100": (989 * T, 1979 * T, None, 80e9, 3.35e12, 900e9, 700.0),
    "h200": (989 * T, 1979 * T, None, 141e9, 4.8e12, 900e9, 700.0),
    "b200": (2250 * T, 4500 * T, 9000 * T, 180e9, 7.7e12, 1.8e12, 1000.0),
    "gb300": (2500 * T, 5000 * T, 15000 * T, 279e9, 8e12, 1.8e12, 1400.0),
}

# NVIDIA's own totals, with the arithmetic spelled out independently of the chip files: the A100 datasheet's
# sparse BF16 624 TFLOPS / 2, 80 GB, 2,039 GB/s, NVLink 3 600 GB/s bidirectional, 400 W; the GB200 NVL72 page's
# per-rack sparse totals (360 PF BF16, 180 PF TF32, 720 PF FP8, 1,440 PF FP4) / 72 GPUs / 2, 13.4 TB / 72,
# 576 TB/s / 72, 130 TB/s NVLink / 72.  A100 has no FP8 and no FP4.
NEW_CHIPS = {
    # kind: (bf16, tf32, fp8, fp4, HBM bytes, HBM B/s, scale-up bidirectional B/s, power W)
    "a100": (624 * T / 2, 312 * T / 2, None, None, 80e9, 2039e9, 600e9, 400.0),
    "gb200": (360e15 / 72 / 2, 180e15 / 72 / 2, 720e15 / 72 / 2, 1440e15 / 72 / 2, 13.4e12 / 72, 576e12 / 72,
              130e12 / 72, 1200.0),
}

# Dense FP32 found with the search tool (see the chip files for the citations).
FP32 = {"trn1": 47.5 * T, "trn2": 181 * T, "trn3": 183 * T, "h100": 67 * T, "h200": 67 * T,
        "b200": 75 * T, "gb300": 80 * T}


def test_every_specs_chip_is_catalogued():
    assert {"trn2", "trn3", "trn4", "h100", "h200", "b200", "gb300", "a100", "gb200"} <= set(kinds())
    assert kinds() == sorted(catalogue())


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_figures_match_specs(kind):
    bf16, fp8, fp4, capacity, bandwidth, link_bidir, power = SPECS[kind]
    c = chip(kind)
    assert c.peak["bfloat16"].value == pytest.approx(bf16)
    assert c.peak["float8"].value == pytest.approx(fp8)
    if fp4 is None:
        assert "float4" not in c.peak
    else:
        assert c.peak["float4"].value == pytest.approx(fp4)
    assert c.hbm_capacity.value == capacity
    assert c.hbm_bandwidth.value == pytest.approx(bandwidth)
    assert c.scale_up_bandwidth.value == pytest.approx(link_bidir / 2)
    assert "direction" in c.scale_up_bandwidth.note
    if power is None:
        assert c.power is None
    else:
        assert c.power.value == power and c.power.unit == "W"


def test_dense_not_sparse():
    # The classic mistake: H100's 1,979 BF16 is the sparse figure.
    assert chip("h100").peak["bfloat16"].value == 989e12
    for kind in ("h100", "h200", "b200", "gb300"):
        c = chip(kind)
        assert c.peak["float8"].value == pytest.approx(2 * c.peak["bfloat16"].value, rel=1e-3)
        assert c.peak["float16"].value == c.peak["bfloat16"].value


@pytest.mark.parametrize("kind", sorted(FP32))
def test_fp32_figures(kind):
    fig = chip(kind).peak["float32"]
    assert fig.value == pytest.approx(FP32[kind])
    # Neuron docs are AWS's own pages; the NVIDIA FP32 figures were read through third parties.
    assert fig.status == ("published" if kind.startswith("trn") else "secondary")


def test_units_are_si():
    assert chip("h100").hbm_capacity.value == 80_000_000_000
    assert chip("trn2").hbm_capacity.value == 103_079_215_104
    assert chip("h100").scale_up_bandwidth.value == 450e9
    assert chip("b200").scale_up_bandwidth.value == 900e9


def test_trainium4_is_projected_from_trainium3_multipliers():
    t3, t4 = chip("trn3"), chip("trn4")
    assert t4.peak["float8"].value == pytest.approx(3 * 2517e12)
    assert t4.peak["float4"].value == pytest.approx(6 * 2517e12)
    assert t4.hbm_bandwidth.value == pytest.approx(4 * 4.9e12)
    assert t4.hbm_capacity.value == 2 * 144 * GiB
    assert "not confirmed" in t4.hbm_capacity.note.lower()
    assert t4.projected and not t3.projected
    for name, fig in t4.figures().items():
        if fig is not None:
            assert fig.status == "projected", name
            assert fig.note, name
    assert "3x" in t4.peak["float8"].note and "6x" in t4.peak["float4"].note
    assert "4x" in t4.hbm_bandwidth.note
    assert t4.scale_up_fabric == "nvlink-fusion"
    # NVLink 6 class: 3.6 TB/s per GPU bidirectional (specs.md, secondary) -> 1.8 TB/s per direction.
    assert t4.scale_up_bandwidth.value == pytest.approx(1.8e12)


@pytest.mark.parametrize("kind", sorted(NEW_CHIPS))
def test_new_chips_are_dense_per_gpu_figures(kind):
    bf16, tf32, fp8, fp4, capacity, bandwidth, link_bidir, power = NEW_CHIPS[kind]
    c = chip(kind)
    assert c.peak["bfloat16"].value == pytest.approx(bf16)
    assert c.peak["float16"].value == pytest.approx(bf16)
    assert c.peak["tf32"].value == pytest.approx(tf32)
    for key, want in (("float8", fp8), ("float4", fp4)):
        if want is None:
            assert key not in c.peak
        else:
            assert c.peak[key].value == pytest.approx(want)
    assert c.hbm_capacity.value == pytest.approx(capacity, rel=0.01)
    assert c.hbm_bandwidth.value == pytest.approx(bandwidth)
    assert c.scale_up_bandwidth.value == pytest.approx(link_bidir / 2, rel=0.01)
    assert c.power.value == power
    for name, fig in c.figures().items():
        if name.startswith("peak.") and name not in ("peak.float32", "peak.float64"):
            assert "dense" in fig.note, (kind, name)  # the sparse trap: every tensor rate says it is dense
        if fig is not None:
            assert "read 2026-" in fig.source and "https://" in fig.source, (kind, name)


def test_a100_without_fp8_costs_fp8_and_fp4_at_its_bf16_rate():
    a100 = chip("a100")
    for dtype in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"):
        fig = a100.peak_for(dtype)
        assert fig.value == 312 * T and "fallback rule" in fig.note
    assert a100.peak_for("int8").value == 624 * T
    assert a100.peak_for("tf32").value == 156 * T
    assert chip("h100").peak_for("tf32").value == chip("h100").peak["float32"].value  # no TF32 figure: FP32 bound


def test_h200_derives_its_compute_and_link_from_h100():
    h100, h200 = chip("h100"), chip("h200")
    derived = [f"peak.{k}" for k in h100.peak] + ["scale_up_bandwidth"]
    assert set(h200.peak) == set(h100.peak)
    for name in derived:
        mine, base = h200.figures()[name], h100.figures()[name]
        assert mine.value == base.value and mine.status == base.status, name
        assert "H200" in mine.source and f"base figure: {base.source}" in mine.source, name
    # Its own figures: the memory that makes it an H200, and its power from NVIDIA's MLPerf system description.
    assert "base figure" not in h200.hbm_capacity.source and h200.hbm_capacity.value == 141e9
    assert h200.power.value == h100.power.value and "H200 TGP 700W" in h200.power.source


def test_only_trainium4_is_projected():
    assert [k for k in kinds() if chip(k).projected] == ["trn4"]


# reference/trainium.md section 4: instance rate per hour / chips, basis, status (P read through a mirror of AWS's
# page is secondary; E is estimated).
PRICES = {
    ("trn1", "on-demand"): (21.50 / 16, "published"),
    ("trn1", "reserved-effective"): (8.197 / 16, "published"),
    ("trn1", "capacity-block"): (15.49 / 16, "secondary"),
    ("h100", "on-demand"): (55.04 / 8, "secondary"),
    ("h100", "capacity-block"): (39.33 / 8, "secondary"),
    ("h200", "on-demand"): (63.296 / 8, "secondary"),
    ("h200", "capacity-block"): (43.26 / 8, "secondary"),
    ("b200", "on-demand"): (113.93 / 8, "secondary"),
    ("gb200", "capacity-block"): (1.65e6 / (90 * 24) / 72, "estimated"),
    ("a100", "on-demand"): (21.958 / 8, "secondary"),
    ("a100", "capacity-block"): (14.75 / 8, "secondary"),
}


def test_prices_are_the_public_ones_and_nothing_else():
    for kind in kinds():
        for basis in devices.PRICE_BASES:
            fig = chip(kind).prices.get(basis)
            if (kind, basis) not in PRICES:
                assert fig is None, (kind, basis)
                assert chip(kind).missing(f"price.{basis}").strip(), (kind, basis)
                continue
            value, status = PRICES[(kind, basis)]
            assert fig.value == pytest.approx(value) and fig.status == status and fig.unit == "USD/h", (kind, basis)
    # The H100's price is the one after AWS's June 2025 cut; the earlier $98.32 is kept in the note.
    assert "98.32" in chip("h100").prices["on-demand"].note and "June 2025" in chip("h100").prices["on-demand"].note
    assert chip("h100").price_per_hour is chip("h100").prices["on-demand"]
    for kind in ("trn2", "trn3", "trn4", "gb300"):
        assert not chip(kind).prices and "price" in chip(kind).unset
    # A basis without a source says so in a sentence naming it.
    assert chip("gb200").missing("price.on-demand").startswith("no public source giving an on-demand price for gb200")
    assert chip("h100").missing("price.reserved-effective").startswith("no public source giving a reserved-effective")


def test_power_of_every_kind_or_why_not():
    # reference/trainium.md section 5: the estimates say so in their status.
    assert chip("trn2").power.status == "estimated" and chip("trn3").power.status == "estimated"
    assert chip("h200").power.status == chip("gb200").power.status == chip("gb300").power.status == "published"
    assert chip("a100").power.status == "secondary"
    for kind in kinds():
        c = chip(kind)
        assert c.power is not None or "power" in c.unset, kind
    assert "not shipping" in chip("trn4").missing("power")
    with pytest.raises(ValueError, match="a reason is for a missing one"):
        dataclasses.replace(chip("h100"), unset={"power": "none found"})
    with pytest.raises(ValueError, match="unknown basis 'spot'"):
        dataclasses.replace(chip("h100"), prices={"spot": chip("h100").prices["on-demand"]})
    with pytest.raises(ValueError, match="unknown key 'pwr'"):
        dataclasses.replace(chip("trn1"), unset={"pwr": "x"})


def test_every_figure_is_sourced():
    units = {"hbm_capacity": "B", "hbm_bandwidth": "B/s", "scale_up_bandwidth": "B/s", "power": "W",
             "exp_rate": "exp/s"}
    for kind in kinds():
        for name, fig in chip(kind).figures().items():
            if fig is None:
                continue
            assert fig.status in STATUSES
            assert fig.source.strip()
            want = "USD/h" if name.startswith("price.") else units.get(name, "FLOP/s")
            assert fig.unit == want, (kind, name)


def test_gb300_int8_and_fp64_are_not_overstated():
    gb300 = chip("gb300")
    assert gb300.peak_for("int8").value == pytest.approx(165e12)
    assert gb300.peak_for("float64").value == pytest.approx(1.25e12)


class _FakeDtype:
    def __str__(self):
        return "torch.float8_e4m3fn"


def test_peak_for_rules():
    h100, trn2 = chip("h100"), chip("trn2")
    assert h100.peak_for("bfloat16") is h100.peak["bfloat16"]
    assert h100.peak_for("torch.float16").value == 989e12
    assert h100.peak_for("half").value == 989e12
    assert h100.peak_for(_FakeDtype()).value == 1979e12
    fp4 = h100.peak_for("float4_e2m1fn_x2")
    assert fp4.value == 1979e12 and "fallback" in fp4.note
    assert h100.peak_for("int8").value == 1979e12
    assert h100.peak_for("float64").value == 67e12
    fp64 = trn2.peak_for("float64")
    assert fp64.value == 181e12 and "fallback" in fp64.note
    assert trn2.peak_for("int32").value == 181e12
    assert chip("trn1").peak_for("int8").value == 380e12
    with pytest.raises(ValueError, match="dtype.*'quaternion'.*bfloat16"):
        h100.peak_for("quaternion")


def test_chip_lookup_errors_name_the_kind_and_list_accepted():
    assert chip(" H100 ") is chip("h100")
    with pytest.raises(ValueError, match=r"kind: unknown chip kind 'h900'.*accepted kinds: a100, b200, gb200, gb300, h100"):
        chip("h900")


def test_catalogue_is_a_copy():
    table = catalogue()
    table.pop("h100")
    assert "h100" in catalogue()
    with pytest.raises(TypeError):
        chip("h100").peak["bfloat16"] = Figure(1.0, "FLOP/s", "x", "published")  # type: ignore[index]


def test_one_chip_per_file_named_by_kind():
    folder = pathlib.Path(devices.__file__).parent / "chips"
    files = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert files == kinds()
    for kind in files:
        module = __import__(f"devices.chips.{kind}", fromlist=["CHIP"])
        assert module.CHIP.kind == kind


@pytest.mark.parametrize("bad, field", [
    (dict(value=1.0, unit="FLOP/s", source="x", status="rumoured"), "status"),
    (dict(value=1.0, unit="flops", source="x", status="published"), "unit"),
    (dict(value=-1.0, unit="W", source="x", status="published"), "value"),
    (dict(value=float("nan"), unit="W", source="x", status="published"), "value"),
    (dict(value=1.0, unit="W", source=" ", status="published"), "source"),
])
def test_figure_validation(bad, field):
    with pytest.raises(ValueError, match=f"Figure.{field}"):
        Figure(**bad)


def test_figures_and_chips_are_frozen():
    fig = chip("h100").peak["bfloat16"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fig.value = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        chip("h100").kind = "x"  # type: ignore[misc]
    assert hash(chip("h100")) == hash(chip("h100"))


def test_catalogue_rows():
    rows = catalogue_rows()
    assert all(set(r) == set(CATALOGUE_COLUMNS) for r in rows)
    by_key = {(r["kind"], r["figure"]): r for r in rows}
    bf16 = by_key[("h100", "peak.bfloat16")]
    assert bf16["value"] == 989e12 and bf16["unit"] == "FLOP/s"
    assert bf16["display"] == "989 TFLOP/s" and bf16["status"] == "published" and bf16["source"]
    assert by_key[("trn2", "hbm_capacity")]["display"] == "96 GiB"
    unset = by_key[("trn2", "price.on-demand")]
    assert unset["value"] is None and unset["status"] == "unset" and "third-party figures conflict" in unset["source"]
    assert by_key[("trn1", "power")]["status"] == "unset" and "no Trainium (Trn1) board power" in \
        by_key[("trn1", "power")]["source"]
    assert {r["kind"] for r in rows} == set(kinds())
    assert {r["kind"] for r in catalogue_rows(["h100"])} == {"h100"}
    with pytest.raises(ValueError, match="kind"):
        catalogue_rows(["h900"])


def test_presets_rows():
    rows = presets_rows()
    assert [r["name"] for r in rows] == list(devices.presets())
    assert all(set(r) == set(PRESET_COLUMNS) for r in rows)
    fusion = rows[0]
    assert fusion["name"] == "fusion-default" and fusion["slots"] == "8" and fusion["kinds"] == "4 trn4, 4 b200"
    table = devices.format_table(rows, PRESET_COLUMNS)
    lines = table.splitlines()
    # One row a preset, its long descriptions wrapped onto lines of their own under 120 columns.
    assert lines[0].split()[0] == "name" and all(len(line) <= 120 for line in lines)
    assert [line.split()[0] for line in lines[1:] if line[:1] != " "] == [r["name"] for r in rows]


def test_fabric_defaults_follow_collectives_md():
    assert fabric("nvlink").latency.value == pytest.approx(0.6e-6)
    assert fabric("efa").latency.value == pytest.approx(2.7e-6)
    assert fabric("infiniband").latency.value == pytest.approx(2.7e-6)
    assert fabric("neuronswitch").latency.status == "projected"  # no public NeuronLink latency figure
    assert fabric("pcie").bandwidth.value == pytest.approx(64e9)
    with pytest.raises(ValueError, match="fabric: unknown fabric 'ethernet'.*nvlink"):
        fabric("ethernet")


def test_network_bandwidth_per_chip_from_specs():
    gbps = 1e9 / 8
    assert network_bandwidth("trn1").value == pytest.approx(800 * gbps / 16)
    assert network_bandwidth("trn2").value == pytest.approx(3200 * gbps / 16)
    assert network_bandwidth("trn3").value == pytest.approx(28800 * gbps / 144)
    assert network_bandwidth("trn3").value == pytest.approx(12800 * gbps / 64)  # Gen1 agrees
    assert network_bandwidth("h100").value == pytest.approx(400 * gbps)
    assert network_bandwidth("trn4").status == "projected"


def _public_names(module):
    return [getattr(module, n) for n in module.__all__]


def test_public_api_has_docstrings():
    missing = []
    for obj in _public_names(devices):
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(obj.__name__)
            if inspect.isclass(obj):
                for name, member in vars(obj).items():
                    if name.startswith("_") or not (inspect.isfunction(member) or isinstance(
                            member, (property, classmethod, staticmethod))):
                        continue
                    target = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                    if not (target.__doc__ or "").strip():
                        missing.append(f"{obj.__name__}.{name}")
    assert not missing, missing


def test_import_reads_no_environment_and_no_torch():
    code = ("import os, sys\n"
            "class Spy(dict):\n"
            "    def __getitem__(self, k): raise AssertionError('env read: ' + k)\n"
            "    def get(self, k, d=None): raise AssertionError('env read: ' + k)\n"
            "os.environ = Spy(os.environ)\n"
            "import devices\n"
            "devices.catalogue(); devices.parse_rack('fusion-default'); devices.presets()\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    folder = pathlib.Path(devices.__file__).parent
    for path in sorted(folder.glob("*.py")) + sorted((folder / "chips").glob("*.py")):
        text = path.read_text()
        assert "os.environ" not in text and "getenv(" not in text, path
        assert "import torch" not in text, path
