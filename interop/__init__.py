"""hybrid-interop: a heterogeneous Trainium + NVIDIA rack as a PyTorch device.

``import interop`` registers the device type ``hybrid`` and the module
``torch.hybrid`` (mirroring ``torch.cuda``), and installs the embedded default
rack (``fusion-default``: 4 projected Trn4 + 4 B200 in one NVLink Fusion
domain). Every op on a hybrid tensor runs for real, on the same bytes; its
modelled time goes to the rack's timeline.

Public names: :class:`Rack`, :func:`set_rack`, :func:`current_rack`,
:func:`presets`; the modelled timeline: :func:`timeline`, :func:`reset_timeline`,
:func:`report`, :func:`export_trace`, :func:`gantt`, :func:`set_recording`; numerics:
:mod:`interop.numerics` (formats, :func:`set_numerics`); planning: :func:`plan` (partition a model
across the rack, run it) and :func:`whatif`.
"""

from __future__ import annotations

from interop._backend import DEVICE_TYPE, register
from interop.rack import Rack, RackDevice, current_rack, presets, set_rack
from interop.report import RunReport, report
from interop.session import reset_timeline, set_recording, timeline
from interop.timeline_export import export_trace, gantt
from interop.timelines import TimelineRecord
from interop import numerics
from interop.numerics import set_numerics
from interop.planning import StepEstimate, whatif
from interop.planning.plan import Plan, plan

__version__ = "0.1.0"

# Without the compiled extension the device is not registered; the pure-Python parts
# (catalogue, cost model, what-ifs) still import (interop._backend.MissingExtension).
if register():
    numerics.scaled_mm.register()
    if current_rack() is None:
        set_rack(Rack.preset("fusion-default"))

__all__ = [
    "DEVICE_TYPE", "Plan", "Rack", "RackDevice", "RunReport", "StepEstimate", "TimelineRecord", "__version__",
    "current_rack", "export_trace", "gantt", "numerics", "plan", "presets", "report", "reset_timeline", "set_numerics",
    "set_rack", "set_recording", "timeline", "whatif",
]
