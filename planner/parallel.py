"""A homogeneous parallel configuration (Megatron's TP x CP x DP x PP, VP, EP, FSDP) and its stages.

:class:`Parallel` is the ``parallel=`` dict of :func:`interop.whatif`, checked;
:func:`uniform_stages` lays it on a rack: ranks ordered tensor-fastest
(``tp-cp-dp-pp``, Megatron's default, so that TP stays inside a fast domain and
DP and PP cross it; ``tp-cp-pp-dp`` keeps a pipeline inside a domain
instead), layers split evenly over ``pp * vp`` virtual stages with the
embedding on the first and the head on the last (counted as one layer each
when that is what makes the split even, as Megatron's
``account_for_embedding_in_pipeline_split`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, Mapping

from planner.blocks import ModelBlocks
from planner.stage import SlotGrid, Stage, kind_slots

ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp")
"""Accepted rank orders (fastest-varying dimension first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Parallel:
    """A homogeneous parallel configuration (the keys of ``parallel=``)."""

    tp: int = 1
    """Tensor-parallel degree (with sequence parallelism), inside a fast domain."""
    pp: int = 1
    """Pipeline stages."""
    cp: int = 1
    """Context-parallel degree (the sequence split over a ring)."""
    ep: int = 1
    """Expert-parallel degree (MoE experts split over data-parallel replicas; all_to_all)."""
    vp: int = 1
    """Virtual pipeline chunks per stage (interleaved 1F1B when > 1)."""
    dp: int | None = None
    """Data-parallel replicas (None: as many as the chips left over allow)."""
    fsdp: bool = False
    """Shard parameters, gradients and optimizer state over data parallel (FSDP / ZeRO-3)."""
    zero: int | None = None
    """ZeRO stage 0-3 (None: 3 with fsdp, else 1 as Megatron's distributed optimizer)."""
    microbatch: int = 1
    """Samples per microbatch on one replica; gradient accumulation follows from the global batch."""
    order: str = "tp-cp-dp-pp"
    """Rank order on the rack (see :data:`ORDERS`)."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "ep", "vp", "microbatch"):
            _positive(getattr(self, name), name)
        if self.dp is not None:
            _positive(self.dp, "dp")
        if not isinstance(self.fsdp, bool):
            raise ValueError(f"fsdp: expected True or False, got {self.fsdp!r}")
        if self.zero is not None and self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero: expected 0, 1, 2 or 3, got {self.zero!r}")
        if self.fsdp and self.zero not in (None, 3):
            raise ValueError(f"zero: fsdp shards like ZeRO-3; zero={self.zero} contradicts fsdp=True")
        if self.order not in ORDERS:
            raise ValueError(f"order: unknown rank order {self.order!r}; accepted: {', '.join(ORDERS)}")

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage in effect."""
        return 3 if self.fsdp else (1 if self.zero is None else self.zero)

    @property
    def schedule(self) -> str:
        """The pipeline schedule: interleaved 1F1B with vp > 1, else 1F1B."""
        return "interleaved" if self.vp > 1 else "1f1b"

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> Parallel:
        """From a ``parallel=`` dict; ValueError naming an unknown key and listing the accepted ones."""
        if mapping is None:
            return cls()
        if isinstance(mapping, Parallel):
            return mapping
        if not isinstance(mapping, Mapping):
            raise ValueError(f"parallel: expected a dict of {', '.join(f.name for f in fields(cls))} or "
                             f"'search', got {mapping!r}")
        names = {f.name for f in fields(cls)}
        for key in mapping:
            if key not in names:
                raise ValueError(f"parallel: unknown key {key!r}; accepted: {', '.join(sorted(names))}")
        return cls(**dict(mapping))

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a plain dict (dp filled in by :func:`uniform_stages`' caller)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def divisors(n: int, limit: int | None = None) -> list[int]:
    """The divisors of ``n`` (a positive integer), ascending, those above ``limit`` left out.

    From ``n``'s prime factors (trial division up to its square root, stopping once the rest is prime), so a
    global batch of 10^12 samples costs what 2,048 does, not a loop over every count below it."""
    return [d for d in _divisors(n) if limit is None or d <= limit]


@lru_cache(maxsize=1024)
def _divisors(n: int) -> tuple[int, ...]:
    # A search asks for the divisors of the same few counts for each of its hundreds of candidates.
    factors: dict[int, int] = {}
    rest, p = n, 2
    while p * p <= rest:
        while rest % p == 0:
            factors[p] = factors.get(p, 0) + 1
            rest //= p
        p += 1 if p == 2 else 2
    if rest > 1:
        factors[rest] = factors.get(rest, 0) + 1
    out = [1]
    for prime, power in factors.items():
        out = [d * prime ** k for d in out for k in range(power + 1)]
    return tuple(sorted(out))


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` not above ``limit`` (0 when ``limit`` < 1)."""
    found = divisors(n, limit) if limit >= 1 else []
    return found[-1] if found else 0


def split_layers(blocks: ModelBlocks, virtual: int, *, what: str = "pp") -> list[range]:
    """Block ranges of ``virtual`` even pipeline chunks (see the module doc), in virtual-stage order."""
    n = len(blocks)
    layers = blocks.layers
    first, last = layers.start, layers.stop  # blocks before / after the repeated layers
    count = len(layers)
    if count % virtual == 0:
        per = count // virtual
        bounds = [0] + [first + per * k for k in range(1, virtual)] + [n]
    elif (count + first + (n - last)) % virtual == 0:
        per = (count + first + (n - last)) // virtual
        bounds = [0] + [per * k for k in range(1, virtual)] + [n]
    else:
        fits = [d for d in divisors(count)] + [d for d in divisors(count + first + n - last) if d not in
                                               divisors(count)]
        raise ValueError(f"{what}: {virtual} pipeline chunks do not divide the {count} layers of {blocks.name} "
                         f"(nor {count + first + n - last} counting the embedding and head as layers); "
                         f"chunk counts that do: {', '.join(map(str, sorted(set(fits))))}")
    return [range(bounds[k], bounds[k + 1]) for k in range(virtual)]


def uniform_stages(blocks: ModelBlocks, spec, parallel: Parallel) -> tuple[list[Stage], Parallel, int]:
    """Stages of a homogeneous configuration on ``spec``: (stages, the configuration with dp set, idle chips)."""
    from planner.profile import Shard

    counts = spec.counts()
    n = len(spec)
    tp, cp, pp, vp = parallel.tp, parallel.cp, parallel.pp, parallel.vp
    blocks.check_shard(Shard(seq_len=cp, tp=tp, cp=cp, ep=parallel.ep))  # the model first: heads, widths, experts
    cell = tp * cp * pp
    if cell > n:
        raise ValueError(f"parallel: tp*cp*pp = {tp}*{cp}*{pp} = {cell} chips exceeds the rack's {n}")
    dp = parallel.dp if parallel.dp is not None else n // cell
    used = cell * dp
    if used > n:
        raise ValueError(f"dp: tp*cp*pp*dp = {cell}*{dp} = {used} chips exceeds the rack's {n} "
                         f"(at most dp={n // cell})")
    kinds = {spec.slot(0).kind, spec.slot(used - 1).kind}
    if len(counts) > 1:
        kinds = {spec.slot(i).kind for i in range(0, used, max(1, used // 64))} | kinds
    if len(kinds) > 1:
        raise ValueError(f"parallel: a homogeneous configuration needs one chip kind, but the rack mixes "
                         f"{', '.join(sorted(counts))}; give stages per kind (planner.step_model) or "
                         f"parallel='search'")
    for run in spec.domains.runs:  # a run's domains are copies of its first: one check per run
        domain = run.domain
        if domain.count % tp:
            raise ValueError(f"tp: tensor parallelism {tp} does not divide the {domain.count}-slot "
                             f"{domain.fabric} domain {domain.name!r}: TP groups would cross the network")
    if parallel.ep > dp:
        raise ValueError(f"ep: expert parallelism {parallel.ep} exceeds the {dp} data-parallel replicas")
    if dp % parallel.ep:
        raise ValueError(f"ep: expert parallelism {parallel.ep} does not divide the {dp} data-parallel replicas")
    chunks = split_layers(blocks, pp * vp, what="pp" if vp == 1 else "vp")
    kind = kinds.pop()
    stages = []
    for s in range(pp):
        if parallel.order == "tp-cp-dp-pp":
            grid = SlotGrid(s * tp * cp * dp, tp, cp, dp, 1, tp, tp * cp)
        else:
            grid = SlotGrid(s * tp * cp, tp, cp, dp, 1, tp, tp * cp * pp)
        stages.append(Stage(chunks=tuple(chunks[c * pp + s] for c in range(vp)), kind=kind, slots=grid,
                            tp=tp, cp=cp, ep=parallel.ep))
    return stages, replace(parallel, dp=dp), n - used


def kind_stages(blocks: ModelBlocks, spec, parallel: Parallel, *, seq_len: int, precision: str = "bfloat16"
                ) -> list[Stage]:
    """One pipeline stage per chip kind of a mixed rack, layers split in proportion to each kind's
    modelled throughput (its chips over its per-layer time): a baseline heterogeneous plan.

    The planner (``interop.plan``) searches uneven splits, per-stage degrees and placements; this is the
    even-handed split a what-if on a mixed rack starts from. ``parallel.tp`` and ``cp`` apply to every
    stage (each kind's fast domains must hold whole TP groups).
    """
    from planner.block_pricing import Execution, block_cost
    from planner.kernels import calibrated
    from planner.profile import Shard

    tp, cp = parallel.tp, parallel.cp
    runs = kind_slots(spec, range(len(spec)))  # ranges or runs: nothing per slot
    for run in spec.domains.runs:  # a run's domains are copies of its first: one check per run
        domain = run.domain
        if domain.count % tp:
            raise ValueError(f"tp: tensor parallelism {tp} does not divide the {domain.count}-slot {domain.fabric} "
                             f"domain {domain.name!r}")
    kinds = list(runs)
    layer = blocks.layers.start
    rates = []
    for kind in kinds:
        slots = runs[kind]
        dp = len(slots) // (tp * cp)
        if dp < 1:
            raise ValueError(f"tp: tp*cp = {tp * cp} exceeds the {len(slots)} {kind} slots")
        cost = block_cost(blocks.profile(layer, Shard(seq_len=seq_len, tp=tp, cp=cp)), kind,
                          Execution(precision=precision, calibrated=calibrated(blocks)))
        rates.append(dp / (cost.forward + cost.backward))
    count = len(blocks.layers)
    if count < len(kinds):
        raise ValueError(f"pp: {len(kinds)} kinds need at least as many layers; {blocks.name} has {count}")
    share = [max(1, round(count * r / sum(rates))) for r in rates]
    while sum(share) > count:
        share[share.index(max(share))] -= 1
    while sum(share) < count:
        share[share.index(min(share))] += 1
    stages, start = [], 0
    for k, kind in enumerate(kinds):
        stop = len(blocks) if k == len(kinds) - 1 else blocks.layers.start + sum(share[:k + 1])
        slots = runs[kind]
        used = (len(slots) // (tp * cp)) * tp * cp
        stages.append(Stage(chunks=(range(start, stop),), kind=kind, slots=slots if used == len(slots) else slots[:used],
                            tp=tp, cp=cp))
        start = stop
    return stages


__all__ = ["ORDERS", "Parallel", "divisors", "kind_stages", "largest_divisor", "split_layers", "uniform_stages"]
