"""The per-op cost model: what an op would take on a chip, without running it.

    >>> from devices.cost import estimate
    >>> e = estimate("h200", "aten::mm", [(8192, 8192), (8192, 8192)], "bfloat16")
    >>> 769 < e.flops / e.seconds / 1e12 < 798   # modelled TFLOP/s vs the measured 769-798
    True

- :func:`estimate` -> :class:`Estimate`: one op (roofline with size-dependent
  efficiencies, plus launch overhead; every figure used in ``sources``).
- :func:`trace_ops` -> ``list[OpRecord]``: the aten ops a function runs, gathered on
  the meta device (torch imported lazily); an :class:`OpObserver` sees the same ops.
- :func:`estimate_ops` -> :class:`Summary`: totals, MFU and a per-op breakdown.
- :func:`estimate_kernel` -> :class:`Estimate`: one kernel that is not an ATen op (a compiled
  graph's fused kernel, a Triton launch), from its own bytes and FLOPs (:mod:`.kernel`).
- :func:`classify` -> ``(category, base name)``: the op family the cost model prices an op by.

Modules: :mod:`.op_families` (classification), :mod:`.work` (the counted
unit and byte helpers), :mod:`.flops` and :mod:`.traffic` (counting),
:mod:`.shapes`, :mod:`.efficiency` and :mod:`.calibration` (parameters),
:mod:`.model` (estimate), :mod:`.meta_trace` (tracing on the meta device),
:mod:`.summary`.  Dtype names are :mod:`devices.dtypes`'s.
"""

from devices.cost import kernel as _kernel
from devices.cost import model as _model
from devices.cost.kernel import estimate_kernel
from devices.cost.model import BOUNDS, Estimate, estimate
from devices.cost.op_families import classify
from devices.cost.summary import OpTotal, Summary, estimate_ops
from devices.cost.meta_trace import HOST_READ, OpObserver, OpRecord, trace_ops

__all__ = ["BOUNDS", "HOST_READ", "Estimate", "OpObserver", "OpRecord", "OpTotal", "Summary", "cache_clear", "classify", "on_cache_clear", "estimate",
           "estimate_kernel", "estimate_ops", "trace_ops"]


_clear_hooks: list = []


def on_cache_clear(hook) -> None:
    """Call ``hook()`` whenever :func:`cache_clear` runs: a layer above that keeps the cost model's answers
    (the live timeline's cost table) forgets them too."""
    _clear_hooks.append(hook)


def cache_clear() -> None:
    """Forget cached estimates (ops and kernels) and parameters (after editing the catalogue in a test)."""
    _model.cache_clear()
    _kernel.cache_clear()
    for hook in _clear_hooks:
        hook()
