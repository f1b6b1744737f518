"""torch.save / torch.load keep the device; map_location works."""

from __future__ import annotations

import io

import torch


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_tensor_round_trip_keeps_slot_and_values():
    x = torch.randn(4, 5).to("hybrid:6")
    y = roundtrip(x)
    assert y.device == torch.device("hybrid:6") and torch.equal(y.cpu(), x.cpu())


def test_shared_storage_stays_shared():
    base = torch.arange(10.0, device="hybrid:1")
    views = roundtrip({"a": base, "b": base[2:5]})
    views["b"].zero_()
    assert views["a"].cpu()[2:5].abs().sum() == 0


def test_state_dict_and_map_location():
    model = torch.nn.Linear(3, 2).to("hybrid:4")
    sd = roundtrip(model.state_dict())
    assert all(t.device == torch.device("hybrid:4") for t in sd.values())
    on_cpu = roundtrip(model.state_dict(), map_location="cpu")
    assert all(t.device.type == "cpu" for t in on_cpu.values())
    moved = roundtrip(model.state_dict(), map_location="hybrid:0")
    assert all(t.device == torch.device("hybrid:0") for t in moved.values())
    for k in sd:
        assert torch.equal(sd[k].cpu(), on_cpu[k]) and torch.equal(moved[k].cpu(), on_cpu[k])
