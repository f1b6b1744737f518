"""A slot's numerics mode: exact by default (nothing installed), device mode rounding like the kind
(stochastic rounding of BF16 results on Trainium when enabled), set per rack file, per slot or with
interop.set_numerics; visible in the report and the trace; bad settings refused by name."""

from __future__ import annotations

import gc
import json

import pytest
import torch

import devices
import interop
from interop.numerics import counters, numerics, set_numerics
from interop.numerics.slots.device_ops import installed


@pytest.fixture
def trn_b200(use_rack):
    rack = use_rack("trn3:1+b200:1")
    yield rack
    gc.collect()


def _neighbours(wide: torch.Tensor):
    """bf16 values just below and above each float32 value (rounding toward -inf / +inf)."""
    down = wide.bfloat16().float()
    up = torch.where(down < wide, torch.nextafter(down.bfloat16(), torch.tensor(float("inf"), dtype=torch.bfloat16)).float(), down)
    down = torch.where(down > wide, torch.nextafter(down.bfloat16(), torch.tensor(-float("inf"), dtype=torch.bfloat16)).float(), down)
    return down, up


def test_exact_is_the_default_and_installs_nothing(trn_b200):
    assert [s.mode for s in numerics()] == ["exact", "exact"] and not installed()
    assert interop.report().slot(0).numerics == "exact"


def test_device_mode_rounds_trainium_bf16_results_stochastically(trn_b200):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 64, generator=g).bfloat16(), torch.randn(64, 64, generator=g).bfloat16()
    wide = x.float() @ w.float()
    rne = x @ w
    with set_numerics("device", stochastic_rounding=True) as settings:
        assert installed() and "stochastic rounding of bf16" in settings.slots[0].label
        trn = (x.to("hybrid:0") @ w.to("hybrid:0")).cpu()
        gpu = (x.to("hybrid:1") @ w.to("hybrid:1")).cpu()
        again = None
    assert not installed()
    assert torch.equal(gpu, rne)  # B200 rounds op results to nearest, as the CPU does
    down, up = _neighbours(wide)
    assert bool(((trn.float() == down) | (trn.float() == up)).all())  # only the two neighbours
    assert (trn != rne).float().mean() > 0.1  # and not always the nearer one
    # unbiased: the mean error is within 5 standard errors of zero (per element |error| <= one bf16 gap)
    gap = (up - down).double()
    assert abs(float((trn.double() - wide.double()).mean())) <= 5 * float(gap.mean()) / 64
    with set_numerics("device", stochastic_rounding=True, seed=0):
        again = (x.to("hybrid:0") @ w.to("hybrid:0")).cpu()
    with set_numerics("device", stochastic_rounding=True, seed=1):
        other = (x.to("hybrid:0") @ w.to("hybrid:0")).cpu()
    assert torch.equal(again, trn) and not torch.equal(other, trn)  # reproducible for a seed


def test_small_updates_survive_stochastic_rounding_in_place(trn_b200):
    def train(mode):
        with set_numerics(mode, stochastic_rounding=True):
            p = torch.ones(2000, dtype=torch.bfloat16, device="hybrid:0")
            step = torch.full((2000,), 1e-3, dtype=torch.bfloat16, device="hybrid:0")
            for _ in range(100):
                p.add_(step)
            return p.float().mean().item()
    assert train("exact") == 1.0  # 1 + 1e-3 rounds back to 1 in bf16 every time
    assert 1.09 < train("device") < 1.11  # stochastic rounding keeps the expected 1.1


def test_backward_and_casts_are_rounded_too(trn_b200):
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32).bfloat16().to("hybrid:0")
    x = torch.randn(16, 32, dtype=torch.bfloat16, device="hybrid:0")
    with set_numerics("device", slots=0, stochastic_rounding=True):
        before = counters(0).rounded_ops
        model(x).float().sum().backward()
        assert counters(0).rounded_ops - before >= 3  # forward addmm, the backward mm(s)
        source = torch.randn(1000) * 1e-2
        cast = source.to("hybrid:0").to(torch.bfloat16).cpu().float()
    down, up = _neighbours(source)
    assert bool(((cast == down) | (cast == up)).all()) and not torch.equal(cast, source.bfloat16().float())
    del model, x


def test_rack_file_sets_modes_per_slot(use_rack, tmp_path):
    path = tmp_path / "rack.toml"
    path.write_text('[rack]\nnumerics = "device"\nstochastic_rounding = true\nstochastic_rounding_seed = 7\n'
                    '[[slots]]\nkind = "trn2"\ncount = 2\n[[slots]]\nkind = "h100"\n'
                    '[[overrides]]\nslots = "1"\nnumerics = "exact"\n')
    spec = devices.load_rack(path)
    assert spec.numerics.mode_of(0) == "device" and spec.numerics.mode_of(1) == "exact" and spec.numerics.seed == 7
    from devices.rack.toml_file import dumps, loads

    assert loads(dumps(spec)).numerics == spec.numerics  # written back and read again
    rack = use_rack(interop.Rack.load(path))
    assert [s.mode for s in numerics()] == ["device", "exact", "device"] and installed()
    assert numerics(0).stochastic_dtypes and not numerics(2).stochastic_dtypes  # H100: nearest only
    report = interop.report()
    assert report.slot(1).numerics == "exact" and report.slot(0).numerics.startswith("device: stochastic")
    assert "numerics" in report.table()
    trace = json.load(open(interop.export_trace(tmp_path / "trace.json")))
    names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert any("hybrid:0" in n and "[numerics device" in n for n in names)
    assert trace["otherData"]["numerics"]["hybrid:1"] == "exact"
    use_rack("trn3:1")
    assert not installed()  # the new rack has no device-mode slot
    del rack


def test_strict_refuses_what_the_kind_does_not_compute(use_rack):
    use_rack("trn2:1+b200:1")
    x = torch.ones(4, dtype=torch.float64, device="hybrid:0")
    with set_numerics("device", strict=True):
        with pytest.raises(ValueError, match=r"trn2 \(hybrid:0, device mode, strict\) does not compute aten::add"
                                             r".* in float64: .*Supported in elementwise on trn2: .*bfloat16"):
            x + x
        y = torch.ones(4, dtype=torch.float64, device="hybrid:1")
        assert torch.equal((y + y).cpu(), torch.full((4,), 2.0, dtype=torch.float64))  # B200 has FP64
    assert torch.equal((x + x).cpu(), torch.full((4,), 2.0, dtype=torch.float64))  # exact mode: the CPU's result
    with pytest.raises(ValueError, match=r"stochastic_rounding: b200 \(hybrid:1\) does not round op results "
                                         r"stochastically .*kinds that do: .*trn2"):
        set_numerics("device", slots=1, stochastic_rounding=True, strict=True)
    del x, y


def test_bad_settings_are_refused_by_name(trn_b200, tmp_path):
    with pytest.raises(ValueError, match=r"mode: unknown numerics mode 'fast'; accepted: exact, device"):
        set_numerics("fast")
    with pytest.raises(ValueError, match=r"slots: 5 is not a slot of the current rack \(0-1\)"):
        set_numerics("device", slots=5)
    assert [s.mode for s in numerics()] == ["exact", "exact"] and not installed()  # nothing half-applied
    cases = {'[rack]\nnumerics = "fast"\n': r"rack.numerics: unknown numerics mode 'fast'; accepted: exact, device",
             '[rack]\nstochastic_rounding = "yes"\n': r"rack.stochastic_rounding: expected true or false",
             '[rack]\nnumerics_mode = "device"\n': r"rack.numerics_mode: unknown key; accepted keys in \[rack\]:.* numerics",
             '[[overrides]]\nslots = "0"\nnumerics = 1\n': r"overrides\[0\].numerics: unknown numerics mode 1"}
    from devices.rack.toml_file import loads

    for head, message in cases.items():
        with pytest.raises(ValueError, match=message):
            loads(head + '[[slots]]\nkind = "trn3"\n')


def test_device_mode_quantizes_with_the_kinds_scale_rule(trn_b200):
    from interop.numerics import quantize

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    want = {0: quantize(x, "mxfp8_e4m3", scale_rule="trn3"), 1: quantize(x, "mxfp8_e4m3", scale_rule="rceil")}
    exact = quantize(x.to("hybrid:0"), "mxfp8_e4m3")
    assert exact.scale_rule == "ocp"  # exact mode: the format's default
    with set_numerics("device", strict=True):
        for slot, q in want.items():
            got = quantize(x.to(f"hybrid:{slot}"), "mxfp8_e4m3")
            assert got.scale_rule == q.scale_rule and torch.equal(got.scales.cpu().view(torch.uint8),
                                                                  q.scales.view(torch.uint8))
        with pytest.raises(ValueError, match=r"fmt: trn3 \(hybrid:0, device mode, strict\) does not compute in nvfp4"):
            quantize(x.to("hybrid:0"), "nvfp4")
        assert quantize(x.to("hybrid:0"), "mxfp8_e4m3", scale_rule="ocp").scale_rule == "ocp"  # explicit wins


@pytest.mark.parametrize("seed", [10**14, 2**64 - 1])
def test_a_rack_files_large_stochastic_rounding_seed_runs(use_rack, tmp_path, seed):
    # A seed of 10**14 loaded, then failed at the first op: its per-slot seed overflowed 64 bits.
    path = tmp_path / "seeded.toml"
    path.write_text(f'[rack]\nnumerics = "device"\nstochastic_rounding = true\nstochastic_rounding_seed = {seed}\n'
                    '[[slots]]\nkind = "trn3"\ncount = 1\n')
    use_rack(interop.Rack.load(path))
    x = torch.randn(32, 32, dtype=torch.bfloat16)
    out = (x.to("hybrid:0") @ x.to("hybrid:0")).cpu()
    down, up = _neighbours(x.float() @ x.float())
    assert bool(((out.float() == down) | (out.float() == up)).all())


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_set_numerics_refuses_a_seed_a_generator_cannot_take(trn_b200, seed):
    with pytest.raises(ValueError, match=r"seed: expected an integer from 0 to 2\*\*64 - 1"):
        set_numerics("device", seed=seed)
