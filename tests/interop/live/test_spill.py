"""Tensors set aside on disk (interop.live.spill) and a model's storages set aside while a plan trains
(interop.live.plan_run): the values read back are the bytes written."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from interop.live.plan_run import _SetAside
from interop.live.spill import Spill


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "buffered"])
def test_values_come_back_bit_for_bit_in_every_dtype(direct, monkeypatch):
    import interop.live.spill as spill

    monkeypatch.setattr(spill, "_STAGE", 2 * spill._ALIGN)  # the 8400-byte tensor crosses two stagings, padded
    if not direct:
        monkeypatch.setattr(spill._DirectFile, "open", classmethod(lambda cls, directory: None))
    g = torch.Generator().manual_seed(0)
    tensors = {"f32": torch.randn(300, 7, generator=g), "bf16": torch.randn(5, generator=g).bfloat16(),
               "nan": torch.tensor([float("nan"), -0.0, float("inf")]), "i64": torch.arange(-3, 9),
               "bool": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4),
               "strided": torch.randn(6, 8, generator=g).t()}
    with Spill() as kept:
        if direct and not kept.direct:
            pytest.skip("this file system refuses O_DIRECT (the buffered case covers it)")
        assert kept.direct == direct
        kept.put_all("t", tensors)
        for name, t in tensors.items():
            back = kept.get(f"t/{name}")
            assert back.dtype == t.dtype and back.shape == t.shape and back.is_contiguous()
            assert torch.equal(_bits(back), _bits(t)), name
        back = kept.get("t/f32")
        back.zero_()  # a copy: the file keeps the values
        assert torch.equal(kept.get("t/f32"), tensors["f32"])


def _bits(t):
    """``t``'s bytes (NaNs and signed zeros compared as written)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_a_tensor_under_two_names_is_written_once_and_bad_names_are_refused():
    w = torch.randn(100, 10)
    with Spill() as kept:
        kept.put_all("p", {"embed.weight": w, "head.weight": w, "bias": torch.zeros(10)})
        assert kept.nbytes == 4000 + 40
        assert torch.equal(kept.get("p/head.weight"), w) and "p/embed.weight" in kept
        with pytest.raises(KeyError, match="nothing was written under 'p/other'"):
            kept.get("p/other")
        with pytest.raises(TypeError, match="'x' must be a tensor"):
            kept.put("x", [1.0])


def test_a_models_storages_are_emptied_within_and_refilled_after():
    model = nn.Sequential(nn.Linear(64, 32), nn.LayerNorm(32), nn.Linear(32, 64))
    model[2].weight = nn.Parameter(model[0].weight.detach().t())  # a view of another parameter's bytes
    model.register_buffer("steps", torch.tensor(7))
    before = {n: t.clone() for n, t in model.state_dict().items()}
    alias = model[0].weight.detach()  # another tensor over the same bytes (as a cut block's)
    with Spill() as kept:
        with _SetAside(model, kept) as aside:
            assert all(t.untyped_storage().nbytes() == 0 for t in model.state_dict().values())
            assert alias.untyped_storage().nbytes() == 0
            # Read back one tensor at a time, a view (the transposed tie) and a buffer included.
            assert all(torch.equal(aside.value(t), before[n]) for n, t in model.state_dict().items())
            assert aside.value(model[2].weight).stride() == model[2].weight.stride()
            aside.forget()
        assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())
        assert torch.equal(alias, before["0.weight"])
        assert model[2].weight.data_ptr() == model[0].weight.data_ptr()  # still one set of bytes
        with pytest.raises(RuntimeError, match="inside"):
            with _SetAside(model, kept):
                raise RuntimeError("inside")
        assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())  # refilled on an error too


def test_a_file_system_that_refuses_direct_transfers_gets_a_buffered_file(monkeypatch):
    """Some file systems open a file with O_DIRECT and refuse its transfers (EINVAL): the probe at opening
    falls back to an ordinary file, and values still come back as written."""
    import errno
    import os

    import interop.live.spill as spill

    def refuse(fd, data, offset):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(spill.os, "pwrite", refuse)
    with Spill() as kept:
        assert not kept.direct
        monkeypatch.setattr(spill.os, "pwrite", os.pwrite)
        w = torch.randn(1000)
        kept.put("w", w)
        assert torch.equal(kept.get("w"), w)
