"""The fastest homogeneous configuration that fits: a branch-and-bound walk of TP x PP x VP x CP x EP x microbatch x FSDP.

:func:`candidates` lists every configuration the model and the rack allow (TP
dividing the heads, the MLP width and every fast domain; PP x VP dividing the
layers, with or without the embedding and head counted; CP dividing the
sequence; EP dividing the experts; DP the largest count the chips and the
global batch allow). :func:`search` bounds each from below by its compute, drops
those whose weights and optimizer state alone overflow a chip, runs the step
model on the rest in order of the bound until the bound passes the fastest
fitting step found (a progress bar on a terminal), and keeps that step. :func:`advice` is what a
configuration that does not fit is told.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from planner.blocks import ModelBlocks
from planner.comm import CommPricer, pricer_for
from planner.parallel import Parallel
from planner.profile import Shard

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)
PP_LIMIT = 64
VP_DEGREES = (1, 2, 4, 8)
CP_DEGREES = (1, 2, 4, 8)
MICROBATCHES = (1, 2, 4)


@dataclass
class SearchResult:
    """What a search found (every figure modelled)."""

    best: Any = None
    """The fastest fitting :class:`~planner.estimate.StepEstimate`, or None."""
    evaluated: int = 0
    """Configurations the step model ran."""
    considered: int = 0
    """Configurations the search covered."""
    skipped: int = 0
    """Configurations dropped before the step model: weights and optimizer state alone overflow a chip."""
    pruned: int = 0
    """Configurations whose compute lower bound was no better than a fitting step already found."""
    rejected: list[tuple[dict, str]] = field(default_factory=list)
    """(configuration, reason) of candidates the step model refused."""
    ranking: list[tuple[float, bool, dict]] = field(default_factory=list)
    """(seconds, fits, configuration) of every evaluated candidate, fastest first."""
    smallest_need: int = 0
    """The least modelled memory per chip any evaluated configuration needed."""
    capacity: int = 0

    def message(self) -> str:
        """Why nothing was found."""
        if self.best is not None:
            return ""
        if not self.evaluated:
            reasons = "; ".join(sorted({r for _, r in self.rejected})[:3])
            return (f"search: no configuration of this model fits the rack's chips ({self.skipped} skipped for "
                    f"weights and optimizer state alone){': ' + reasons if reasons else ''}")
        return (f"search: none of {self.evaluated} configurations fits: the least memory any needs is "
                f"{self.smallest_need / 1e9:,.1f} GB per chip, the chips have {self.capacity / 1e9:,.1f} GB")


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidates(blocks: ModelBlocks, spec, *, global_batch: int, seq_len: int) -> list[Parallel]:
    """Every homogeneous configuration of ``blocks`` on ``spec`` (see the module doc)."""
    n = len(spec)
    domain = min(d.count for d in spec.domains)
    layers = len(blocks.layers)
    with_ends = len(blocks)
    pps = sorted(set(_divisors(layers, PP_LIMIT)) | set(_divisors(with_ends, PP_LIMIT)))
    experts = getattr(blocks, "experts", 0)
    out = []
    for tp in TP_DEGREES:
        if tp > domain or domain % tp:
            continue
        try:
            blocks.check_shard(Shard(seq_len=seq_len, tp=tp))
        except ValueError:
            continue
        for cp in CP_DEGREES:
            if seq_len % cp or (cp > 1 and seq_len // cp < 2048):
                continue
            for pp in pps:
                for vp in VP_DEGREES:
                    virtual = pp * vp
                    if vp > 1 and (pp == 1 or (layers % virtual and with_ends % virtual)):
                        continue
                    if layers % virtual and with_ends % virtual:
                        continue
                    cell = tp * cp * pp
                    if cell > n:
                        continue
                    for mbs in MICROBATCHES:
                        if global_batch % mbs:
                            continue
                        most = min(n // cell, global_batch // mbs)
                        dp = max((d for d in range(most, 0, -1) if (global_batch // mbs) % d == 0), default=0)
                        if not dp:
                            continue
                        if vp > 1 and (global_batch // (mbs * dp)) % pp:
                            continue  # the interleaved schedule needs microbatches in groups of pp
                        eps = [1] if not experts else [e for e in _divisors(experts, dp) if dp % e == 0]
                        for ep in eps:
                            for fsdp in (False, True):
                                if fsdp and dp == 1:
                                    continue
                                out.append(Parallel(tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, dp=dp, microbatch=mbs,
                                                    fsdp=fsdp))
    return out


def _static_bytes(blocks: ModelBlocks, par: Parallel, seq_len: int, optimizer: str) -> float:
    """Weights, gradients and optimizer state per chip on the most loaded stage (no activations)."""
    from planner.step import GRAD_DTYPES, OPTIMIZERS

    # The shard the step model will trace anyway (its parameter counts do not depend on the tokens).
    shard = Shard(microbatch=par.microbatch, seq_len=seq_len, tp=par.tp, cp=par.cp, ep=par.ep)
    per_block = [blocks.profile(i, shard) for i in range(len(blocks))]
    params = sum(p.params for p in per_block)
    _, master, state = OPTIMIZERS[optimizer]
    z, dp = par.zero_stage, par.dp or 1
    shard_of = {0: (1, 1, 1), 1: (1, 1, dp), 2: (1, dp, dp), 3: (dp, dp, dp)}[z]
    per_chip = params / par.pp * (2 / shard_of[0] + GRAD_DTYPES["bfloat16"] / shard_of[1]
                                  + (master + state) / shard_of[2])
    return per_chip


def compute_bound(blocks: ModelBlocks, par: Parallel, *, global_batch: int, seq_len: int, dtype: str,
                  kind: str) -> float:
    """A lower bound on the step time of ``par`` from compute alone (communication, recompute and waiting
    only add to it): every stage runs all its microbatches, and the last stage, whose first action is the
    first microbatch's forward, cannot start before that microbatch went forward through the stages
    before it."""
    from planner.block_pricing import Execution, block_cost
    from planner.parallel import split_layers

    shard = Shard(microbatch=par.microbatch, seq_len=seq_len, tp=par.tp, cp=par.cp, ep=par.ep)
    execution = Execution(dtype=dtype)
    costs = [block_cost(blocks.profile(i, shard), kind, execution) for i in range(len(blocks))]
    chunks = split_layers(blocks, par.pp * par.vp, what="pp" if par.vp == 1 else "vp")
    fwd = [sum(costs[i].forward for i in c) for c in chunks]   # virtual stage k = chunk c of stage k % pp
    both = [sum(costs[i].forward + costs[i].backward for i in c) for c in chunks]
    p = par.pp
    per_stage = [sum(both[k] for k in range(s, len(chunks), p)) for s in range(p)]
    microbatches = global_batch // (par.microbatch * (par.dp or 1))
    last = sum(fwd[k] for k in range(p - 1)) + microbatches * per_stage[p - 1]
    return max(max(per_stage) * microbatches, last)


def search(blocks: ModelBlocks, spec, *, global_batch: int, seq_len: int, dtype: str = "bfloat16",
           recompute: str = "auto", optimizer: str = "adamw", pricer: CommPricer | None = None,
           progress: bool | None = None, limit: int | None = None) -> SearchResult:
    """The fastest fitting configuration (see the module doc). ``progress``: None shows a bar on a terminal.

    Branch and bound: every candidate gets a compute lower bound (:func:`compute_bound`) and a memory
    check; they run through the step model in order of the bound, and those whose bound is no better than
    the fastest fitting step found are not run (``pruned``): the result is the one an exhaustive run
    through the step model would give."""
    from tqdm import tqdm

    from planner.estimate import estimate_from_result, run_config

    pricer = pricer or pricer_for(spec)
    found = SearchResult()
    cands = candidates(blocks, spec, global_batch=global_batch, seq_len=seq_len)
    if limit is not None:
        cands = cands[:limit]
    capacity = min(spec.slot(0).capacity, spec.slot(len(spec) - 1).capacity)
    found.capacity = capacity
    found.considered = len(cands)
    kind = spec.slot(0).kind
    best_seconds = float("inf")
    bar = tqdm(total=len(cands), desc=f"searching {blocks.name} on {spec.name}", unit="config",
               disable=(not progress) if progress is not None else None, leave=False)
    bounded = []
    for par in cands:
        if _static_bytes(blocks, par, seq_len, optimizer) > capacity:
            found.skipped += 1
            bar.update()
            continue
        try:
            bound = compute_bound(blocks, par, global_batch=global_batch, seq_len=seq_len, dtype=dtype, kind=kind)
        except ValueError as error:
            found.rejected.append((par.as_dict(), str(error)))
            bar.update()
            continue
        bounded.append((bound, par))
    bounded.sort(key=lambda bp: bp[0])
    for bound, par in bounded:
        bar.update()
        if bound >= best_seconds:
            found.pruned += 1
            continue
        try:
            result, used = run_config(blocks, spec, par, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                                      recompute=recompute, optimizer=optimizer, pricer=pricer)
        except ValueError as error:
            found.rejected.append((par.as_dict(), str(error)))
            continue
        found.evaluated += 1
        fits = all(s.memory.fits for s in result.stages)
        need = max(s.memory.total for s in result.stages)
        found.smallest_need = need if not found.smallest_need else min(found.smallest_need, need)
        found.ranking.append((result.seconds, fits, used))
        if fits and result.seconds < best_seconds:
            best_seconds = result.seconds
            found.best = estimate_from_result(result, spec, used, dtype=dtype, model=blocks.name)
            found.best.__dict__.update(_blocks=blocks, _spec=spec, _parallel_obj=par, _recompute=recompute)
            bar.set_postfix_str(f"best {best_seconds:.3f} s/step (modelled)")
    bar.close()
    found.ranking.sort(key=lambda r: r[0])
    return found


DEFAULT_HEADROOM = 0.6
"""parallel=None keeps weights, gradients and optimizer state under this share of a chip's memory."""


def default_parallel(blocks: ModelBlocks, spec, *, global_batch: int, seq_len: int, optimizer: str) -> Parallel:
    """A configuration without searching: of the plain ones (ZeRO-1, no CP/VP/EP, microbatch 1) whose
    weights, gradients and optimizer state leave room for activations and whose pipeline gets at least
    twice as many microbatches as stages, the one using the most chips, then the least model parallel."""
    capacity = min(spec.slot(0).capacity, spec.slot(len(spec) - 1).capacity)
    plain = [c for c in candidates(blocks, spec, global_batch=global_batch, seq_len=seq_len)
             if c.cp == 1 and c.vp == 1 and c.ep == 1 and c.microbatch == 1 and not c.fsdp]
    if not plain:
        raise ValueError(f"parallel: no configuration of {blocks.name} divides {spec.name} with a global batch of "
                         f"{global_batch}")

    def rank(c: Parallel):
        microbatches = global_batch // (c.microbatch * c.dp)
        return (microbatches >= 2 * c.pp or c.pp == 1, c.dp * c.tp * c.pp, -c.tp * c.pp, -c.pp)

    fitting = [c for c in plain if _static_bytes(blocks, c, seq_len, optimizer) <= DEFAULT_HEADROOM * capacity]
    return max(fitting or plain, key=rank)


def advice(blocks: ModelBlocks, spec, est, *, global_batch: int, seq_len: int, dtype: str, optimizer: str,
           pricer: CommPricer | None = None) -> str:
    """For an estimate that does not fit: the memory it needs per chip and the largest fitting alternative."""
    mem = est.memory_per_chip
    text = (f"needs {mem.total / 1e9:,.1f} GB per chip (weights {mem.weights / 1e9:,.1f}, gradients "
            f"{mem.gradients / 1e9:,.1f}, optimizer {mem.optimizer / 1e9:,.1f}, activations "
            f"{mem.activations / 1e9:,.1f}) of {mem.capacity / 1e9:,.1f} GB")
    found = search(blocks, spec, global_batch=global_batch, seq_len=seq_len, dtype=dtype, recompute="auto",
                   optimizer=optimizer, pricer=pricer, progress=False)
    if found.best is not None:
        from planner.report import configuration

        return text + (f"; the fastest configuration that fits: {configuration(found.best.parallel)} "
                       f"({found.best.seconds:,.3f} s/step modelled)")
    text += f"; {found.message().removeprefix('search: ')}"
    smaller = largest_fitting_preset(spec, seq_len=seq_len, optimizer=optimizer, below=blocks.parameters())
    if smaller:
        text += f"; the largest preset that fits these {len(spec):,} chips (fully sharded): {smaller}"
    return text


def largest_fitting_preset(spec, *, seq_len: int, optimizer: str, below: int) -> str | None:
    """The largest preset model, smaller than ``below`` parameters, whose weights, gradients and optimizer
    state fully sharded over the whole rack leave room for activations (None when none does)."""
    from planner.model_presets import model_blocks, model_presets
    from planner.step import GRAD_DTYPES, OPTIMIZERS

    capacity = min(spec.slot(0).capacity, spec.slot(len(spec) - 1).capacity)
    _, master, state = OPTIMIZERS[optimizer]
    best = None
    for name in model_presets():
        params = model_blocks(name).parameters()
        per_chip = params * (2 + GRAD_DTYPES["bfloat16"] + master + state) / len(spec)
        if params < below and per_chip <= DEFAULT_HEADROOM * capacity and (best is None or params > best[1]):
            best = (name, params)
    return best[0] if best else None


__all__ = ["DEFAULT_HEADROOM", "SearchResult", "compute_bound", "advice", "candidates", "default_parallel", "largest_fitting_preset",
           "search"]
