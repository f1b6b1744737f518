"""A serving what-if's answer: :class:`ServingEstimate` (latency percentiles, throughput, memory, cost, energy).

Every figure is modelled (the labels say so); projected chips (Trainium4) are marked.
``table()`` prints it, ``to_json()`` serialises it, ``plot(path)`` draws latency against
throughput as concurrency grows, ``export_trace(path)`` writes the simulated timeline
(iterations per instance, KV transfers per link) as Chrome trace JSON.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass(frozen=True, slots=True)
class Latency:
    """Percentiles of one latency over the requests, seconds (modelled)."""

    p50: float
    p90: float
    p99: float

    def ms(self) -> str:
        return f"p50 {self.p50 * 1e3:,.2f} / p90 {self.p90 * 1e3:,.2f} / p99 {self.p99 * 1e3:,.2f} ms"


@dataclass(frozen=True)
class ServingEstimate:
    """Serving a workload on a rack, modelled (see the module doc)."""

    ttft: Latency
    """Time to first token: arrival to the first output token."""
    tpot: Latency
    """Time per output token after the first: (last token - first token) / (output tokens - 1)."""
    e2e: Latency
    """Arrival to the last token."""
    output_tokens_per_second: float
    """Output tokens (the first included) over the time from the first arrival to the last token."""
    output_tokens_per_second_per_chip: float
    """Per chip the configuration uses."""
    requests_per_second: float
    max_concurrency: int
    """Sequences of the workload's mean length the KV caches hold at once (every instance together)."""
    kv_bytes_per_token: int
    """KV cache bytes per token of one sequence, whole model: 2 x layers x kv heads x head dim x bytes."""
    fits: bool
    """The weights, one iteration's activations and every request's KV cache fit (a configuration that
    does not is refused with a ValueError saying what would fit, so this is True on a returned estimate)."""
    cost_per_million_output_tokens: float | None
    """Chip-hours at catalogue prices per million output tokens (None: see :attr:`missing`)."""
    joules_per_output_token: float | None
    """Board power of every chip used over the run, per output token (None: see :attr:`missing`)."""
    bound: dict[str, str]
    """Per phase (``prefill``, ``decode``): what its iterations spend most on (compute, memory,
    communication, overhead)."""
    breakdown: dict[str, dict[str, float]]
    """Per phase: seconds of a representative iteration by part."""
    parallel: dict[str, Any]
    """The configuration: pools, instances, tp/pp/ep, engine limits."""
    projected: bool
    """True when a projected chip figure (Trainium4) entered the estimate."""
    missing: dict[str, str] = field(default_factory=dict)
    """Why a figure is None (no price, no power in the catalogue)."""
    goodput: float | None = None
    """With an SLO: requests per second that met it."""
    slo_attainment: float | None = None
    """With an SLO: the share of requests that met both its TTFT and TPOT."""
    kv_transfer: Latency | None = None
    """Disaggregated: seconds to move one request's KV cache from its prefill to its decode instance."""

    # Details set once by serving_whatif, read through the properties below.
    @property
    def model(self) -> str:
        return self.__dict__.get("_model", "")

    @property
    def rack(self) -> str:
        return self.__dict__.get("_rack", "")

    @property
    def workload(self):
        return self.__dict__.get("_workload")

    @property
    def events(self) -> list:
        """The simulated timeline of one unit of identical instances (one replica; a prefill and a decode group):
        :class:`planner.serving.simulation.Event` per iteration and KV transfer."""
        return self.__dict__.get("_events", [])

    @property
    def search(self):
        """With ``search=True``: the :class:`planner.serving.search.ServingSearch` that found this one."""
        return self.__dict__.get("_search")

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) lines, every figure labelled modelled."""
        from planner.serving.report import estimate_rows

        return estimate_rows(self)

    def table(self) -> str:
        """The estimate as aligned text, within 120 columns (:func:`devices.text_table.table`)."""
        from devices.text_table import table

        return table(None, [list(row) for row in self.rows()], align="ll", rule=False)

    def __str__(self) -> str:
        return self.table()

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The estimate as JSON (every figure modelled), written to ``path`` when given."""
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        for key in ("ttft", "tpot", "e2e", "kv_transfer"):
            if data[key] is not None:
                data[key] = asdict(data[key])
        data.update(model=self.model, rack=self.rack, modelled=True,
                    workload=self.workload.describe() if self.workload is not None else None)
        text = json.dumps(data, indent=2, default=_plain)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def plot(self, path: str | os.PathLike, concurrencies=None) -> str:
        """Latency against throughput per chip as concurrency grows (PNG at ``path``); returns the path."""
        from planner.serving.report import plot_curve

        return plot_curve(self, path, concurrencies)

    def export_trace(self, path: str | os.PathLike) -> str:
        """The simulated timeline as Chrome trace JSON (opens in Perfetto); returns the path."""
        from planner.serving.report import write_trace

        return write_trace(self, path)

    def rerun(self, workload) -> "ServingEstimate":
        """The same configuration serving another workload."""
        run: Callable = self.__dict__["_rerun"]
        return run(workload)


def _plain(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "__dict__"):
        return str(value)
    return str(value)


def attach(est: ServingEstimate, **details: Any) -> ServingEstimate:
    """Set details beyond the fields (model, rack, workload, events, rerun...)."""
    for k, v in details.items():
        object.__setattr__(est, f"_{k}", v)
    return est


__all__ = ["Latency", "ServingEstimate", "attach"]
