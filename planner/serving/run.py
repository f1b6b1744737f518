"""Running a serving configuration: the simulation of its instances, and the estimate it gives.

:func:`simulate` lays a :class:`~planner.serving.config.Config` out as instances of
:class:`planner.serving.simulation.Simulation` (identical replicas, or identical prefill/decode units, simulated
once with their share of the requests) with the KV transfer between pools priced by the collectives' transfer
model on the route; :func:`evaluate` turns the requests' times into a
:class:`~planner.serving.estimate.ServingEstimate`.
"""

from __future__ import annotations

import math

import collectives
import devices
from planner.serving.config import Config, Priced, price_pool
from planner.serving.economics import fleet_rates
from planner.serving.engine import Engine
from planner.serving.estimate import Latency, ServingEstimate, attach
from planner.serving.grid import Grid
from planner.serving.iteration import bound
from planner.serving.model_shape import ModelShape
from planner.serving.simulation import Requests, Simulation, percentiles
from planner.serving.workload import Workload


SLO_KEYS = ("ttft", "tpot", "attainment")
"""Keys of ``slo=``: TTFT and TPOT limits in seconds, and the share of requests that must meet both
(default :data:`DEFAULT_ATTAINMENT`)."""


DEFAULT_ATTAINMENT = 0.9
"""Share of requests within the SLO for a configuration to meet it (DistServe's 90 %)."""


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


def _limits(engine: Engine, pool, *, prompts: bool = True) -> dict:
    """An instance's scheduling limits: the engine's per rank. With ``ep`` ranks attention is data parallel and
    each rank schedules its own sequences (TensorRT-LLM's ``max_batch_size`` and ``max_num_tokens`` with attention
    DP, vLLM's per data-parallel engine), so the instance holds ``ep`` times the engine's batch and token budget."""
    ranks = pool.ep
    out = {"max_batch": engine.batch_limit * ranks, "budget": engine.max_num_tokens * ranks,
           "chunked": engine.chunked_prefill}
    if prompts:
        out["max_prompts"] = None if engine.prefill_requests is None else engine.prefill_requests * ranks
    return out


def simulate(shape: ModelShape, spec, config: Config, workload: Workload, *, record: bool = True,
             calibrated: bool = True, priced: tuple[Priced, ...] | None = None):
    """Run the simulation of ``config``; returns (Requests, Simulation, priced pools, units simulated)."""
    engine = config.engine
    if priced is None:
        names = ("parallel",) if not config.disaggregated else ("prefill", "decode")
        priced = tuple(price_pool(shape, spec, p, config.precision, engine, workload, name=n, calibrated=calibrated)
                       for p, n in zip(config.pools, names))
    if config.disaggregated:
        pre, dec = priced
        units = math.gcd(pre.pool.instances, dec.pool.instances)
        share = workload.split(units)
        reqs = _requests(share)
        sim = Simulation(reqs, concurrency=share.concurrency, record=record)
        for i in range(pre.pool.instances // units):
            sim.add(f"prefill {i} ({pre.pool.kind})", "prefill", pre.cost, capacity=pre.kv.kv * pre.kv.ranks,
                    need=lambda r, kv=pre.kv: kv.sequence_bytes(reqs.inputs[r]), **_limits(engine, pre.pool))
        for j in range(dec.pool.instances // units):
            sim.add(f"decode {j} ({dec.pool.kind})", "decode", dec.cost, capacity=dec.kv.kv * dec.kv.ranks,
                    need=lambda r, kv=dec.kv: kv.sequence_bytes(reqs.inputs[r] + share.reserved(reqs.outputs[r])),
                    **_limits(engine, dec.pool, prompts=False))
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
                **_limits(engine, col.pool))
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
    length = int(mean_in + mean_out / 2)
    # a cost that prices local-attention layers is given their keys (a decode token at the mean length)
    pre_local = {"local_pairs": prefill_cost.shape.local_pairs(chunk, 0)} \
        if getattr(prefill_cost, "prefill_local", False) else {}
    dec_local = {"local_kv": batch * decode_cost.shape.local_keys(length)} if getattr(decode_cost, "local", None) \
        else {}
    pre = prefill_cost.parts(chunk, chunk * (chunk + 1) / 2, 0, 0, 1, **pre_local)
    dec = decode_cost.parts(0, 0.0, batch, int(batch * (mean_in + mean_out / 2)), batch, **dec_local)
    breakdown = {"prefill": pre, "decode": dec}
    return breakdown, {phase: bound(parts) for phase, parts in breakdown.items()}


def _parallel_dict(config: Config, priced) -> dict:
    out: dict = {"precision": config.precision, "kernels": config.engine.kernels,
                 "max_batch": config.engine.batch_limit, "max_num_tokens": config.engine.max_num_tokens,
                 "nxd_inference": sorted({p.pool.kind for p in priced if config.engine.nxd_for(p.pool.kind)}),
                 "static_decode": config.engine.static_decode, "host_per_token": config.engine.host_per_token}
    for p in priced:
        entry = p.pool.as_dict()
        entry.update(weights_gb=round(p.kv.weights / 1e9, 2), kv_cache_gb=round(p.kv.kv / 1e9, 2),
                     precision=p.precision.describe())
        out[p.pool.role] = entry
    return out


__all__ = ["DEFAULT_ATTAINMENT", "SLO_KEYS", "check_slo", "evaluate", "simulate"]
