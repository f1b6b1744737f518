"""The fastest homogeneous configuration that fits: a branch-and-bound walk of TP x PP x VP x CP x EP x microbatch x FSDP.

:func:`candidates` lists every configuration the model and the rack allow (TP
dividing the heads, the MLP width and every fast domain; PP x VP dividing the
layers, with or without the embedding and head counted; CP dividing the
sequence; EP dividing the experts; DP the largest count the chips and the
global batch allow). :func:`search` bounds each from below by its compute, drops
those whose weights and optimizer state alone overflow a chip, and hands the rest
to :func:`~planner.bound_search.branch_and_bound`, which runs the step model on them
in order of the bound until the bound passes the fastest fitting step found (a
progress bar on a terminal, :mod:`planner.progress`). :func:`advice` is what a
configuration that does not fit is told.
"""

from __future__ import annotations

from planner.blocks import ModelBlocks
from planner.bound_search import Outcome, SearchStats, branch_and_bound
from planner.comm import CommPricer, pricer_for
from planner.optimizers import GRAD_DTYPES, OPTIMIZERS
from planner.parallel import Parallel, divisors, largest_divisor
from planner.profile import Shard
from planner.progress import reporter

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)
PP_LIMIT = 64
VP_DEGREES = (1, 2, 4, 8)
CP_DEGREES = (1, 2, 4, 8)
MICROBATCHES = (1, 2, 4)


def candidates(blocks: ModelBlocks, spec, *, global_batch: int, seq_len: int, tp=TP_DEGREES, cp=CP_DEGREES,
               vp=VP_DEGREES, microbatch=MICROBATCHES, fsdp=(False, True), ep: bool = True) -> list[Parallel]:
    """Every homogeneous configuration of ``blocks`` on ``spec`` (see the module doc), of the degrees given
    (``ep=False``: experts not split)."""
    n = len(spec)
    sizes = {run.domain.count for run in spec.domains.runs}  # a TP group stays inside every domain
    domain = min(sizes)
    layers = len(blocks.layers)
    with_ends = len(blocks)
    pps = sorted(set(divisors(layers, PP_LIMIT)) | set(divisors(with_ends, PP_LIMIT)))
    experts = getattr(blocks, "experts", 0) if ep else 0
    tps, cps, vps, mbss, fsdps = tp, cp, vp, microbatch, fsdp
    out = []
    for tp in tps:
        if tp > domain or any(size % tp for size in sizes):
            continue
        try:
            blocks.check_shard(Shard(seq_len=seq_len, tp=tp))
        except ValueError:
            continue
        for cp in cps:
            if seq_len % cp or (cp > 1 and seq_len // cp < 2048):
                continue
            for pp in pps:
                for vp in vps:
                    virtual = pp * vp
                    if vp > 1 and (pp == 1 or (layers % virtual and with_ends % virtual)):
                        continue
                    if layers % virtual and with_ends % virtual:
                        continue
                    cell = tp * cp * pp
                    if cell > n:
                        continue
                    for mbs in mbss:
                        if global_batch % mbs:
                            continue
                        dp = largest_divisor(global_batch // mbs, n // cell)
                        if not dp:
                            continue
                        if vp > 1 and (global_batch // (mbs * dp)) % pp:
                            continue  # the interleaved schedule needs microbatches in groups of pp
                        eps = [1] if not experts else [e for e in divisors(experts, dp) if dp % e == 0]
                        for ep in eps:
                            for fsdp in fsdps:
                                if fsdp and dp == 1:
                                    continue
                                out.append(Parallel(tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, dp=dp, microbatch=mbs,
                                                    fsdp=fsdp))
    return out


_TOTALS: dict[tuple, tuple[ModelBlocks, object]] = {}


def _per_shard(blocks: ModelBlocks, key: tuple, make):
    """``make()`` once per (blocks, key): sums over every block of a shard, asked for by many candidates."""
    full = (id(blocks),) + key
    hit = _TOTALS.get(full)
    if hit is None or hit[0] is not blocks:
        if len(_TOTALS) > 4096:
            _TOTALS.clear()
        hit = _TOTALS[full] = (blocks, make())
    return hit[1]


def _shard(par: Parallel, seq_len: int) -> Shard:
    """The shard the step model traces for ``par`` (its parameter counts do not depend on the tokens)."""
    return Shard(microbatch=par.microbatch, seq_len=seq_len, tp=par.tp, cp=par.cp, ep=par.ep)


def block_times(blocks: ModelBlocks, shard: Shard, kind: str, precision: str) -> tuple[list[float], list[float]]:
    """Prefix sums of every block's forward and backward compute seconds on ``kind`` (modelled), per shard."""
    from planner.block_pricing import Execution, block_cost
    from planner.kernels import calibrated

    def make():
        execution = Execution(precision=precision, calibrated=calibrated(blocks))
        f, b = [0.0], [0.0]
        for i in range(len(blocks)):
            c = block_cost(blocks.profile(i, shard), kind, execution)
            f.append(f[-1] + c.forward)
            b.append(b[-1] + c.backward)
        return f, b

    return _per_shard(blocks, ("times", shard, kind, precision), make)


def _static_bytes(blocks: ModelBlocks, par: Parallel, seq_len: int, optimizer: str) -> float:
    """Weights, gradients and optimizer state per chip on the most loaded stage (no activations)."""
    shard = _shard(par, seq_len)
    params = _per_shard(blocks, ("params", shard), lambda: sum(blocks.profile(i, shard).params
                                                                for i in range(len(blocks))))
    opt = OPTIMIZERS[optimizer]
    master, state = opt.master_bytes, opt.state_bytes()
    z, dp = par.zero_stage, par.dp or 1
    shard_of = {0: (1, 1, 1), 1: (1, 1, dp), 2: (1, dp, dp), 3: (dp, dp, dp)}[z]
    per_chip = params / par.pp * (2 / shard_of[0] + GRAD_DTYPES["bfloat16"] / shard_of[1]
                                  + (master + state) / shard_of[2])
    return per_chip


def compute_bound(blocks: ModelBlocks, par: Parallel, *, global_batch: int, seq_len: int, precision: str,
                  kind: str) -> float:
    """A lower bound on the step time of ``par`` from compute alone (communication, recompute and waiting
    only add to it): :func:`planner.schedule.pipeline_bound` over its virtual stages' compute, i.e. a stage
    cannot start before the first microbatch went forward through the stages before it, runs all its
    microbatches, and the last microbatch's backward then crosses the stages before it."""
    from planner.schedule import pipeline_bound

    fwd, bwd = _chunk_times(blocks, par, seq_len, kind, precision)
    return pipeline_bound(fwd, bwd, global_batch // (par.microbatch * (par.dp or 1)), par.pp)


def _chunk_times(blocks: ModelBlocks, par: Parallel, seq_len: int, kind: str,
                 precision: str) -> tuple[list[float], list[float]]:
    """Forward and backward compute seconds of each virtual stage of ``par`` (modelled), once per shard and
    chunk count: the candidates that differ only in DP, FSDP or their microbatch count share them."""
    from planner.parallel import split_layers

    shard, virtual = _shard(par, seq_len), par.pp * par.vp

    def make():
        pf, pb = block_times(blocks, shard, kind, precision)
        chunks = split_layers(blocks, virtual, what="pp" if par.vp == 1 else "vp")
        # virtual stage k = chunk k // pp of stage k % pp
        return [pf[c.stop] - pf[c.start] for c in chunks], [pb[c.stop] - pb[c.start] for c in chunks]

    return _per_shard(blocks, ("chunks", shard, kind, precision, virtual, par.vp == 1), make)


def search(blocks: ModelBlocks, spec, *, global_batch: int, seq_len: int, precision: str = "bfloat16",
           recompute: str = "auto", optimizer: str = "adamw", pricer: CommPricer | None = None,
           progress=None, limit: int | None = None) -> SearchStats:
    """The fastest fitting configuration (see the module doc): ``.best`` is its
    :class:`~planner.estimate.StepEstimate` (None when none fits). ``progress``: :mod:`planner.progress`
    (None: a bar on a terminal). ``limit``: bound only the first ``limit`` candidates.

    Branch and bound: every candidate gets a compute lower bound (:func:`compute_bound`) and a memory
    check; they run through the step model in order of the bound, and those whose bound is no better than
    the fastest fitting step found are not run (``pruned``): the result is the one an exhaustive run
    through the step model would give."""
    from planner.estimate import estimate_from_result, run_config
    from planner.kernels import kernels_of

    pricer = pricer or pricer_for(spec)
    cands = candidates(blocks, spec, global_batch=global_batch, seq_len=seq_len)
    found = SearchStats(capacity=min(spec.slot(0).capacity, spec.slot(len(spec) - 1).capacity))
    if limit is not None:
        found.exact = limit >= len(cands)
        cands = cands[:limit]
    found.candidates = len(cands)
    kind = spec.slot(0).kind
    pool = []
    for par in cands:
        try:
            if _static_bytes(blocks, par, seq_len, optimizer) > found.capacity:
                found.skipped += 1
                continue
            pool.append((compute_bound(blocks, par, global_batch=global_batch, seq_len=seq_len, precision=precision,
                                       kind=kind), par))
        except ValueError as error:  # a cut the model's modules do not take (ModelBlocks.profile)
            found.rejected.append((par, str(error)))

    def evaluate(par: Parallel):
        result, used = run_config(blocks, spec, par, global_batch=global_batch, seq_len=seq_len, precision=precision,
                                  recompute=recompute, optimizer=optimizer, pricer=pricer)
        fits = all(s.memory.fits for s in result.stages)
        est = (estimate_from_result(result, spec, used, precision=precision, model=blocks.name,
                                    kernels=kernels_of(blocks)) if fits else None)
        yield Outcome(result.seconds, fits, max(s.memory.total for s in result.stages), est, used)

    branch_and_bound(pool, evaluate, found, progress=reporter(progress, f"searching {blocks.name} on {spec.name}",
                                                              unit="config"))
    return found


DEFAULT_HEADROOM = 0.6
"""parallel=None keeps weights, gradients and optimizer state under this share of a chip's memory."""

DEFAULT_TOLERANCE = 0.05
"""parallel=None: configurations whose compute bound is within this share of the fastest count as as fast."""


def default_parallel(blocks: ModelBlocks, spec, *, global_batch: int, seq_len: int, optimizer: str,
                     precision: str = "bfloat16") -> Parallel:
    """A configuration without searching, sound on any rack: of the plain ones (ZeRO-1 or FSDP, TP x CP x PP x
    DP, no VP/EP, microbatch 1) whose weights, gradients and optimizer state leave room for activations, those whose compute
    bound (:func:`compute_bound`: the pipeline's fill and drain counted, so a pipeline starved of
    microbatches is as slow as it is) is within :data:`DEFAULT_TOLERANCE` of the fastest; of those, ZeRO-1
    before FSDP (which gathers parameters every microbatch), then the one on the fewest chips (TP x CP x PP x
    DP: communication, which the bound leaves out, grows with them), then the least model parallel (TP x CP x
    PP). Costs no step-model run: a few sums per candidate."""
    capacity = min(spec.slot(0).capacity, spec.slot(len(spec) - 1).capacity)
    plain = candidates(blocks, spec, global_batch=global_batch, seq_len=seq_len, vp=(1,), microbatch=(1,), ep=False)
    if not plain:
        raise ValueError(f"parallel: no configuration of {blocks.name} divides {spec.name} with a global batch of "
                         f"{global_batch}")
    kind = spec.slot(0).kind
    static, bound, refused = {}, {}, []
    for c in plain:
        try:
            static[c] = _static_bytes(blocks, c, seq_len, optimizer)
            bound[c] = compute_bound(blocks, c, global_batch=global_batch, seq_len=seq_len, precision=precision,
                                     kind=kind)
        except ValueError as error:  # a cut the model's modules do not take (ModelBlocks.profile)
            refused.append(str(error))
    if not bound:
        raise ValueError(refused[0])
    fitting = [c for c in bound if static[c] <= DEFAULT_HEADROOM * capacity]
    fitting = fitting or list(bound)  # nothing leaves room: ranked alike (the step model will say it does not fit)
    fastest = min(bound[c] for c in fitting)
    near = [c for c in fitting if bound[c] <= fastest * (1 + DEFAULT_TOLERANCE)]
    # a context-parallel group is chips and model parallelism like a TP group (leaving CP out ranked the most
    # context parallel first: CP4 x DP32 as 32 chips against CP1 x DP128's 128)
    return min(near, key=lambda c: (c.fsdp, c.tp * c.cp * c.pp * c.dp, c.tp * c.cp * c.pp, c.pp, bound[c]))


def advice(blocks: ModelBlocks, spec, est, *, global_batch: int, seq_len: int, precision: str, optimizer: str,
           pricer: CommPricer | None = None) -> str:
    """For an estimate that does not fit: the memory it needs per chip and the largest fitting alternative."""
    mem = est.memory_per_chip
    text = (f"needs {mem.total / 1e9:,.1f} GB per chip (weights {mem.weights / 1e9:,.1f}, gradients "
            f"{mem.gradients / 1e9:,.1f}, optimizer {mem.optimizer / 1e9:,.1f}, activations "
            f"{mem.activations / 1e9:,.1f}) of {mem.capacity / 1e9:,.1f} GB")
    found = search(blocks, spec, global_batch=global_batch, seq_len=seq_len, precision=precision, recompute="auto",
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
    from planner.models import model_blocks, model_presets

    capacity = min(spec.slot(0).capacity, spec.slot(len(spec) - 1).capacity)
    opt = OPTIMIZERS[optimizer]
    master, state = opt.master_bytes, opt.state_bytes()
    best = None
    for name in model_presets():
        params = model_blocks(name).parameters()
        per_chip = params * (2 + GRAD_DTYPES["bfloat16"] + master + state) / len(spec)
        if params < below and per_chip <= DEFAULT_HEADROOM * capacity and (best is None or params > best[1]):
            best = (name, params)
    return best[0] if best else None


__all__ = ["DEFAULT_HEADROOM", "DEFAULT_TOLERANCE", "SearchStats", "advice", "block_times", "candidates", "compute_bound",
           "default_parallel", "largest_fitting_preset", "search"]
