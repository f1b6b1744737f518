"""The SLO search: the pools, their parallelism and the batch limit that serve a workload best within an objective.

Candidates: on a rack of one kind, colocated replicas at every tensor-parallel degree
inside a scale-up domain (and pipeline stages where tensor parallelism alone does not
fit), fewer replicas when requests arrive at a rate (idle chips are not counted), and
prefill/decode splits of the chips at several ratios; on a rack mixing kinds, every
assignment of two kinds to the two pools, each at its feasible tensor-parallel degrees.
Every candidate also tries batch limits below the engine's. Each is screened on the first
:data:`SCREEN_REQUESTS` requests; the :data:`FINALISTS` best that meet the SLO are run on
the whole workload, and the best of those is returned (``objective="time"``: output
tokens/s per chip; ``"cost"``: output tokens per dollar at catalogue prices). A progress
bar shows on a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import devices
from planner.serving.engine import Engine
from planner.serving.estimate import ServingEstimate, attach
from planner.serving.model_shape import ModelShape
from planner.serving.pools import Pool
from planner.serving.config import Config, domain_size, kind_domain, price_pool
from planner.serving.run import DEFAULT_ATTAINMENT, evaluate
from planner.serving.workload import Workload

SCREEN_REQUESTS = 256
"""Requests each candidate is screened on."""

FINALISTS = 3
"""Candidates run on the whole workload after screening."""

BATCH_LIMITS = (16, 64, 256)
"""Batch limits tried below the engine's own (a lower limit trades throughput for TPOT)."""

SPLITS = (0.125, 0.25, 0.5, 0.75)
"""Shares of a one-kind rack's chips given to the prefill pool in disaggregated candidates."""


@dataclass
class ServingSearch:
    """What the search tried and found."""

    objective: str
    slo: dict | None
    considered: int = 0
    screened: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """(configuration, why it could not run)."""
    missed: list[tuple[str, float]] = field(default_factory=list)
    """(configuration, share of requests within the SLO) of those that missed it."""
    ranked: list[tuple[str, float]] = field(default_factory=list)
    """(configuration, objective) of the finalists, best first."""
    best: ServingEstimate | None = None

    def summary(self) -> str:
        unit = "output tokens/s per chip" if self.objective == "time" else "output tokens per $"
        lines = [f"search: {self.considered} configurations, {self.screened} screened, {len(self.rejected)} do not "
                 f"fit, {len(self.missed)} miss the SLO" + (f" {self.slo}" if self.slo else "")]
        for label, value in self.ranked:
            lines.append(f"  {value:,.1f} {unit}: {label}")
        return "\n".join(lines)


def _label(config: Config) -> str:
    parts = []
    for p in config.pools:
        cut = " x ".join(f"{k} {v}" for k, v in (("tp", p.tp), ("pp", p.pp), ("ep", p.ep)) if v > 1) or "1 chip"
        parts.append(f"{p.role} {p.chips} {p.kind} as {p.instances} x ({cut})")
    return "; ".join(parts) + f"; batch <= {config.engine.batch_limit}"


def _objective(est: ServingEstimate, objective: str) -> float:
    if objective == "time":
        return est.output_tokens_per_second_per_chip
    cost = est.cost_per_million_output_tokens
    return 1e6 / cost if cost else 0.0


def _degrees(shape: ModelShape, domain: int) -> list[int]:
    return [tp for tp in shape.tp_choices(limit=max(1, domain))]


def candidates(shape: ModelShape, spec, workload: Workload, precision: str, engine: Engine) -> list[Config]:
    """Every configuration the search considers (see the module doc)."""
    counts = spec.counts()
    out: list[Config] = []
    limits = sorted({engine.batch_limit} | {b for b in BATCH_LIMITS if b < engine.batch_limit}, reverse=True)
    engines = [replace(engine, max_batch=b) for b in limits]
    if len(counts) == 1:
        kind = next(iter(counts))
        total = len(spec)
        domain = min(domain_size(spec), total)
        for pp in (1, 2, 4):
            for tp in _degrees(shape, domain):
                per = tp * pp
                if per > total or pp > shape.layers:
                    continue
                most = total // per
                counts_r = [most] if workload.rate is None else sorted({most, max(1, most // 2), max(1, most // 4)})
                for replicas in counts_r:
                    for eng in engines:
                        out.append(Config((Pool("colocated", kind, range(replicas * per), tp, pp, 1),), precision,
                                          eng))
        for share in SPLITS:
            pre_chips = int(total * share)
            for tp_p in _degrees(shape, domain):
                for tp_d in _degrees(shape, domain):
                    pc = pre_chips // tp_p * tp_p
                    dc = (total - pre_chips) // tp_d * tp_d
                    if pc < tp_p or dc < tp_d:
                        continue
                    for eng in engines[:1]:
                        out.append(Config((Pool("prefill", kind, range(pc), tp_p),
                                           Pool("decode", kind, range(pre_chips, pre_chips + dc), tp_d)),
                                          precision, eng))
        return out
    from planner.serving.pools import _take

    kinds = list(counts)
    for pk in kinds:
        for dk in kinds:
            if pk == dk:
                continue
            for tp_p in _degrees(shape, kind_domain(spec, pk)):
                for tp_d in _degrees(shape, kind_domain(spec, dk)):
                    pc, dc = counts[pk] // tp_p * tp_p, counts[dk] // tp_d * tp_d
                    if not pc or not dc:
                        continue
                    for eng in engines:
                        out.append(Config((Pool("prefill", pk, _take(spec, pk, pc, ()), tp_p),
                                           Pool("decode", dk, _take(spec, dk, dc, ()), tp_d)), precision, eng))
    return out


def search_serving(shape: ModelShape, spec, *, workload: Workload, precision: str, slo: dict | None, engine: Engine,
                   objective: str = "time", prefill=None, decode=None, parallel=None,
                   progress: bool | None = None) -> ServingEstimate:
    """The best configuration within ``slo`` (see the module doc); ValueError when none meets it."""
    from tqdm import tqdm

    if prefill is not None or decode is not None or parallel is not None:
        raise ValueError("search: the search chooses the pools and their parallelism; drop parallel, prefill and "
                         "decode (or drop search=True)")
    if objective == "cost":
        missing = [k for k in spec.counts() if devices.chip(k).price_per_hour is None]
        if len(missing) == len(spec.counts()):
            raise ValueError(f"objective: 'cost' needs prices; the catalogue has none for {', '.join(missing)}")
    attainment = (slo or {}).get("attainment", DEFAULT_ATTAINMENT)
    found = ServingSearch(objective, slo)
    configs = candidates(shape, spec, workload, precision, engine)
    found.considered = len(configs)
    screen = workload if workload.requests <= SCREEN_REQUESTS else Workload(
        workload.request_lengths(SCREEN_REQUESTS), requests=SCREEN_REQUESTS,
        concurrency=workload.concurrency,
        rate=workload.rate, seed=workload.seed, max_output_tokens=workload.max_output_tokens)
    priced_cache: dict[tuple, object] = {}
    scored: list[tuple[float, Config, tuple]] = []
    bar = tqdm(total=len(configs), desc=f"searching {shape.name} on {spec.name}", unit="config",
               disable=(not progress) if progress is not None else None, leave=False)
    for config in configs:
        bar.update()
        try:
            priced = tuple(_priced(priced_cache, shape, spec, p, config, workload) for p in config.pools)
            est = evaluate(shape, spec, config, screen, slo=slo, record=False, priced=priced)
        except ValueError as error:
            found.rejected.append((_label(config), str(error)))
            continue
        found.screened += 1
        if slo is not None and est.slo_attainment < attainment:
            found.missed.append((_label(config), est.slo_attainment))
            continue
        scored.append((_objective(est, objective), config, priced))
    bar.close()
    if not scored:
        best_miss = max(found.missed, key=lambda m: m[1], default=None)
        hint = f"; closest: {best_miss[0]} with {best_miss[1]:.0%} of requests within it" if best_miss else ""
        raise ValueError(f"slo: no configuration of {shape.name} on {spec.name} meets {slo} for "
                         f"{attainment:.0%} of requests ({found.considered} tried, {len(found.rejected)} do not "
                         f"fit){hint}")
    scored.sort(key=lambda s: -s[0])
    finals = []
    for _, config, priced in scored[:FINALISTS]:
        est = evaluate(shape, spec, config, workload, slo=slo, priced=priced)
        if slo is None or est.slo_attainment >= attainment:
            finals.append((_objective(est, objective), config, est))
    if not finals:
        raise ValueError(f"slo: the screened configurations miss {slo} on the whole workload")
    finals.sort(key=lambda f: -f[0])
    found.ranked = [(_label(c), v) for v, c, _ in finals]
    found.best = finals[0][2]
    return attach(found.best, search=found)


def _priced(cache: dict, shape, spec, pool: Pool, config: Config, workload: Workload):
    key = (pool.role, pool.kind, len(pool.slots), pool.slots[0], pool.tp, pool.pp, pool.ep, config.engine.batch_limit)
    hit = cache.get(key)
    if hit is None:
        name = "parallel" if pool.role == "colocated" else pool.role
        hit = cache[key] = price_pool(shape, spec, pool, config.precision, config.engine, workload, name=name)
    return hit


__all__ = ["BATCH_LIMITS", "FINALISTS", "SCREEN_REQUESTS", "SPLITS", "ServingSearch", "candidates",
           "search_serving"]

