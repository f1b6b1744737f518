"""``interop.serving_whatif``: serving a workload with a model on a rack that may exist only on paper, modelled.

The model's serving shape (:mod:`planner.serving.model_shape`), each pool's memory and KV cache
(:mod:`planner.serving.kv_cache`), each instance's iteration times from the per-op cost model and the
collectives on the rack's topology (:mod:`planner.serving.iteration`), and a discrete-event simulation of every
request (:mod:`planner.serving.simulation`, run by :mod:`planner.serving.run`). Nothing runs and nothing is
allocated; every figure is modelled. Identical replicas are simulated once with their share of the workload,
so a fleet of a million chips costs what one replica does.
"""

from __future__ import annotations

from planner.kernels import DEFAULT_KERNELS, check_kernels
from planner.serving.config import configure, spec_of
from planner.serving.engine import Engine
from planner.serving.estimate import ServingEstimate
from planner.serving.model_shape import model_shape
from planner.serving.run import check_slo, evaluate
from planner.serving.workload import Workload


def serving_whatif(model, rack, *, workload: Workload, parallel: dict | None = None, precision: str = "bfloat16",
                   prefill: dict | None = None, decode: dict | None = None, slo: dict | None = None,
                   search: bool = False, objective: str = "time", engine: Engine | None = None,
                   kernels: str | None = None) -> ServingEstimate:
    """Model serving ``workload`` with ``model`` on ``rack`` (shape-only: nothing runs, nothing is allocated).

    ``model``: a preset name, a transformers model type, a transformers config or a module built on the
    meta device (dense, GQA, mixture of experts, sliding windows). ``rack``: a preset, a spec string
    (``"h100:8"``, ``"trn3-ultraserver*64"``) or a :class:`devices.RackSpec`. ``workload``: a
    :class:`Workload`. ``parallel``: ``dict(tp=, pp=, ep=, replicas=)`` for colocated serving (chips per
    replica = tp x pp x ep; default: every chip in replicas of the least parallel cut whose KV cache holds
    a batch). ``precision``: ``bfloat16``, ``fp8``, ``fp4`` (NVFP4 or MXFP4 per the kind's capability
    table) or ``float32``; refused where a kind lacks it; a mixed checkpoint adds what it quantizes apart,
    ``"bfloat16,experts=mxfp4/bfloat16,kv=bfloat16"`` (:mod:`planner.serving.precision`). ``prefill``,
    ``decode``: disaggregated pools, ``dict(kind=, chips=, tp=, pp=, ep=)`` or ``dict(slots=[...], tp=)``. ``slo``:
    ``dict(ttft=s, tpot=s, attainment=0.9)``: goodput reported; with ``search=True`` the pools, their
    parallelism and the batch limit that give the most output tokens/s per chip (``objective="time"``)
    or per dollar (``objective="cost"``) within it. ``engine``: the engine's limits and kernels
    (:class:`planner.serving.engine.Engine`). ``kernels``: ``"fused"`` (the fitted production engine, the default)
    or ``"eager"`` (``interop.serve``'s engine), the vocabulary of ``interop.whatif`` (:mod:`planner.kernels`);
    with ``engine`` it must agree with the engine's. Every estimate names its engine (``parallel["kernels"]``).
    ``interop.serve``'s run: ``serving_whatif(model.config, **result.whatif_config())``.
    """
    shape = model_shape(model)
    spec = spec_of(rack)
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: expected an interop.Workload(input_tokens, output_tokens, ...), "
                         f"got {workload!r}")
    if kernels is not None:
        check_kernels(kernels)
    if engine is None:
        engine = Engine.of(kernels or DEFAULT_KERNELS)
    if not isinstance(engine, Engine):
        raise ValueError(f"engine: expected a planner.serving.Engine, got {engine!r}")
    if kernels is not None and engine.kernels != kernels:
        raise ValueError(f"kernels: {kernels!r}, but the engine given runs {engine.kernels!r} kernels; give one of "
                         f"them (Engine.of(kernels, max_batch) builds the engine of a kernel choice)")
    slo = check_slo(slo)
    if objective not in ("time", "cost"):
        raise ValueError(f"objective: expected 'time' or 'cost', got {objective!r}")
    if search:
        from planner.serving.search import search_serving

        return search_serving(shape, spec, workload=workload, precision=precision, slo=slo, engine=engine,
                              objective=objective, prefill=prefill, decode=decode, parallel=parallel)
    if not isinstance(precision, str):
        raise ValueError(f"precision: expected a name (bfloat16, fp8, fp4, float32), got {precision!r}")
    config = configure(shape, spec, parallel=parallel, precision=precision, prefill=prefill, decode=decode,
                       engine=engine, workload=workload)
    return evaluate(shape, spec, config, workload, slo=slo)


__all__ = ["serving_whatif"]
