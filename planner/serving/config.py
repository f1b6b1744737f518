"""A serving configuration on a rack: its pools, each pool's precision, memory and iteration costs.

:class:`Config` is a colocated pool or a prefill and a decode pool (:mod:`planner.serving.pools`) with a
precision and an engine; :func:`configure` builds one from a what-if's arguments (or chooses one:
:func:`default_parallel` on a rack of one kind, :func:`auto_pools` on a rack mixing kinds);
:func:`price_pool` gives a pool its memory (:mod:`planner.serving.kv_cache`) and its iteration costs
(:mod:`planner.serving.iteration`, or :mod:`planner.serving.eager` for the eager engine), refusing what does not
fit with a ValueError that says what would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import devices
from devices.neuron import ranks_per_chip
from planner.comm import pricer_for
from planner.serving.engine import Engine
from planner.serving.fitted import serving_efficiency
from planner.serving.iteration import FusedCost, Placement
from planner.serving.kv_cache import KvCache, memory, model_bytes
from planner.serving.model_shape import ModelShape
from planner.serving.pools import Pool, colocated, disaggregated
from planner.serving.precision import Precision, resolve
from planner.serving.workload import Workload


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
    total = model_bytes(shape, resolve(precision, pool.kind)) / 1e9
    need = math.ceil(total * 1e9 / (kv.capacity * 0.9))
    return (f"{name}: {shape.name} in {precision} needs {gb:,.1f} GB of weights and {kv.activations / 1e9:,.1f} GB "
            f"of activations per chip at tp {pool.tp} x pp {pool.pp} x ep {pool.ep} ({per} chips per instance); "
            f"{pool.kind} holds {kv.capacity / 1e9:,.1f} GB. The weights ({total:,.1f} GB) need at least {need} "
            f"chips per instance (e.g. tp={_pow2_at_least(need)})")


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _check_static_decode(engine: Engine, pool: Pool, kv: KvCache, longest_prompt: int, name: str) -> None:
    """A static decode graph holds every prompt within its compiled length, and its whole cache in memory (the
    prompt alone is checked: a row that prices its prompts padded to a context-encoding bucket, as the Neuron rows
    do, states the padded length)."""
    length, batch = engine.static_decode, engine.batch_limit
    if longest_prompt > length:
        raise ValueError(f"{name}: static_decode: a prompt of {longest_prompt:,} tokens exceeds the {length:,} tokens "
                         f"the decode graph was compiled for")
    need = batch * kv.sequence_bytes(length)
    if need > kv.kv:
        raise ValueError(f"{name}: static_decode: the decode graph's cache, {batch:,} lines of {length:,} tokens, "
                         f"needs {need / 1e9:,.2f} GB per chip; {pool.kind} has {kv.kv / 1e9:,.2f} GB left after "
                         f"{kv.weights / 1e9:,.1f} GB of weights: compile fewer lines (max_batch) or a shorter length")


def price_pool(shape: ModelShape, spec, pool: Pool, precision: str, engine: Engine, workload: Workload, *,
               name: str, calibrated: bool = True) -> Priced:
    """A pool's memory and cost model; ValueError naming ``name`` when it cannot hold the model or a sequence."""
    if engine.head_padding:  # over the engine's ranks: a Trainium chip holds several NeuronCores
        ranks = ranks_per_chip(pool.kind) if devices.chip(pool.kind).family == "trainium" else 1
        shape = shape.padded(pool.tp * ranks)
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
        fit = kv.kv // max(1, kv.layer_bytes * (kv.full_layers + kv.local_layers))
        raise ValueError(f"{name}: one sequence of {longest:,} tokens needs {need / 1e9:,.2f} GB of KV cache per "
                         f"chip; {pool.kind} has {kv.kv / 1e9:,.2f} GB left after {kv.weights / 1e9:,.1f} GB of "
                         f"weights at tp {pool.tp} x pp {pool.pp}: at most about {fit:,} tokens fit; use more chips "
                         f"per instance (a larger tp or pp) or shorter sequences")
    if engine.static_decode is not None and pool.role != "prefill":
        _check_static_decode(engine, pool, kv, longest_in, name)
    placement = Placement(pool.instance(0), pool.tp, pool.ep, pool.pp)
    if engine.kernels == "eager":
        if shape.latent is not None:
            raise ValueError(f"kernels: the eager engine prices transformers' forward with a key/value cache of heads; "
                             f"{shape.name}'s multi-head latent attention (kv_lora_rank) caches one latent a token, "
                             f"which its cache geometry does not hold; give kernels='fused'")
        from planner.serving.eager import EagerCost

        cost = EagerCost(shape, pool.kind, prec, placement, spec)
    else:
        nxd = engine.nxd_for(pool.kind)
        cost = FusedCost(shape, pool.kind, prec, placement, pricer_for(spec),
                         serving_efficiency(pool.kind, nxd_inference=nxd), calibrated=calibrated,
                         local_cache=engine.local_cache, nxd_inference=nxd, host_per_token=engine.host_per_token,
                         static_decode=(None if engine.static_decode is None
                                        else (engine.batch_limit, engine.static_decode)))
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
    total = model_bytes(shape, resolve(precision, kind))
    return ValueError(f"model: {shape.name} in {precision} needs {total / 1e9:,.1f} GB of weights; {kind} holds "
                      f"{chip.hbm_capacity.value / 1e9:,.1f} GB per chip, so one instance needs at least "
                      f"{math.ceil(total / (0.9 * chip.hbm_capacity.value))} chips with room for a KV cache "
                      f"({total / chips / 1e9:,.2f} GB of weights per chip over all {chips:,} {kind} of {where}); "
                      f"no tp x pp there fits it")


def default_parallel(shape: ModelShape, spec, precision: str, engine: Engine, workload: Workload) -> dict:
    """Colocated replicas of :func:`least_parallel`; ValueError with the memory the model needs per chip when
    none fits the rack."""
    kind = next(iter(spec.counts()))
    found = least_parallel(shape, kind, len(spec), domain_size(spec), precision, engine, workload)
    if found is None:
        raise _fits_nowhere(shape, kind, precision, len(spec), spec.name)
    return {"tp": found[0], "pp": found[1]}


def _runs(precision: str, kind: str) -> bool:
    try:
        resolve(precision, kind)
    except ValueError:
        return False
    return True


def auto_pools(shape: ModelShape, spec, precision: str, engine: Engine, workload: Workload) -> tuple[dict, dict]:
    """Disaggregated pools on a rack mixing kinds: prompts on the kind with the highest peak in the precision
    (prefill is compute-bound), decode on the kind with the most memory bandwidth among the others (decode
    streams weights and KV cache), every chip of each kind, each at :func:`least_parallel`."""
    counts = spec.counts()
    usable = [k for k in counts if _runs(precision, k)]
    if len(usable) < 2:
        raise ValueError(f"precision: {precision} runs on {', '.join(usable) or 'none'} of {', '.join(counts)}; "
                         f"disaggregated pools need two kinds that run it (or give prefill= and decode=)")
    prefill_kind = max(usable, key=lambda k: devices.chip(k).peak_for(resolve(precision, k).peak_key).value)
    decode_kind = max((k for k in usable if k != prefill_kind), key=lambda k: devices.chip(k).hbm_bandwidth.value)
    pools = []
    for kind, role in ((prefill_kind, "prefill"), (decode_kind, "decode")):
        domain = max(1, min(kind_domain(spec, kind), counts[kind]))
        found = least_parallel(shape, kind, counts[kind], domain, precision, engine, workload, role)
        if found is None:
            raise _fits_nowhere(shape, kind, precision, counts[kind], spec.name)
        tp, pp = found
        pools.append(dict(kind=kind, chips=counts[kind] // (tp * pp) * tp * pp, tp=tp, pp=pp))
    return pools[0], pools[1]


def domain_size(spec) -> int:
    """Chips in the rack's first scale-up domain (where tensor parallelism stays)."""
    d = spec.domain_of(0)
    return d.stop - d.first


def kind_domain(spec, kind: str) -> int:
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


__all__ = ["MIN_SEQUENCES", "Config", "Priced", "auto_pools", "configure", "default_parallel", "domain_size",
           "kind_domain", "least_parallel", "price_pool", "spec_of"]
