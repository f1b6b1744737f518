"""One dtype vocabulary in devices/: torch's own names, checked against torch itself."""

from __future__ import annotations

import pytest

import devices
from devices.chip import PEAK_KEYS
from devices.dtypes import ALIASES, ITEMSIZE

torch = pytest.importorskip("torch", reason="the vocabulary is checked against torch's own dtypes")

# Sub-byte integer and raw-bits dtypes have no kernels to cost; the vocabulary leaves them out on purpose.
_NOT_COSTED = {"int1", "int2", "int3", "int4", "int5", "int6", "int7",
               "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
               "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"}


def _torch_dtypes() -> dict[str, tuple[torch.dtype, list[str]]]:
    found: dict[torch.dtype, list[str]] = {}
    for attr in dir(torch):
        value = getattr(torch, attr)
        if isinstance(value, torch.dtype):
            found.setdefault(value, []).append(attr)
    return {str(d).removeprefix("torch."): (d, names) for d, names in found.items()}


def test_vocabulary_is_torchs_names_and_sizes():
    table = _torch_dtypes()
    assert set(devices.DTYPE_NAMES) == set(table) - _NOT_COSTED
    for name, (dtype, attrs) in table.items():
        if name in _NOT_COSTED:
            with pytest.raises(ValueError, match=f"dtype: unknown dtype"):
                devices.dtype_name(dtype)
            continue
        assert devices.dtype_name(dtype) == name
        assert devices.itemsize(dtype) == ITEMSIZE[name] == dtype.itemsize, name
        for attr in attrs:  # torch.half, torch.cfloat... are the same dtype under another name
            assert devices.dtype_name(attr) == devices.dtype_name(f"torch.{attr}") == name


def test_aliases_are_torchs_own():
    for alias, name in ALIASES.items():
        assert getattr(torch, alias) is getattr(torch, name)


def test_unknown_dtype_names_the_value_and_lists_the_names():
    with pytest.raises(ValueError, match=r"dtype: unknown dtype 'Float'; accepted: float64, float32"):
        devices.dtype_name("Float")  # c10's spelling is not a second vocabulary
    with pytest.raises(ValueError, match="dtype: unknown dtype"):
        devices.chip("h100").peak_for("fp8")


@pytest.mark.parametrize("kind", devices.kinds())
def test_every_chip_answers_every_dtype(kind):
    c = devices.chip(kind)
    for name in devices.DTYPE_NAMES + PEAK_KEYS:
        fig = c.peak_for(name)
        assert fig.unit == "FLOP/s" and fig.value > 0
    # A torch dtype and its name give the same figure, and a family member is its family's figure unchanged.
    assert c.peak_for(torch.bfloat16) is c.peak_for("bfloat16") is c.peak["bfloat16"]
    if "float8" in c.peak:
        assert c.peak_for(torch.float8_e4m3fn) is c.peak["float8"]


def test_cost_model_takes_any_spelling():
    a = devices.estimate("h100", "aten::mm", [(256, 256), (256, 256)], torch.half)
    b = devices.estimate("h100", "aten::mm", [(256, 256), (256, 256)], "float16")
    assert a.dtype == b.dtype == "float16" and a.seconds == b.seconds


def test_dtype_label_names_any_dtype_for_a_message():
    # The vocabulary's name where it has one (aliases resolved), torch's own spelling for the rest: a message about
    # an uncosted dtype prints it instead of failing on it.
    assert devices.dtype_label(torch.half) == devices.dtype_label("torch.float16") == "float16"
    assert devices.dtype_label(torch.bits8) == "bits8" and devices.dtype_label(torch.uint3) == "uint3"
    assert devices.dtype_label("mxfp8_e4m3") == "mxfp8_e4m3"
    with pytest.raises(ValueError, match="dtype: unknown dtype"):
        devices.dtype_name(torch.bits8)
