"""Whole-sequence recurrent layers, priced as the kernels a GPU runs for one.

A CPU runs an LSTM layer over the whole sequence as one oneDNN kernel (``aten::mkldnn_rnn_layer``, and
``aten::mkldnn_rnn_layer_backward``), and a slot runs the same one (csrc/aten/HybridRecurrentSequence.cpp).
A GPU's layer (cuDNN's standard algorithm, or ATen's fused cells) is one GEMM projecting every step's input
at once, then per step a recurrent GEMM and a fused cell; its backward mirrors that, with the weight
gradients as GEMMs over the whole sequence. :func:`parts` names those kernels with their shapes, and the
cost model prices each with its own rule (:func:`devices.cost.estimate`) and adds them up: one record, the
time of every kernel in it.
"""

from __future__ import annotations

from typing import Sequence

SEQUENCE_OPS = frozenset({"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"})

Shape = tuple[int, ...]
Part = tuple[str, tuple[Shape, ...], tuple[Shape, ...], int]
"""(op, input shapes, output shapes, how many times it runs)."""


def parts(name: str, shapes: Sequence[Shape]) -> list[Part] | None:
    """The kernels of a whole-sequence LSTM layer (``name``: its base op name), or None if the shapes are not
    a layer's: ``input (T, B, I)`` and ``weight_ih (4H, I)`` first, ``weight_hh (4H, H)`` third."""
    if len(shapes) < 3 or len(shapes[0]) != 3 or len(shapes[1]) != 2 or len(shapes[2]) != 2:
        return None
    steps, batch, features = shapes[0]
    gates, hidden = shapes[2]
    if gates != 4 * hidden or shapes[1] != (gates, features):
        return None
    rows = steps * batch
    if name == "mkldnn_rnn_layer":
        return [
            ("aten::mm", ((rows, features), (features, gates)), ((rows, gates),), 1),
            ("aten::mm", ((batch, hidden), (hidden, gates)), ((batch, gates),), steps),
            ("aten::_thnn_fused_lstm_cell", ((batch, gates), (batch, gates), (batch, hidden), (gates,), (gates,)),
             ((batch, hidden), (batch, hidden), (batch, gates)), steps),
        ]
    return [
        ("aten::_thnn_fused_lstm_cell_backward_impl",
         ((batch, hidden), (batch, hidden), (batch, hidden), (batch, hidden), (batch, gates)),
         ((batch, gates), (batch, hidden), (gates,)), steps),
        ("aten::mm", ((batch, gates), (gates, hidden)), ((batch, hidden),), steps),
        ("aten::mm", ((rows, gates), (gates, features)), ((rows, features),), 1),
        ("aten::mm", ((gates, rows), (rows, features)), ((gates, features),), 1),
        ("aten::mm", ((gates, rows), (rows, hidden)), ((gates, hidden),), 1),
        ("aten::sum.dim_IntList", ((rows, gates),), ((gates,),), 1),
    ]


__all__ = ["SEQUENCE_OPS", "parts"]
