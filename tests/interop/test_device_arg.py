"""Device arguments (interop.device_arg): one parser for every form torch takes, each API's policy on top."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interop.device_arg import DeviceArg, parse_device


@pytest.mark.parametrize("device,expected", [
    (None, DeviceArg(None, None)),
    (3, DeviceArg(None, 3)),
    (np.int64(2), DeviceArg(None, 2)),
    ("hybrid:2", DeviceArg("hybrid", 2)),
    ("hybrid", DeviceArg("hybrid", None)),
    ("cuda:1", DeviceArg("cuda", 1)),
    ("cpu", DeviceArg("cpu", None)),
    (torch.device("cuda", 0), DeviceArg("cuda", 0)),
    (torch.device("hybrid"), DeviceArg("hybrid", None)),
])
def test_every_form_torch_takes(device, expected):
    # torch.device is the reference reading of strings and devices; an int carries no type (the API decides).
    assert parse_device(device) == expected
    arg = parse_device(device)
    assert arg.current == (device is None) and arg.bare == isinstance(device, (int, np.integer))


@pytest.mark.parametrize("device", [True, 1.0, "nonsense", "cuda:x", object(), [0]])
def test_anything_else_is_refused_naming_the_argument(device):
    with pytest.raises(ValueError, match=r"^where: .*None, an int, a device string .* or a torch.device"):
        parse_device(device, what="where")


def test_the_hybrid_policy_reads_through_it():
    # torch.hybrid's functions: None is the current slot, an int or a hybrid device a slot, anything else refused.
    current = torch.hybrid.current_device()
    assert torch.hybrid.get_device_name(None) == torch.hybrid.get_device_name(current)
    assert torch.hybrid.get_device_name("hybrid") == torch.hybrid.get_device_name(current)
    assert torch.hybrid.get_device_name(torch.device("hybrid", 5)) == torch.hybrid.get_device_name(5)
    with pytest.raises(ValueError, match="expected a hybrid device"):
        torch.hybrid.memory_allocated("cuda:0")
    with pytest.raises(ValueError, match="device: 'nonsense' is not a device"):  # was torch's RuntimeError
        torch.hybrid.memory_allocated("nonsense")
    with pytest.raises(ValueError, match="got True"):
        torch.hybrid.memory_allocated(True)
