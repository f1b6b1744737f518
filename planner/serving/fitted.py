"""Serving efficiencies: what a production inference engine adds to the per-op cost model, fitted.

The per-op cost model (``devices.cost``) prices each kernel from the catalogue's peaks
and bandwidths and efficiency curves calibrated on measured matmuls and copies. A
serving engine's kernels and its host loop are not those: FP8 GEMMs reach another
share of the peak, attention over a paged cache another, and every iteration pays
the scheduler, sampling and the host's synchronisation. These factors capture that
per chip family (the same for every model, precision and configuration), each a
:class:`devices.Figure` whose note says which published rows it was fitted to
(:mod:`planner.serving.golden`); the rows that test them were not used.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

import devices
from devices.figure import Figure


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingEfficiency:
    """Factors on the fused engine's modelled time for one chip family (None: the cost model as is)."""

    family: str
    gemm: Figure | None = None
    """Factor on GEMM time (every precision)."""
    attention: Figure | None = None
    """Factor on attention time (prefill and decode, over the paged cache)."""
    iteration: Figure | None = None
    """Seconds every engine iteration pays outside the kernels (scheduling, sampling, host synchronisation)."""

    def figures(self) -> dict[str, Figure]:
        """The fitted figures by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "family" and getattr(self, f.name) is not None}


FITTED: dict[str, ServingEfficiency] = {}
"""Fitted serving efficiencies by chip kind or family (a kind's entry wins over its family's)."""


@lru_cache(maxsize=None)
def serving_efficiency(kind: str) -> ServingEfficiency | None:
    """A kind's serving efficiencies: its own, else its family's, else None."""
    chip = devices.chip(kind)
    return FITTED.get(chip.kind) or FITTED.get(chip.family)


__all__ = ["FITTED", "ServingEfficiency", "serving_efficiency"]
