"""The per-op cost model: what an op would take on a chip, without running it.

    >>> from devices.cost import estimate
    >>> e = estimate("h200", "aten::mm", [(8192, 8192), (8192, 8192)], "bfloat16")
    >>> 769 < e.flops / e.seconds / 1e12 < 798   # modelled TFLOP/s vs the measured 769-798
    True

- :func:`estimate` -> :class:`Estimate`: one op (roofline with size-dependent
  efficiencies, plus launch overhead; every figure used in ``sources``).
- :func:`trace_ops` -> ``list[OpRecord]``: the aten ops a function runs, gathered on
  the meta device (torch imported lazily).
- :func:`estimate_ops` -> :class:`Summary`: totals, MFU and a per-op breakdown.
- :func:`classify` -> ``(category, base name)``: the op family the cost model prices an op by.

Modules: :mod:`.op_families` (classification), :mod:`.work` (the counted
unit and byte helpers), :mod:`.flops` and :mod:`.traffic` (counting),
:mod:`.shapes`, :mod:`.efficiency` and :mod:`.calibration` (parameters),
:mod:`.model` (estimate), :mod:`.meta_trace` (tracing on the meta device),
:mod:`.summary`.  Dtype names are :mod:`devices.dtypes`'s.
"""

from devices.cost.model import BOUNDS, Estimate, cache_clear, estimate
from devices.cost.op_families import classify
from devices.cost.summary import OpTotal, Summary, estimate_ops
from devices.cost.meta_trace import OpRecord, trace_ops

__all__ = ["BOUNDS", "Estimate", "OpRecord", "OpTotal", "Summary", "cache_clear", "classify", "estimate",
           "estimate_ops", "trace_ops"]
