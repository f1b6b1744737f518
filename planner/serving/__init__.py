"""Serving what-ifs: a model serving a workload on a rack, from one chip to a fleet, modelled.

Beside the training step model of :mod:`planner`: shape-only (no torch, no interop at import), on the same
catalogue, cost model, collectives and topology.

* :func:`serving_whatif` -> :class:`ServingEstimate` (``interop.serving_whatif``): TTFT, TPOT and end-to-end
  percentiles, throughput, the KV-limited concurrency, $ and J per output token, per-phase bounds.
* :class:`Workload` (``interop.Workload``): request lengths and arrivals (offline, Poisson rate, closed loop).
* :class:`Engine`: the modelled engine (continuous batching, chunked prefill, paged KV cache; fused or eager
  kernels).
* Modules: :mod:`.model_shape` (what a model moves and multiplies), :mod:`.precision` (bfloat16/fp8/fp4 per
  kind), :mod:`.kv_cache` (memory and the paged cache), :mod:`.iteration` (one iteration's time),
  :mod:`.simulation` (the discrete-event simulation), :mod:`.pools` (where pools sit on a rack),
  :mod:`.search` (the SLO search), :mod:`.golden_rows` (published rows), :mod:`.golden` (the model against
  them and the fit of :mod:`.fitted`),
  :mod:`.eager` (the op stream ``interop.serve`` runs, priced op by op), :mod:`.economics` (price, power).
"""

from __future__ import annotations

from planner.serving.engine import Engine
from planner.serving.estimate import Latency, ServingEstimate
from planner.serving.whatif import serving_whatif
from planner.serving.workload import Workload

__all__ = ["Engine", "Latency", "ServingEstimate", "Workload", "serving_whatif"]
