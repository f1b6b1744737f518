"""The fabric of hybrid-interop: topology, collective algorithms as schedules, their cost, their execution.

* :func:`estimate` / :func:`plan`: modelled time of a collective on a rack (preset
  name, spec string or :class:`devices.RackSpec`), algorithm chosen by lowest
  modelled time or forced; :class:`CollectiveEstimate` carries seconds, algbw,
  busbw (nccl-tests), the algorithm and protocol, and the sources of every figure.
* :class:`Topology`: domains, links, routes, bandwidths, latencies of a rack,
  symbolic (a million chips are a handful of objects; :mod:`collectives.rack_topology`
  builds it from a rack spec); :func:`topology` gives a rack's, from the one topology cache.
* :func:`transfer`: the one point-to-point model (a copy between slots or
  between the host, :data:`HOST`, and a slot; the send_recv collective).
* :mod:`collectives.algorithms`: ring, tree, rabenseifner, binomial, direct,
  hierarchical, in_switch, torus, each a :class:`Schedule` builder with a closed form.
* :mod:`collectives.algorithm_choice`: chooses the algorithm and protocol and prices the schedule
  (:func:`plan`, :func:`estimate`); :mod:`collectives.tuning`: the sourced constants it prices with.
* :mod:`collectives.executor` (imports torch): runs a schedule on real tensors;
  :mod:`collectives.in_process` (imports torch): the collectives over hybrid tensors in one process;
  :mod:`collectives.verify` (imports torch): nccl-tests-style checks and sweeps.

Importing the package imports neither torch nor compiled code.
"""

from __future__ import annotations

from collectives.algorithms import get as algorithm
from collectives.algorithms import names as algorithm_names
from collectives.cost import AlphaBeta, Levels, schedule_time
from collectives.algorithm_choice import CollectiveEstimate, CollectivePlan, estimate, plan, topology
from collectives.ops import OPS, REDUCE_OPS, busbw_factor
from collectives.schedule import CollectiveSpec, Schedule, Transfer
from collectives.topology import HOST, Topology
from collectives.transfer import TransferEstimate, transfer

_HYBRID = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather", "scatter",
           "send_recv", "barrier", "run")


def __getattr__(name: str):
    # The in-process collectives over hybrid tensors import torch; load them on first use so that
    # `import collectives` stays free of torch for planners and what-ifs.
    if name in _HYBRID:
        from collectives import in_process

        return getattr(in_process, name)
    raise AttributeError(f"module 'collectives' has no attribute {name!r}")


__all__ = [
    "HOST", "OPS", "REDUCE_OPS", "AlphaBeta", "CollectiveEstimate", "CollectiveSpec", "Levels", "CollectivePlan", "Schedule",
    "Topology", "Transfer", "TransferEstimate", "algorithm", "algorithm_names", "busbw_factor", "estimate", "plan",
    "schedule_time", "topology", "transfer",
]
