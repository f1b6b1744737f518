"""``interop.serving_whatif``: serving a workload with a model on a rack that may exist only on paper, modelled.

The model's serving shape (:mod:`planner.serving.model_shape`), each pool's memory and
KV cache (:mod:`planner.serving.kv_cache`), each instance's iteration times from the
per-op cost model and the collectives on the rack's topology
(:mod:`planner.serving.iteration`), and a discrete-event simulation of every request
(:mod:`planner.serving.simulation`). Nothing runs and nothing is allocated; every figure
is modelled. Identical replicas are simulated once with their share of the workload, so a
fleet of a million chips costs what one replica does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import collectives
import devices
from planner.comm import pricer_for
from planner.serving.economics import fleet_rates
from planner.serving.engine import Engine
from planner.serving.estimate import Latency, ServingEstimate, attach
from planner.serving.grid import Grid
from planner.serving.iteration import PARTS, FusedCost, Placement, bound
from planner.serving.kv_cache import KvCache, memory
from planner.serving.model_shape import ModelShape, model_shape
from planner.serving.pools import Pool, colocated, disaggregated
from planner.serving.precision import Precision, resolve
from planner.serving.simulation import Requests, Simulation, percentiles
from planner.serving.workload import Workload

SLO_KEYS = ("ttft", "tpot", "attainment")
"""Keys of ``slo=``: TTFT and TPOT limits in seconds, and the share of requests that must meet both
(default :data:`DEFAULT_ATTAINMENT`)."""

DEFAULT_ATTAINMENT = 0.9
"""Share of requests within the SLO for a configuration to meet it (DistServe's 90 %)."""

MIN_SEQUENCES = 32
"""The default configuration is the least parallel one whose KV cache holds this many of the workload's
sequences (fewer when the workload has fewer requests)."""


@dataclass(frozen=True, slots=True)
class Config:
    """One serving configuration: a colocated pool, or a prefill and a decode pool."""

    pools: tuple[Pool, ...]
    precision: str
    engine: Engine

    @property
    def disaggregated(self) -> bool:
        return len(self.pools) == 2

    @property
    def chips(self) -> int:
        return sum(p.chips for p in self.pools)

    def chip_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pools:
            out[p.kind] = out.get(p.kind, 0) + p.chips
        return out


def check_slo(slo) -> dict | None:
    """``slo`` validated: {'ttft': s, 'tpot': s, 'attainment': share} (either limit may be absent)."""
    if slo is None:
        return None
    if not isinstance(slo, dict) or not slo:
        raise ValueError(f"slo: expected a dict with keys {', '.join(SLO_KEYS)}, got {slo!r}")
    for k, v in slo.items():
        if k not in SLO_KEYS:
            raise ValueError(f"slo: unknown key {k!r}; accepted: {', '.join(SLO_KEYS)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"slo {k}: expected a positive number (seconds, or a share for attainment), got {v!r}")
    if slo.get("attainment", DEFAULT_ATTAINMENT) > 1:
        raise ValueError(f"slo attainment: expected a share in (0, 1], got {slo['attainment']!r}")
    if "ttft" not in slo and "tpot" not in slo:
        raise ValueError("slo: give ttft, tpot or both (seconds)")
    return dict(slo)


def spec_of(rack):
    """A rack argument (preset, spec string, TOML path, RackSpec, or a live ``interop.Rack``) as a RackSpec."""
    spec = getattr(rack, "spec", None)
    return devices.parse_rack(spec if isinstance(spec, devices.RackSpec) else rack)


# -- pricing a pool -------------------------------------------------------------------------


@dataclass(slots=True)
class Priced:
    """One pool with its precision, memory and iteration costs."""

    pool: Pool
    precision: Precision
    kv: KvCache
    cost: object


def _memory_message(shape: ModelShape, pool: Pool, kv: KvCache, name: str, precision: str) -> str:
    per = pool.per_instance
    gb = kv.weights / 1e9
    total = shape.parameters * resolve(precision, pool.kind).weight_bytes / 1e9
    need = math.ceil(total * 1e9 / (kv.capacity * 0.9))
    return (f"{name}: {shape.name} in {precision} needs {gb:,.1f} GB of weights and {kv.activations / 1e9:,.1f} GB "
            f"of activations per chip at tp {pool.tp} x pp {pool.pp} x ep {pool.ep} ({per} chips per instance); "
            f"{pool.kind} holds {kv.capacity / 1e9:,.1f} GB. The weights ({total:,.1f} GB) need at least {need} "
            f"chips per instance (e.g. tp={_pow2_at_least(need)})")


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def price_pool(shape: ModelShape, spec, pool: Pool, precision: str, engine: Engine, workload: Workload, *,
               name: str, calibrated: bool = True) -> Priced:
    """A pool's memory and cost model; ValueError naming ``name`` when it cannot hold the model or a sequence."""
    shape.check_tp(pool.tp)
    if pool.ep > 1 and not shape.experts:
        raise ValueError(f"{name}: expert parallelism {pool.ep} needs an MoE model; {shape.name} has no experts")
    if shape.experts and shape.experts % pool.ep:
        raise ValueError(f"{name}: ep {pool.ep} does not divide the {shape.experts} experts of {shape.name}")
    if pool.pp > shape.layers:
        raise ValueError(f"{name}: pp {pool.pp} exceeds the {shape.layers} layers of {shape.name}")
    prec = resolve(precision, pool.kind)
    longest_in = max(a for a, _ in workload.lengths)
    kv = memory(shape, pool.kind, prec, tp=pool.tp, pp=pool.pp, ep=pool.ep, engine=engine,
                longest_prompt=longest_in)
    if not kv.fits:
        raise ValueError(_memory_message(shape, pool, kv, name, precision))
    longest = max((a if pool.role == "prefill" else a + workload.reserved(b)) for a, b in workload.lengths)
    need = kv.sequence_bytes(longest)
    if need > kv.kv:
        fit = kv.kv // max(1, kv.layer_bytes * (kv.full_layers + kv.sliding_layers))
        raise ValueError(f"{name}: one sequence of {longest:,} tokens needs {need / 1e9:,.2f} GB of KV cache per "
                         f"chip; {pool.kind} has {kv.kv / 1e9:,.2f} GB left after {kv.weights / 1e9:,.1f} GB of "
                         f"weights at tp {pool.tp} x pp {pool.pp}: at most about {fit:,} tokens fit; use more chips "
                         f"per instance (a larger tp or pp) or shorter sequences")
    placement = Placement(pool.instance(0), pool.tp, pool.ep, pool.pp)
    if engine.kernels == "eager":
        from planner.serving.eager import EagerCost

        cost = EagerCost(shape, pool.kind, prec, placement, spec)
    else:
        cost = FusedCost(shape, pool.kind, prec, placement, pricer_for(spec), calibrated=calibrated)
    return Priced(pool, prec, kv, cost)


def least_parallel(shape: ModelShape, kind: str, chips: int, domain: int, precision: str, engine: Engine,
                   workload: Workload, role: str = "colocated") -> tuple[int, int] | None:
    """The least parallel (tp, pp) of one instance of ``kind`` (tp inside a scale-up domain of ``domain``
    chips) whose KV cache holds :data:`MIN_SEQUENCES` of the workload's sequences (fewer when it has fewer
    requests), else the least that holds its longest one; None when none fits ``chips`` chips."""
    want = min(MIN_SEQUENCES, workload.requests, workload.concurrency or MIN_SEQUENCES)
    mean = sum(workload.mean_lengths()) if role != "prefill" else workload.mean_lengths()[0]
    longest = workload.longest() if role != "prefill" else max(a for a, _ in workload.lengths)
    prec = resolve(precision, kind)
    fallback = None
    for pp in (1, 2, 4, 8, 16):
        for tp in shape.tp_choices(limit=max(1, domain)):
            if tp * pp > chips or pp > shape.layers:
                continue
            kv = memory(shape, kind, prec, tp=tp, pp=pp, ep=1, engine=engine,
                        longest_prompt=max(a for a, _ in workload.lengths))
            if not kv.fits or kv.sequence_bytes(longest) > kv.kv:
                continue
            if kv.sequences(math.ceil(mean)) >= want:
                return tp, pp
            fallback = fallback or (tp, pp)
        if fallback is not None:
            return fallback
    return None


def _fits_nowhere(shape: ModelShape, kind: str, precision: str, chips: int, where: str) -> ValueError:
    chip = devices.chip(kind)
    total = shape.parameters * resolve(precision, kind).weight_bytes
    return ValueError(f"model: {shape.name} in {precision} needs {total / 1e9:,.1f} GB of weights; {kind} holds "
                      f"{chip.hbm_capacity.value / 1e9:,.1f} GB per chip, so one instance needs at least "
                      f"{math.ceil(total / (0.9 * chip.hbm_capacity.value))} chips with room for a KV cache "
                      f"({total / chips / 1e9:,.2f} GB of weights per chip over all {chips:,} {kind} of {where}); "
                      f"no tp x pp there fits it")


def default_parallel(shape: ModelShape, spec, precision: str, engine: Engine, workload: Workload) -> dict:
    """Colocated replicas of :func:`least_parallel`; ValueError with the memory the model needs per chip when
    none fits the rack."""
    kind = next(iter(spec.counts()))
    found = least_parallel(shape, kind, len(spec), _domain_size(spec), precision, engine, workload)
    if found is None:
        raise _fits_nowhere(shape, kind, precision, len(spec), spec.name)
    return {"tp": found[0], "pp": found[1]}


def auto_pools(shape: ModelShape, spec, precision: str, engine: Engine, workload: Workload) -> tuple[dict, dict]:
    """Disaggregated pools on a rack mixing kinds: prompts on the kind with the highest peak in the precision
    (prefill is compute-bound), decode on the kind with the most memory bandwidth among the others (decode
    streams weights and KV cache), every chip of each kind, each at :func:`least_parallel`."""
    from planner.serving.precision import PRECISIONS

    counts = spec.counts()
    usable = [k for k in counts if precision in _accepted(k)]
    if len(usable) < 2:
        raise ValueError(f"precision: {precision} runs on {', '.join(usable) or 'none'} of {', '.join(counts)}; "
                         f"disaggregated pools need two kinds that run it (or give prefill= and decode=)")
    prefill_kind = max(usable, key=lambda k: devices.chip(k).peak_for(PRECISIONS[precision]).value)
    decode_kind = max((k for k in usable if k != prefill_kind), key=lambda k: devices.chip(k).hbm_bandwidth.value)
    pools = []
    for kind, role in ((prefill_kind, "prefill"), (decode_kind, "decode")):
        domain = max(1, min(_kind_domain(spec, kind), counts[kind]))
        found = least_parallel(shape, kind, counts[kind], domain, precision, engine, workload, role)
        if found is None:
            raise _fits_nowhere(shape, kind, precision, counts[kind], spec.name)
        tp, pp = found
        pools.append(dict(kind=kind, chips=counts[kind] // (tp * pp) * tp * pp, tp=tp, pp=pp))
    return pools[0], pools[1]


def _accepted(kind: str) -> list[str]:
    from planner.serving.precision import accepted

    return accepted(kind)


def _domain_size(spec) -> int:
    d = spec.domain_of(0)
    return d.stop - d.first


def _kind_domain(spec, kind: str) -> int:
    """Chips of ``kind`` in the first scale-up domain holding one."""
    for g in spec.groups:
        if g.kind == kind:
            d = spec.domain_of(g.first)
            return min(d.stop, g.stop) - max(d.first, g.first)
    return 1


def configure(shape: ModelShape, spec, *, parallel, precision: str, prefill, decode, engine: Engine,
              workload: Workload) -> Config:
    """The pools of a what-if's arguments (see :mod:`planner.serving.pools`)."""
    if (prefill is None) != (decode is None):
        raise ValueError("prefill and decode: give both pools for disaggregated serving, or neither")
    if prefill is not None:
        if parallel is not None:
            raise ValueError("parallel: with prefill= and decode= pools, give tp/pp/ep inside each pool")
        return Config(disaggregated(spec, prefill, decode), precision, engine)
    if engine.kernels == "eager":
        raise ValueError("kernels: the eager engine is interop.serve's disaggregated one; give prefill= and decode=")
    if parallel is None and len(spec.counts()) > 1:
        return Config(disaggregated(spec, *auto_pools(shape, spec, precision, engine, workload)), precision, engine)
    if parallel is None:
        parallel = default_parallel(shape, spec, precision, engine, workload)
    return Config((colocated(spec, parallel),), precision, engine)


# -- running a configuration ---------------------------------------------------------------


def _requests(workload: Workload) -> Requests:
    pairs = workload.request_lengths()
    arrivals = workload.arrivals() or [0.0] * len(pairs)
    return Requests([a for a, _ in pairs], [b for _, b in pairs], list(arrivals))


def _transfer(spec, prefill: Priced, decode: Priced, shape: ModelShape, reqs: Requests):
    """Seconds to move request ``req``'s KV cache from prefill instance i to decode instance j: the collectives'
    transfer model on the route between the instances' first chips. A fused engine moves the whole cache at
    once over the pools' parallel links (one per tensor-parallel rank and stage of the smaller side); the
    eager engine copies each layer's keys and values, and the first token, one after another."""
    per_token = shape.kv_elements_per_token() * prefill.precision.kv_bytes
    lanes = min(prefill.pool.tp * prefill.pool.pp, decode.pool.tp * decode.pool.pp)
    messages = getattr(prefill.cost, "transfer_messages", None)
    routes: dict[tuple[int, int], object] = {}

    def route(i: int, j: int):
        hit = routes.get((i, j))
        if hit is None:
            src, dst = prefill.pool.instance(i)[0], decode.pool.instance(j)[0]
            exact: dict[int, float] = {}

            def seconds(n: int, src=src, dst=dst) -> float:
                t = exact.get(n)
                if t is None:
                    t = exact[n] = collectives.transfer(spec, src, dst, max(1, n)).seconds
                return t

            hit = routes[(i, j)] = (seconds, Grid(seconds))
        return hit

    def transfer(i: int, j: int, req: int) -> float:
        exact, grid = route(i, j)
        if messages is not None:
            return sum(exact(n) for n in messages(reqs.inputs[req]))
        return grid(math.ceil(reqs.inputs[req] * per_token / lanes))

    return transfer


def simulate(shape: ModelShape, spec, config: Config, workload: Workload, *, record: bool = True,
             calibrated: bool = True, priced: tuple[Priced, ...] | None = None):
    """Run the simulation of ``config``; returns (Requests, Simulation, priced pools, units simulated)."""
    engine = config.engine
    if priced is None:
        names = ("parallel",) if not config.disaggregated else ("prefill", "decode")
        priced = tuple(price_pool(shape, spec, p, config.precision, engine, workload, name=n, calibrated=calibrated)
                       for p, n in zip(config.pools, names))
    budget = engine.max_num_tokens if engine.chunked_prefill else 1 << 30
    if config.disaggregated:
        pre, dec = priced
        units = math.gcd(pre.pool.instances, dec.pool.instances)
        share = workload.split(units)
        reqs = _requests(share)
        sim = Simulation(reqs, concurrency=share.concurrency, record=record)
        for i in range(pre.pool.instances // units):
            sim.add(f"prefill {i} ({pre.pool.kind})", "prefill", pre.cost, capacity=pre.kv.kv * pre.kv.ranks,
                    need=lambda r, kv=pre.kv: kv.sequence_bytes(reqs.inputs[r]), max_batch=engine.batch_limit,
                    budget=budget, max_prompts=engine.prefill_requests)
        for j in range(dec.pool.instances // units):
            sim.add(f"decode {j} ({dec.pool.kind})", "decode", dec.cost, capacity=dec.kv.kv * dec.kv.ranks,
                    need=lambda r, kv=dec.kv: kv.sequence_bytes(reqs.inputs[r] + share.reserved(reqs.outputs[r])),
                    max_batch=engine.batch_limit, budget=budget)
        prefill_index = {k: k for k in range(pre.pool.instances // units)}
        first_decode = pre.pool.instances // units
        transfer = _transfer(spec, pre, dec, shape, reqs)
        sim.transfer = lambda i, j, r: transfer(prefill_index[i], j - first_decode, r)
    else:
        (col,) = priced
        units = col.pool.instances
        share = workload.split(units)
        reqs = _requests(share)
        sim = Simulation(reqs, concurrency=share.concurrency, record=record)
        sim.add(f"replica 0 ({col.pool.kind})", "colocated", col.cost, capacity=col.kv.kv * col.kv.ranks,
                need=lambda r, kv=col.kv: kv.sequence_bytes(reqs.inputs[r] + share.reserved(reqs.outputs[r])),
                max_batch=engine.batch_limit, budget=budget, max_prompts=engine.prefill_requests)
    sim.run()
    return reqs, sim, priced, units


def evaluate(shape: ModelShape, spec, config: Config, workload: Workload, *, slo: dict | None = None,
             record: bool = True, calibrated: bool = True, priced=None) -> ServingEstimate:
    """A :class:`ServingEstimate` of ``config`` serving ``workload``."""
    reqs, sim, priced, units = simulate(shape, spec, config, workload, record=record, calibrated=calibrated,
                                       priced=priced)
    n = len(reqs.inputs)
    ttft = [reqs.first[i] - reqs.arrival[i] for i in range(n)]
    tpot = [(reqs.finish[i] - reqs.first[i]) / (reqs.outputs[i] - 1) for i in range(n) if reqs.outputs[i] > 1]
    e2e = [reqs.finish[i] - reqs.arrival[i] for i in range(n)]
    span = max(reqs.finish) - min(reqs.arrival)
    tokens = sum(reqs.outputs)
    tps = tokens / span * units if span > 0 else float("inf")
    chips = config.chips
    usd_h, watts, no_price, no_power, _ = fleet_rates(config.chip_counts())
    mean_in, mean_out = workload.mean_lengths()
    seq = math.ceil(mean_in + (workload.max_output_tokens or mean_out))
    serving = priced[-1]
    prec0 = priced[0].precision
    missing = {}
    if usd_h is None:
        missing["cost_per_million_output_tokens"] = no_price
    if watts is None:
        missing["joules_per_output_token"] = no_power
    breakdown, bounds = _phases(priced, sim, mean_in, mean_out, config.engine)
    est = ServingEstimate(
        ttft=Latency(*percentiles(ttft)), tpot=Latency(*percentiles(tpot)) if tpot else Latency(0.0, 0.0, 0.0),
        e2e=Latency(*percentiles(e2e)), output_tokens_per_second=tps, output_tokens_per_second_per_chip=tps / chips,
        requests_per_second=n * units / span if span > 0 else float("inf"),
        max_concurrency=serving.kv.sequences(seq) * serving.pool.instances,
        kv_bytes_per_token=int(shape.kv_elements_per_token() * prec0.kv_bytes), fits=True,
        cost_per_million_output_tokens=(usd_h / 3600 / tps * 1e6) if usd_h is not None else None,
        joules_per_output_token=(watts / tps) if watts is not None else None,
        bound=bounds, breakdown=breakdown, parallel=_parallel_dict(config, priced),
        projected=any(devices.chip(p.pool.kind).projected for p in priced), missing=missing,
        kv_transfer=_transfer_latency(sim) if config.disaggregated else None,
        **_slo_fields(slo, ttft, tpot, reqs, span, units))
    return attach(est, model=shape.name, rack=spec.name, workload=workload, events=sim.events,
                  config=config, shape=shape, spec=spec, priced=priced,
                  rerun=lambda w: evaluate(shape, spec, config, w, slo=slo, record=False, priced=priced))


def _slo_fields(slo, ttft, tpot, reqs: Requests, span: float, units: int) -> dict:
    if slo is None:
        return {}
    n = len(reqs.inputs)
    ok = 0
    for i in range(n):
        t_ok = "ttft" not in slo or reqs.first[i] - reqs.arrival[i] <= slo["ttft"]
        p_ok = "tpot" not in slo or reqs.outputs[i] == 1 or \
            (reqs.finish[i] - reqs.first[i]) / (reqs.outputs[i] - 1) <= slo["tpot"]
        ok += t_ok and p_ok
    return {"goodput": ok * units / span if span > 0 else 0.0, "slo_attainment": ok / n}


def _transfer_latency(sim: Simulation) -> Latency | None:
    values = [e.duration for e in sim.events if e.name.startswith("KV ")]
    return Latency(*percentiles(values)) if values else None


def _phases(priced, sim: Simulation, mean_in: float, mean_out: float, engine: Engine):
    """Representative prefill and decode iterations, by part."""
    prefill_cost = priced[0].cost
    decode_cost = priced[-1].cost
    batch = max(1, round(sim.mean_decode_batch()))
    chunk = int(min(mean_in, engine.max_num_tokens)) or 1
    pre = prefill_cost.parts(chunk, chunk * (chunk + 1) / 2, 0, 0, 1)
    dec = decode_cost.parts(0, 0.0, batch, int(batch * (mean_in + mean_out / 2)), batch)
    breakdown = {"prefill": pre, "decode": dec}
    return breakdown, {phase: bound(parts) for phase, parts in breakdown.items()}


def _parallel_dict(config: Config, priced) -> dict:
    out: dict = {"precision": config.precision, "kernels": config.engine.kernels,
                 "max_batch": config.engine.batch_limit, "max_num_tokens": config.engine.max_num_tokens}
    for p in priced:
        entry = p.pool.as_dict()
        entry.update(weights_gb=round(p.kv.weights / 1e9, 2), kv_cache_gb=round(p.kv.kv / 1e9, 2),
                     precision=p.precision.name + (f" ({p.precision.block_format})" if p.precision.block_format
                                                   else ""))
        out[p.pool.role] = entry
    return out


def serving_whatif(model, rack, *, workload: Workload, parallel: dict | None = None, precision: str = "bfloat16",
                   prefill: dict | None = None, decode: dict | None = None, slo: dict | None = None,
                   search: bool = False, objective: str = "time", engine: Engine | None = None) -> ServingEstimate:
    """Model serving ``workload`` with ``model`` on ``rack`` (shape-only: nothing runs, nothing is allocated).

    ``model``: a preset name, a transformers model type, a transformers config or a module built on the
    meta device (dense, GQA, mixture of experts, sliding windows). ``rack``: a preset, a spec string
    (``"h100:8"``, ``"trn3-ultraserver*64"``) or a :class:`devices.RackSpec`. ``workload``: a
    :class:`Workload`. ``parallel``: ``dict(tp=, pp=, ep=, replicas=)`` for colocated serving (chips per
    replica = tp x pp x ep; default: every chip in replicas of the least parallel cut whose KV cache holds
    a batch). ``precision``: ``bfloat16``, ``fp8``, ``fp4`` (NVFP4 or MXFP4 per the kind's capability
    table) or ``float32``; refused where a kind lacks it. ``prefill``, ``decode``: disaggregated pools,
    ``dict(kind=, chips=, tp=, pp=, ep=)`` or ``dict(slots=[...], tp=)``. ``slo``:
    ``dict(ttft=s, tpot=s, attainment=0.9)``: goodput reported; with ``search=True`` the pools, their
    parallelism and the batch limit that give the most output tokens/s per chip (``objective="time"``)
    or per dollar (``objective="cost"``) within it. ``engine``: the engine's limits and kernels
    (:class:`planner.serving.engine.Engine`).
    """
    shape = model_shape(model)
    spec = spec_of(rack)
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: expected an interop.Workload(input_tokens, output_tokens, ...), "
                         f"got {workload!r}")
    engine = engine or Engine()
    if not isinstance(engine, Engine):
        raise ValueError(f"engine: expected a planner.serving.Engine, got {engine!r}")
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


__all__ = ["DEFAULT_ATTAINMENT", "MIN_SEQUENCES", "SLO_KEYS", "Config", "Priced", "auto_pools", "check_slo",
           "configure", "default_parallel", "evaluate", "least_parallel", "price_pool", "serving_whatif", "simulate"]
