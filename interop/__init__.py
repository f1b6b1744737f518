"""hybrid-interop: a heterogeneous Trainium + NVIDIA rack as a PyTorch device.

``import interop`` registers the device type ``hybrid`` and the module
``torch.hybrid`` (mirroring ``torch.cuda``), and installs the embedded default
rack (``fusion-default``: 4 projected Trn4 + 4 B200 in one NVLink Fusion
domain). Every op on a hybrid tensor runs for real, on the same bytes; its
modelled time goes to the rack's timeline.

Public names: :class:`Rack`, :func:`set_rack`, :func:`current_rack`,
:func:`presets`; the modelled timeline: :func:`timeline`, :func:`reset_timeline`,
:func:`report`, :func:`export_trace`, :func:`gantt`, :func:`set_recording`, :func:`set_timeline_window`; numerics:
:mod:`interop.numerics` (formats, :func:`set_numerics`); planning: :func:`plan` (partition a model
across the rack, run it) and :func:`whatif`; serving: :func:`serving_whatif` (a workload served on a
rack, modelled; :class:`Engine`, its engine) and :func:`serve` (prefill on one slot, decode on another, for
real); the op ledger :func:`ledger`; device fidelity :func:`set_strict`,
:func:`divergences`. CUDA code: ``import interop.cuda`` (or ``hybrid run SCRIPT``) maps ``cuda:N`` onto slots.
"""

from __future__ import annotations

from interop import native_cuda  # noqa: F401  (captures torch.cuda before the CUDA layer can patch it)
from interop._backend import DEVICE_TYPE, register
from interop.fidelity import Divergence, FidelityWarning, divergences, set_strict
from interop.op_ledger import Ledger, ledger, reset_ledger
from interop.rack import Rack, RackDevice, current_rack, presets, set_rack
from interop.report import RunReport, report
from interop.session import reset_timeline, set_recording, set_timeline_window, timeline, timeline_window
from interop.timeline_export import export_trace, gantt
from interop.timelines import TimelineRecord, TimelineWindow
from interop import numerics
from interop.numerics import set_numerics

__version__ = "0.1.0"

# The planners load on first use (PEP 562), as collectives' in-process half does: importing the device
# does not import the paper planner, and `import planner` never imports the device.
_LAZY = {
    "whatif": ("planner", "whatif"),
    "StepEstimate": ("planner", "StepEstimate"),
    "plan": ("interop.live.plan", "plan"),
    "Plan": ("interop.live.plan", "Plan"),
    "serving_whatif": ("planner.serving", "serving_whatif"),
    "Workload": ("planner.serving", "Workload"),
    "Engine": ("planner.serving", "Engine"),
    "ServingEstimate": ("planner.serving", "ServingEstimate"),
    "serve": ("interop.live.serve", "serve"),
    "ServeResult": ("interop.live.serve", "ServeResult"),
}


_SUBPACKAGES = ("diverge",)
"""Subpackages loaded on first use; ``interop.diverge`` is also callable (``interop.diverge(script)``)."""


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"interop.{name}")
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'interop' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))

# Without the compiled extension the device is not registered; the pure-Python parts
# (catalogue, cost model, what-ifs) still import (interop._backend.MissingExtension).
if register():
    numerics.slots.scaled_mm.register()
    if current_rack() is None:
        set_rack(Rack.preset("fusion-default"))

__all__ = [
    "DEVICE_TYPE", "Divergence", "Engine", "FidelityWarning", "Ledger", "Plan", "Rack", "RackDevice", "RunReport",
    "ServeResult", "ServingEstimate", "StepEstimate", "TimelineRecord", "TimelineWindow", "Workload", "__version__",
    "current_rack", "diverge", "divergences", "export_trace", "gantt", "ledger", "numerics", "plan", "presets", "report",
    "reset_ledger", "reset_timeline", "serve", "serving_whatif", "set_numerics", "set_rack", "set_recording",
    "set_strict", "set_timeline_window", "timeline", "timeline_window", "whatif",
]
