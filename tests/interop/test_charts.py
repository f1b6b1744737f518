"""Readable Gantt charts (interop.charts): op classes, casts as on-chip work, dense rows binned, the
legend off the data."""

from __future__ import annotations

import torch

import interop
from interop.charts import record_class, timeline_figure, timeline_rows


def test_a_cast_on_its_slot_is_memory_work_and_a_copy_across_slots_is_a_transfer(use_rack):
    rack = use_rack("trn3:1+h100:1", backing="emulated")
    interop.reset_timeline()
    x = torch.randn(64, 64, device="hybrid:1")
    y = x.to(torch.bfloat16)  # an autocast-style cast: stays on hybrid:1
    z = (x @ x).to("hybrid:0")  # crosses the fabric
    del y, z
    records = interop.timeline()
    kinds = [d.kind for d in rack.devices]
    classes = {(r.kind, r.op, r.peer): record_class(r, kinds) for r in records}
    assert classes[("op", "aten::mm", None)] == "matmul / conv"
    assert any(c == "transfer" for (kind, _, peer), c in classes.items() if kind == "copy" and peer == 0)
    casts = [c for r in records if r.slot == 1 and r.kind != "collective"
             for c in [record_class(r, kinds)] if r.op in ("aten::_to_copy", "copy") and r.peer in (None, 1)]
    assert casts and set(casts) == {"memory (copy, cast, index)"}
    rows = timeline_rows(records, rack)
    assert any(name.startswith("link hybrid:1->hybrid:0") for name in rows)
    assert not any("hybrid:1->hybrid:1" in name for name in rows)  # the cast is not a link


def test_a_dense_row_is_binned_and_the_legend_sits_outside_the_plot(use_rack):
    import matplotlib.pyplot as plt

    rack = use_rack("h100:1", backing="emulated")
    interop.reset_timeline()
    x = torch.randn(32, 32, device="hybrid:0")
    for _ in range(300):
        x = torch.tanh(x @ x)
    records = interop.timeline()
    fig, drawn = timeline_figure(records, rack)
    try:
        assert drawn["hybrid:0 h100 s0"] == "bins"
        ax = fig.axes[0]
        fig.canvas.draw()
        legend = ax.get_legend().get_window_extent()
        assert legend.x0 > ax.get_window_extent().x1  # right of the data, never over it
        # A sparse row keeps one bar per record.
        _, sparse = timeline_figure(records[:5], rack)
        assert set(sparse.values()) == {"bars"}
    finally:
        plt.close("all")
