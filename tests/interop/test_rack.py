"""interop.Rack: construction, activation, refusal while tensors live."""

from __future__ import annotations

import pytest
import torch

import devices
import interop


def test_from_spec_maps_indices_to_slots(use_rack):
    rack = use_rack("trn3:2+h100:2")
    assert [d.kind for d in rack.devices] == ["trn3", "trn3", "h100", "h100"]
    assert torch.hybrid.device_count() == 4
    assert torch.hybrid.get_device_properties(2).total_memory == int(devices.chip("h100").hbm_capacity.value)
    x = torch.randn(8, 512, device="hybrid:2")
    assert x.device == torch.device("hybrid:2")
    del x


def test_context_manager_restores_previous_rack():
    import gc

    gc.collect()
    outer = interop.current_rack()
    with interop.Rack.preset("h100-node") as rack:
        assert interop.current_rack() is rack and torch.hybrid.device_count() == 8
        assert all(d.kind == "h100" for d in rack.devices)
    assert interop.current_rack() is outer


def test_presets_and_set_rack_by_string(use_rack):
    assert "fusion-default" in interop.presets()
    use_rack("gb300-nvl72")
    assert torch.hybrid.device_count() == 72


def test_racks_too_large_to_be_live_point_to_estimates():
    with pytest.raises(ValueError, match="at most 127"):
        interop.Rack.preset("trn3-ultraserver")


def test_backing_resolution_without_cuda():
    rack = interop.Rack.from_spec("trn3:1+h100:1", cuda_count=0)
    assert [d.backing for d in rack.devices] == ["emulated", "emulated"]
    rack = interop.Rack.from_spec("trn3:1+h100:2", cuda_count=1)
    assert [d.backing for d in rack.devices] == ["emulated", "cuda:0", "cuda:0"]
    with pytest.raises(ValueError, match="backing"):
        interop.Rack.from_spec("h100:1", backing="tpu")


def test_malformed_specs_raise_value_error():
    for bad in ("h100:0", "h9000:2", "h100:two", "", "trn3:2+"):
        with pytest.raises(ValueError):
            interop.Rack.from_spec(bad)


def test_backward_on_a_larger_rack_installed_later(use_rack):
    # The autograd engine sizes its device queues once; a rack grown after the
    # first backward must still run backward on its new indices.
    w = torch.ones(3, device="hybrid:1", requires_grad=True)
    (w * 2).sum().backward()
    del w
    use_rack("gb300-nvl72")
    w = torch.ones(3, device="hybrid:70", requires_grad=True)
    (w * 3).sum().backward()
    assert w.grad.cpu().tolist() == [3.0, 3.0, 3.0]
    del w
