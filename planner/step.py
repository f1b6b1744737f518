"""The step model: one training step of a model cut into pipeline stages on a rack, modelled.

One computation serves the planner's prediction for a live rack and the
what-if for a rack on paper (ARCHITECTURE.md, "Four walks"):

1. every block of every stage is profiled for the stage's shard
   (:class:`~planner.blocks.ModelBlocks`) and priced on the stage's chip
   kind (:func:`~planner.block_pricing.block_cost`);
2. the collectives a block issues (TP all-gathers and reduce-scatters, the CP
   ring, EP all-to-alls) are priced by ``collectives.estimate`` on the rack's
   topology over the stage's own groups, and the part that the block's GEMMs or
   attention cannot hide is added to its forward or backward;
3. FSDP (ZeRO-3) gathers each block's parameters before its forward and
   backward and reduce-scatters its gradients after, on a second stream with
   one block of prefetch; ZeRO-2 reduce-scatters gradients every microbatch;
4. the pipeline schedule (GPipe, 1F1B, interleaved 1F1B) is played with the
   point-to-point sends between stages (:mod:`planner.schedule`);
5. data-parallel gradient reduction starts as each block's last backward
   finishes and runs beside the remaining backward; ZeRO-1/2 parameter gathers
   overlap the next step's first forward; the optimizer step follows (torch's
   fused kernel over the stage's parameters, priced as one multi-tensor op);
6. memory per chip: weights, gradients, optimizer state (sharded by the ZeRO
   stage), activations of the microbatches in flight at the schedule's peak;
   ``recompute="auto"`` picks per stage the cheapest recompute that fits.

A parameter several blocks of a stage hold (an LM head tied to the token
embedding) is one tensor there: its weights, gradient, optimizer state,
reduction and update count once, and autograd's sum of its holders' gradients
is held from the last holder's backward to the first's.

Every figure is modelled. :func:`step_model` is the entry point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import devices
from planner.block_pricing import BlockCost, Execution, block_cost
from planner.blocks import ModelBlocks
from planner.fitted_efficiency import collective_factors, step_efficiency
from planner.comm import CommPricer, pricer_for, scaled_pricer
from planner.profile import BlockProfile, Shard
from planner.schedule import SCHEDULES, actions, simulate
from planner.stage import Stage, check_recompute

OPTIMIZERS = {"adamw": ("_fused_adamw_", 4, 8), "adam": ("_fused_adam_", 4, 8), "sgd": ("_fused_sgd_", 4, 4)}
"""Optimizer -> (fused kernel, bytes of master weights per parameter, bytes of state per parameter)."""

COMM_KINDS = ("tp", "cp", "ep", "dp", "pp")
"""Kinds of exposed communication in a breakdown."""

GRAD_DTYPES = {"bfloat16": 2, "float32": 4}

SIMULATE_LIMIT = 4096
"""Most schedule actions simulated one by one; longer steps are extrapolated from two shorter ones
(the steady state of a schedule repeats every ``stages`` microbatches)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepConfig:
    """What a step does and how it is run, beyond the stages."""

    global_batch: int
    """Samples per step, over all data-parallel replicas."""
    seq_len: int
    """Tokens per sample."""
    microbatches: int
    """Pipeline microbatches per step (gradient accumulation steps)."""
    schedule: str = "1f1b"
    """``gpipe``, ``1f1b`` or ``interleaved`` (several chunks per stage)."""
    dtype: str = "bfloat16"
    """``bfloat16`` or ``fp8`` (FP8 matmuls, the rest BF16)."""
    recompute: str = "none"
    """Activation recompute: ``none``, ``selective`` (repeat non-GEMM ops), ``full`` (repeat whole
    layers), ``full:K`` (the first K layers of every chunk, as Megatron's ``recompute_num_layers``) or
    ``auto`` (per stage, the cheapest that fits)."""
    optimizer: str = "adamw"
    """``adamw``, ``adam`` or ``sgd`` (fixes optimizer state per parameter)."""
    zero: int = 1
    """0: DDP (all-reduce, everything replicated); 1: optimizer state sharded over data parallel
    (Megatron's distributed optimizer); 2: gradients sharded too; 3: parameters too (FSDP)."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism with tp > 1."""
    tp_comm_overlap: bool = True
    """Overlap TP collectives with the GEMMs beside them (chunked, as Megatron's userbuffers)."""
    overlap_grad_reduce: bool = True
    """Start data-parallel gradient reduction during the last backward."""
    overlap_param_gather: bool = True
    """ZeRO-1/2: gather updated parameters during the next step's first forward."""
    grad_dtype: str = "bfloat16"
    """Gradient buffer and reduction dtype: ``bfloat16`` or ``float32``."""
    calibrated: bool = True
    """Apply the fitted step efficiencies (False: the per-op cost model alone)."""
    state_bytes: int | None = None
    """Optimizer state bytes per parameter (None: the optimizer's float32 state, :data:`OPTIMIZERS`). torch's
    optimizers keep their state in the parameters' dtype: 2 x 2 bytes for AdamW on bfloat16 parameters."""
    master_weights: bool = True
    """The optimizer keeps a float32 master copy of the parameters (mixed precision). False for a model
    trained in float32, whose parameters are their own master copy (a live plan of a float32 model)."""
    record: bool = False
    """Keep every schedule action's times in :attr:`StepResult.events` (for plots)."""

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len", "microbatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: unknown {self.schedule!r}; accepted: {', '.join(SCHEDULES)}")
        check_recompute(self.recompute)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: unknown {self.optimizer!r}; accepted: {', '.join(OPTIMIZERS)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero: expected 0, 1, 2 or 3, got {self.zero!r}")
        if self.grad_dtype not in GRAD_DTYPES:
            raise ValueError(f"grad_dtype: unknown {self.grad_dtype!r}; accepted: {', '.join(GRAD_DTYPES)}")
        Execution(dtype=self.dtype)


@dataclass(frozen=True, slots=True)
class Memory:
    """Modelled bytes per chip of one stage."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    """Activations of the microbatches in flight at the schedule's peak, plus the transient
    buffers (a recomputed layer, FSDP's gathered parameters)."""
    capacity: int
    """The slot's memory."""

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


@dataclass(frozen=True, slots=True)
class StageResult:
    """One stage's part of the step (seconds per step unless said otherwise; all modelled)."""

    index: int
    kind: str
    slots: Sequence[int]
    tp: int
    cp: int
    dp: int
    ep: int
    microbatch: int
    """Samples per microbatch on one replica."""
    chunks: tuple[range, ...]
    recompute: str
    """The recompute applied: ``none``, ``selective``, ``full`` or ``full:K`` (K layers per chunk)."""
    forward: tuple[float, ...]
    """Per chunk: seconds of one microbatch's forward, exposed TP/CP/EP/FSDP communication included."""
    backward: tuple[float, ...]
    compute: float
    """Seconds computing (forward, backward, recompute) over the step."""
    exposed: dict[str, float]
    """Seconds of communication the compute did not hide, by kind (tp, cp, ep, dp, pp)."""
    busy: float
    """Seconds the stage's chips were computing or waiting on their own collectives."""
    idle: float
    """Seconds of the step the stage's chips waited on other stages (pipeline bubble)."""
    optimizer: float
    """Seconds of the optimizer step."""
    memory: Memory
    in_flight: tuple[int, ...]
    """Per chunk: most microbatches whose activations were held at once."""
    projected: bool


@dataclass(frozen=True, slots=True)
class StepResult:
    """A modelled training step (see the module doc)."""

    seconds: float
    """Modelled seconds of one step."""
    compute: float
    """Of which the critical stage computes."""
    exposed: dict[str, float]
    """Of which exposed communication on the critical stage, by kind (tp, cp, ep, dp, pp)."""
    bubble: float
    """Of which the critical stage waits on the pipeline."""
    optimizer: float
    """Of which the optimizer step."""
    critical_stage: int
    """The stage whose time is the step's."""
    stages: tuple[StageResult, ...]
    tokens: int
    """Tokens per step."""
    model_flops: float
    """Model FLOPs per step (3 x forward matmul and attention FLOPs; recompute not counted)."""
    chips: int
    """Chips the stages use."""
    projected: bool
    """True when a projected chip figure was used."""
    sources: tuple = ()
    """Catalogue and efficiency figures used."""
    events: tuple = ()
    """(stage, phase, chunk, microbatch, start, end) of every schedule action, when recorded."""
    config: StepConfig | None = None
    modelled: bool = True

    @property
    def breakdown(self) -> dict[str, float]:
        """compute, exposed communication per kind, bubble and optimizer: they add up to :attr:`seconds`."""
        out = {"compute": self.compute}
        out.update({f"{k}_comm": v for k, v in self.exposed.items()})
        out["bubble"] = self.bubble
        out["optimizer"] = self.optimizer
        return out

    def stage_of_slot(self, slot: int) -> StageResult:
        """The stage holding ``slot`` (ValueError when none does)."""
        for s in self.stages:
            if slot in s.slots:
                return s
        raise ValueError(f"slot: no stage holds slot {slot}")


# -- the computation ---------------------------------------------------------------------------------


@dataclass
class _Chunk:
    profiles: list[BlockProfile]
    costs: list[BlockCost]
    fwd_comm: list[float]   # exposed seconds per block
    bwd_comm: list[float]
    comm_kind: dict[str, float] = field(default_factory=dict)   # exposed per microbatch by kind (no FSDP)
    recompute_comm: list[float] = field(default_factory=list)


def _validate(blocks: ModelBlocks, stages: Sequence[Stage], config: StepConfig) -> None:
    if not stages:
        raise ValueError("stages: need at least one stage")
    v = len(stages[0].chunks)
    if any(len(s.chunks) != v for s in stages):
        raise ValueError("stages: every stage needs the same number of chunks "
                         f"(got {[len(s.chunks) for s in stages]})")
    if v > 1 and config.schedule != "interleaved":
        raise ValueError(f"schedule: {v} chunks per stage need schedule='interleaved', got {config.schedule!r}")
    if config.schedule == "interleaved" and config.microbatches % len(stages):
        raise ValueError(f"vp: the interleaved schedule runs microbatches in groups of pp={len(stages)}; "
                         f"{config.microbatches} microbatches per step is not a multiple of it")
    expect = 0
    for c in range(v):
        for s, stage in enumerate(stages):
            r = stage.chunks[c]
            if r.start != expect:
                raise ValueError(f"stages: chunk {c} of stage {s} starts at block {r.start}, expected {expect} "
                                 f"(virtual stages must cover the blocks in order)")
            expect = r.stop
    if expect != len(blocks):
        raise ValueError(f"stages: the chunks cover blocks 0-{expect - 1} but {blocks.name} has {len(blocks)}")
    for s, stage in enumerate(stages):
        per = config.global_batch / (config.microbatches * stage.dp)
        if per != int(per):
            raise ValueError(f"global_batch: {config.global_batch} samples do not split into {config.microbatches} "
                             f"microbatches over stage {s}'s {stage.dp} data-parallel replicas")


def _exposed(seconds: float, hide: float, overlap: bool, pieces: int, share: float = 1.0) -> float:
    """Exposed part of a collective beside ``hide`` seconds of compute, pipelined in ``pieces``: the first
    piece is always exposed; ``share`` of the rest that the compute's length allows is hidden."""
    if not overlap or hide <= 0 or seconds <= 0:
        return seconds
    pieces = max(pieces, 1)
    first = seconds / pieces
    return seconds - share * min(seconds - first, hide * (1 - 1 / pieces))


def _block_comm(prof: BlockProfile, cost: BlockCost, stage: Stage, pricer: CommPricer, config: StepConfig,
                share: float) -> tuple[float, float, float, dict[str, float]]:
    """(exposed forward, exposed backward, exposed TP of a full-recompute forward, exposed per group) of
    one block's collectives on one stage, per microbatch."""
    per_phase = {"forward": [0.0, 0.0], "backward": [0.0, 0.0]}  # [beside GEMMs, beside attention]
    plain = {"forward": 0.0, "backward": 0.0}
    kinds: dict[str, float] = {}
    recompute = 0.0
    for coll in prof.collectives:
        group = stage.group(coll.group)
        if coll.op == "send_recv":
            group = group[:2]  # a ring exchange: each member sends to its neighbour
        seconds = coll.calls * pricer.seconds(coll.op, coll.nbytes, group)
        if coll.overlap in ("column_gemm", "row_gemm"):
            per_phase[coll.phase][0] += seconds
        elif coll.overlap == "attention":
            per_phase[coll.phase][1] += seconds
        else:
            plain[coll.phase] += seconds
            kinds[coll.group] = kinds.get(coll.group, 0.0) + seconds
        if coll.phase == "forward" and coll.group == "tp":
            recompute += seconds
    exposed = {}
    for phase, gemm, attn in (("forward", cost.forward_gemm, cost.forward_attention),
                              ("backward", cost.backward_gemm, cost.backward_attention)):
        tp_exp = _exposed(per_phase[phase][0], gemm, config.tp_comm_overlap, stage.tp, share)
        cp_exp = max(0.0, per_phase[phase][1] - attn)
        kinds["tp"] = kinds.get("tp", 0.0) + tp_exp
        kinds["cp"] = kinds.get("cp", 0.0) + cp_exp
        exposed[phase] = tp_exp + cp_exp + plain[phase]
    return (exposed["forward"], exposed["backward"],
            _exposed(recompute, cost.forward_gemm, config.tp_comm_overlap, stage.tp, share), kinds)


def _overlap_share(kind: str, execution: Execution) -> float:
    eff = step_efficiency(kind) if execution.calibrated else None
    return eff.overlap.value if eff is not None and eff.overlap is not None else 1.0


def _chunk(blocks: ModelBlocks, stage: Stage, chunk: range, shard: Shard, execution: Execution,
           pricer: CommPricer, config: StepConfig, memo: dict) -> _Chunk:
    out = _Chunk([], [], [], [])
    share = _overlap_share(stage.kind, execution)
    for i in chunk:
        prof = blocks.profile(i, shard)
        cost = block_cost(prof, stage.kind, execution)
        out.profiles.append(prof)
        out.costs.append(cost)
        key = id(prof)  # blocks sharing a profile share their communication (memo is per stage)
        comm = memo.get(key)
        if comm is None:
            comm = memo[key] = _block_comm(prof, cost, stage, pricer, config, share)
        fwd, bwd, rc, kinds = comm
        out.fwd_comm.append(fwd)
        out.bwd_comm.append(bwd)
        out.recompute_comm.append(rc)
        for kind, sec in kinds.items():
            out.comm_kind[kind] = out.comm_kind.get(kind, 0.0) + sec
    around = getattr(blocks, "chunk_collectives", None)
    for coll in around(chunk, shard) if around is not None and len(chunk) else ():
        # The stage's own collectives around its blocks (exposed): the first block's forward, the last's backward.
        seconds = coll.calls * pricer.seconds(coll.op, coll.nbytes, stage.group(coll.group))
        if coll.phase == "forward":
            out.fwd_comm[0] += seconds
        else:
            out.bwd_comm[-1] += seconds
        out.comm_kind[coll.group] = out.comm_kind.get(coll.group, 0.0) + seconds
    return out


def _layer_positions(blocks: ModelBlocks, chunk: range) -> list[int]:
    return [k for k, i in enumerate(chunk) if i in blocks.layers]


def _recompute_modes(chunk: _Chunk, layers: list[int], mode: str) -> list[str]:
    """Per block: none / selective / full, for a stage mode (``full:K`` recomputes the first K layers)."""
    modes = ["none"] * len(chunk.profiles)
    if mode == "none":
        return modes
    if mode == "selective":
        return ["selective" if k in layers else "none" for k in range(len(modes))]
    count = len(layers) if mode == "full" else int(mode.split(":")[1])
    for k in layers[:count]:
        modes[k] = "full"
    return modes


def _chunk_times(chunk: _Chunk, modes: list[str], fsdp: list[tuple[float, float]] | None,
                 zero2_rs: list[float] | None, share: float = 1.0) -> tuple[float, float, float, float]:
    """(forward, backward, compute per microbatch, exposed FSDP/ZeRO-2 seconds per microbatch)."""
    f = [c.forward + x for c, x in zip(chunk.costs, chunk.fwd_comm)]
    b = [c.backward + x + c.recompute(m) + (rc if m == "full" else 0.0)
         for c, x, m, rc in zip(chunk.costs, chunk.bwd_comm, modes, chunk.recompute_comm)]
    compute = sum(c.forward + c.backward + c.recompute(m) for c, m in zip(chunk.costs, modes))
    plain_f, plain_b = sum(f), sum(b)
    if fsdp is None and zero2_rs is None:
        return plain_f, plain_b, compute, 0.0
    ag = [x[0] for x in fsdp] if fsdp else [0.0] * len(f)
    rs = [x[1] for x in fsdp] if fsdp else list(zero2_rs)
    fwd = _two_streams(f, ag, [0.0] * len(f), share) if fsdp else plain_f
    bwd = _two_streams(b[::-1], ag[::-1] if fsdp else [0.0] * len(b), rs[::-1], share)
    return fwd, bwd, compute, (fwd - plain_f) + (bwd - plain_b)


def _two_streams(compute: list[float], before: list[float], after: list[float], share: float = 1.0) -> float:
    """When blocks end with their collectives on a second stream: block k's ``before`` collective
    (a parameter gather) is issued as block k-1 starts (one block of prefetch) and must end before
    block k starts; its ``after`` collective (a gradient reduce-scatter) is issued when block k ends.
    The stream runs collectives in the order they were issued. Of the communication hidden behind
    compute, ``1 - share`` still costs compute time."""
    comp_free = comm_free = 0.0
    issue = 0.0  # when the next block's gather is issued
    pending = None  # (issued at, seconds) of the previous block's after-collective
    for c, pre, post in zip(compute, before, after):
        gather_end = max(comm_free, issue) + pre
        comm_free = gather_end
        if pending is not None:
            comm_free = max(comm_free, pending[0]) + pending[1]
        start = max(comp_free, gather_end)
        issue = start
        comp_free = start + c
        pending = (comp_free, post) if post > 0 else None
    if pending is not None:
        comm_free = max(comm_free, pending[0]) + pending[1]
    end = max(comp_free, comm_free)
    if share < 1.0:
        hidden = max(0.0, sum(before) + sum(after) - (end - sum(compute)))
        end += (1.0 - share) * hidden
    return end


_FRONTIERS: dict[tuple, tuple[tuple[int, ...], ...]] = {}


def _live_frontier(schedule: str, stages: int, chunks: int, microbatches: int, stage: int):
    """The per-chunk in-flight counts a stage passes through that no other state dominates (cached):
    the activation peak for any per-chunk sizes is reached at one of them."""
    key = (schedule, stages, chunks, microbatches, stage)
    found = _FRONTIERS.get(key)
    if found is None:
        live = [0] * chunks
        states = set()
        for phase, c, _ in actions(schedule, stages, chunks, microbatches)[stage]:
            live[c] += 1 if phase == 0 else -1
            states.add(tuple(live))
        kept: list[tuple[int, ...]] = []
        for x in sorted(states, key=sum, reverse=True):
            if not any(all(a >= b for a, b in zip(y, x)) for y in kept):
                kept.append(x)
        found = _FRONTIERS[key] = tuple(kept)
    return found


def _peak_activations(frontier, per_chunk: list[float]) -> tuple[float, tuple[int, ...]]:
    best = max(frontier, key=lambda state: sum(n * a for n, a in zip(state, per_chunk)))
    return sum(n * a for n, a in zip(best, per_chunk)), best


def step_model(blocks: ModelBlocks, stages: Sequence[Stage], rack, config: StepConfig, *,
               pricer: CommPricer | None = None) -> StepResult:
    """Model one training step of ``blocks`` cut into ``stages`` on ``rack`` (see the module doc).

    ``rack``: a :class:`devices.RackSpec`, preset name or spec string;
    ``pricer``: a :class:`CommPricer` for that rack to share between calls.
    """
    spec = rack if hasattr(rack, "domains") else devices.parse_rack(rack)
    pricer = pricer or pricer_for(spec)
    _validate(blocks, stages, config)
    execution = Execution(dtype=config.dtype, calibrated=config.calibrated)
    if execution.calibrated:  # the stacks' collective libraries against the link model, where fitted
        pricer = scaled_pricer(pricer, spec, collective_factors({s.kind for s in stages}))
    grad_bytes = GRAD_DTYPES[config.grad_dtype]
    p, v, m = len(stages), len(stages[0].chunks), config.microbatches

    prepared, ties = [], []
    for s, stage in enumerate(stages):
        mb = config.global_batch // (m * stage.dp)
        shard = Shard(microbatch=mb, seq_len=config.seq_len, tp=stage.tp, cp=stage.cp, ep=stage.ep,
                      sequence_parallel=config.sequence_parallel)
        memo: dict = {}
        chunks = [_chunk(blocks, stage, c, shard, execution, pricer, config, memo) for c in stage.chunks]
        ties.append(_stage_ties(blocks, stage, chunks))
        fsdp = zero2 = None
        if config.zero == 3 and stage.dp > 1:
            dp_group = stage.group("dp")
            fsdp = [[(pricer.seconds("all_gather", pr.param_bytes, dp_group),
                      pricer.seconds("reduce_scatter", pr.params * grad_bytes, dp_group)) for pr in ch.profiles]
                    for ch in chunks]
        elif config.zero == 2 and stage.dp > 1:
            dp_group = stage.group("dp")
            zero2 = [[pricer.seconds("reduce_scatter", pr.params * grad_bytes, dp_group) for pr in ch.profiles]
                     for ch in chunks]
        prepared.append((stage, mb, shard, chunks, fsdp, zero2))

    # Recompute per stage: the cheapest mode whose peak memory fits ("auto"), else the one asked for.
    plans = []
    for s, (stage, mb, shard, chunks, fsdp, zero2) in enumerate(prepared):
        asked = stage.recompute or config.recompute
        layer_pos = [_layer_positions(blocks, c) for c in stage.chunks]
        frontier = _live_frontier(config.schedule, p, v, m, s)

        def attempt(mode):
            modes = [_recompute_modes(ch, lp, mode) for ch, lp in zip(chunks, layer_pos)]
            memory, inflight = _memory(stage, chunks, modes, frontier, config, grad_bytes, fsdp is not None, spec,
                                       receives=s > 0 or len(stage.chunks) > 1, ties=ties[s])
            return mode, modes, memory, inflight

        if asked != "auto":
            chosen = attempt(asked)
        else:
            # Cheapest first: no recompute, selective, then whole layers (memory falls as K grows:
            # bisect for the fewest that fit); if even every layer does not fit, "full" and fits=False.
            chosen = attempt("none")
            if not chosen[2].fits:
                chosen = attempt("selective")
            most = max(map(len, layer_pos), default=0)
            if not chosen[2].fits and most:
                full = attempt("full")
                if full[2].fits:
                    lo, hi = 1, most
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if attempt(f"full:{mid}")[2].fits:
                            hi = mid
                        else:
                            lo = mid + 1
                    chosen = attempt(f"full:{lo}") if lo < most else full
                else:
                    chosen = full
        plans.append(chosen)

    forward, backward, compute_mb, fsdp_mb = [], [], [], []
    for (stage, mb, shard, chunks, fsdp, zero2), (mode, modes, _, _) in zip(prepared, plans):
        share = _overlap_share(stage.kind, execution)
        times = [_chunk_times(ch, md, fsdp[c] if fsdp else None, zero2[c] if zero2 else None, share)
                 for c, (ch, md) in enumerate(zip(chunks, modes))]
        forward.append([t[0] for t in times])
        backward.append([t[1] for t in times])
        compute_mb.append(sum(t[2] for t in times))
        fsdp_mb.append(sum(t[3] for t in times))

    # Point-to-point sends between virtual stages: the last block's output, first slot to first slot.
    hops = []
    for k in range(p * v - 1):
        c, s = divmod(k, p)
        nc, ns = divmod(k + 1, p)
        nbytes = prepared[s][3][c].profiles[-1].output_bytes
        hops.append(pricer.send(nbytes, stages[s].slots[0], stages[ns].slots[0]))

    sim = _simulate(forward, backward, m, config.schedule, hops, config.record)

    results = []
    step_end = 0.0
    ends = []
    for s, ((stage, mb, shard, chunks, fsdp, zero2), (mode, modes, memory, inflight)) in enumerate(
            zip(prepared, plans)):
        dp_tail, param_gather = _data_parallel(stage, chunks, sim.last_backward[s], sim.finish[s], forward[s],
                                               pricer, config, grad_bytes, _overlap_share(stage.kind, execution),
                                               ties=ties[s])
        opt = _optimizer_seconds(stage, chunks, config, ties[s])
        end = max(sim.finish[s], dp_tail) + param_gather + opt
        ends.append(end)
        exposed = {k: 0.0 for k in COMM_KINDS}
        for ch, md in zip(chunks, modes):
            for kind, sec in ch.comm_kind.items():
                exposed[kind] += sec * m
            if any(x == "full" for x in md):
                exposed["tp"] += m * sum(rc for rc, x in zip(ch.recompute_comm, md) if x == "full")
        exposed["dp"] += fsdp_mb[s] * m + max(0.0, dp_tail - sim.finish[s]) + param_gather
        compute = compute_mb[s] * m
        busy = sim.busy[s] + max(0.0, dp_tail - sim.finish[s]) + param_gather
        results.append(dict(stage=stage, mb=mb, mode=mode, memory=memory, inflight=inflight, exposed=exposed,
                            compute=compute, busy=busy, opt=opt, chunks=chunks))
    _tied_reduction(blocks, stages, pricer, ends, results)
    step_end = max(ends)
    crit = max(range(p), key=lambda s: (ends[s], results[s]["busy"]))

    stage_results = []
    for s, r in enumerate(results):
        stage = r["stage"]
        projected = any(c.projected for ch in r["chunks"] for c in ch.costs)
        stage_results.append(StageResult(
            index=s, kind=stage.kind, slots=stage.slots, tp=stage.tp, cp=stage.cp, dp=stage.dp, ep=stage.ep,
            microbatch=r["mb"], chunks=stage.chunks, recompute=r["mode"], forward=tuple(forward[s]),
            backward=tuple(backward[s]), compute=r["compute"], exposed=r["exposed"], busy=r["busy"] + r["opt"],
            idle=max(0.0, step_end - r["busy"] - r["opt"]), optimizer=r["opt"], memory=r["memory"],
            in_flight=r["inflight"], projected=projected))

    cr = results[crit]
    exposed = dict(cr["exposed"])
    waiting = max(0.0, step_end - cr["opt"] - cr["busy"])
    pp_path = min(waiting, 2 * sum(hops[:p - 1])) if p > 1 else 0.0
    exposed["pp"] = pp_path
    # Whatever of the critical stage's time is neither compute nor its own exposed communication
    # (other than pp) is pipeline bubble; the parts add up to the step exactly.
    accounted = cr["compute"] + sum(exposed.values()) + cr["opt"]
    bubble = max(0.0, step_end - accounted)
    if accounted > step_end:  # rounding: trim the bubble-free remainder from dp
        exposed["dp"] = max(0.0, exposed["dp"] - (accounted - step_end))
    tokens = config.global_batch * config.seq_len
    model_flops = _total_model_flops(prepared, config)
    sources: dict[int, object] = {}
    for _, _, _, chunks, _, _ in prepared:
        for ch in chunks:
            for c in ch.costs:
                for fig in c.sources:
                    sources[id(fig)] = fig
    return StepResult(
        seconds=step_end, compute=cr["compute"], exposed=exposed, bubble=bubble, optimizer=cr["opt"],
        critical_stage=crit, stages=tuple(stage_results), tokens=tokens, model_flops=model_flops,
        chips=sum(len(s.slots) for s in stages), projected=any(sr.projected for sr in stage_results),
        sources=tuple(sources.values()), events=sim.events, config=config)


def _total_model_flops(prepared, config: StepConfig) -> float:
    """Model FLOPs of the whole step: every block once per sample (profiles are per microbatch)."""
    total = 0.0
    for stage, mb, shard, chunks, _, _ in prepared:
        for ch in chunks:
            for pr in ch.profiles:
                total += pr.model_flops / mb * config.global_batch
    return total


def _simulate(forward, backward, m: int, schedule: str, hops, record: bool):
    p, v = len(forward), len(forward[0])
    if 2 * p * v * m <= SIMULATE_LIMIT or record or m <= 3 * p:
        return simulate(forward, backward, m, schedule, p2p=hops, record=record)
    # The steady state repeats every p microbatches: simulate two short steps, extrapolate the rest.
    base = 2 * p
    while (m - base) % p:
        base += 1
    a = simulate(forward, backward, base, schedule, p2p=hops)
    b = simulate(forward, backward, base + p, schedule, p2p=hops)
    reps = (m - base) // p
    shift = lambda x, y: x + reps * (y - x)  # noqa: E731
    busy = tuple(m * sum(f) + m * sum(bb) for f, bb in zip(forward, backward))
    return type(a)(end=shift(a.end, b.end), busy=busy, finish=tuple(shift(x, y) for x, y in zip(a.finish, b.finish)),
                   in_flight=b.in_flight, peak_chunks=b.peak_chunks,
                   last_backward=tuple(tuple((shift(x[0], y[0]), shift(x[1], y[1])) for x, y in zip(ca, cb))
                                       for ca, cb in zip(a.last_backward, b.last_backward)),
                   first_forward=a.first_forward, events=())


_SAVED: dict[tuple[int, str], tuple[BlockProfile, int]] = {}


def _saved(profile: BlockProfile, mode: str) -> int:
    """``profile.saved_bytes(mode)``, cached (the auto-recompute search asks many times)."""
    key = (id(profile), mode)
    hit = _SAVED.get(key)
    if hit is None or hit[0] is not profile:
        hit = _SAVED[key] = (profile, profile.saved_bytes(mode))
    return hit[1]


def _memory(stage: Stage, chunks: list[_Chunk], modes: list[list[str]], frontier, config: StepConfig,
            grad_bytes: int, fsdp: bool, spec, receives: bool = False,
            ties: tuple[tuple[_Tie, ...], ...] = ()) -> tuple[Memory, tuple[int, ...]]:
    dp, ep = stage.dp, stage.ep
    dense = sum(pr.params - pr.expert_params for ch in chunks for pr in ch.profiles)
    expert = sum(pr.expert_params for ch in chunks for pr in ch.profiles)
    param_bytes = sum(pr.param_bytes for ch in chunks for pr in ch.profiles)
    per_param = param_bytes / max(1, dense + expert)
    dense -= sum(t.elements * (len(t.holders) - 1) for chunk_ties in ties for t in chunk_ties)  # one tensor each
    _, master, state = OPTIMIZERS[config.optimizer]
    if not config.master_weights:
        master = 0
    if config.state_bytes is not None:
        state = config.state_bytes
    z = config.zero
    edp = max(1, dp // ep)
    shard_w = (lambda n, d: n / d) if z >= 3 else (lambda n, d: n)
    shard_g = (lambda n, d: n / d) if z >= 2 else (lambda n, d: n)
    shard_o = (lambda n, d: n / d) if z >= 1 else (lambda n, d: n)
    weights = per_param * (shard_w(dense, dp) + shard_w(expert, edp))
    grads = grad_bytes * (shard_g(dense, dp) + shard_g(expert, edp))
    opt = (master + state) * (shard_o(dense, dp) + shard_o(expert, edp))
    per_chunk = [sum(_saved(pr, md) for pr, md in zip(ch.profiles, cm)) for ch, cm in zip(chunks, modes)]
    peak, at = _peak_activations(frontier, per_chunk)
    transient = 0.0
    for c, (ch, cm) in enumerate(zip(chunks, modes)):
        held = _held_gradients(ties[c] if ties else (), len(ch.profiles))
        later = 0  # this microbatch's activations of the chunk's later blocks: freed before a block's backward
        for k in reversed(range(len(ch.profiles))):
            pr, md = ch.profiles[k], cm[k]
            # The running block's temporaries (where measured) and the gradients autograd holds for a
            # parameter a later block of the chunk shares, beside what the microbatch still keeps.
            transient = max(transient, pr.workspace + held[k] - (later if at[c] else 0))
            if md != "none":  # a recomputed block's activations exist again during its backward
                transient = max(transient, _saved(pr, "none") - _saved(pr, md))
            later += _saved(pr, md)
    if receives:  # the gradient of the stage's input, held until the previous stage takes it (a send buffer)
        transient += max(ch.profiles[0].input_bytes for ch in chunks)
    if fsdp:  # the gathered parameters (and gradients) of the block running and the one prefetched
        largest = max(pr.param_bytes for ch in chunks for pr in ch.profiles)
        transient += 2 * largest + max(pr.params for ch in chunks for pr in ch.profiles) * grad_bytes
    capacity = min(spec.slot(stage.slots[0]).capacity, spec.slot(stage.slots[-1]).capacity)
    return Memory(int(weights), int(grads), int(opt), int(peak + transient), int(capacity)), at


def _data_parallel(stage: Stage, chunks: list[_Chunk], last_backward, finish: float, forward: list[float],
                   pricer: CommPricer, config: StepConfig, grad_bytes: int,
                   share: float = 1.0, ties: tuple[tuple[_Tie, ...], ...] = ()) -> tuple[float, float]:
    """(when the gradient reduction ends, exposed seconds of the ZeRO parameter gather)."""
    if stage.dp == 1 or config.zero == 3:
        return finish, 0.0
    dp_group, edp_group = stage.group("dp"), stage.group("edp")
    reduce = "all_reduce" if config.zero == 0 else "reduce_scatter"
    buckets = []
    for c_index, (ch, (start, end)) in enumerate(zip(chunks, last_backward)):
        total_b = sum(c.backward for c in ch.costs) or 1.0
        # A parameter several blocks share is in the bucket of the first (its gradient is final there), and
        # autograd accumulates the later holders' gradients into it there, not in their own backward.
        shared = [0] * len(ch.profiles)
        moved = [0.0] * len(ch.profiles)
        for tie in (ties[c_index] if ties else ()):
            accumulate = _accumulate_seconds(stage.kind, ch.profiles[tie.holders[0]], tie.elements)
            for k in tie.holders[1:]:
                shared[k] += tie.elements
                moved[k] -= accumulate
                moved[tie.holders[0]] += accumulate
        t = start
        for pr, c, dup, shift in zip(reversed(ch.profiles), reversed(ch.costs), reversed(shared), reversed(moved)):
            t += (end - start) * (c.backward + shift) / total_b
            if config.zero == 2:
                continue  # reduce-scattered every microbatch (in the backward times)
            seconds = pricer.seconds(reduce, (pr.params - pr.expert_params - dup) * grad_bytes, dp_group)
            if pr.expert_params:
                seconds += pricer.seconds(reduce, pr.expert_params * grad_bytes, edp_group)
            buckets.append((t if config.overlap_grad_reduce else finish, seconds))
    comm = finish if not buckets else 0.0
    for ready, seconds in sorted(buckets):
        comm = max(comm, ready) + seconds
    tail = max(finish, comm)
    hidden = max(0.0, sum(sec for _, sec in buckets) - (tail - finish))
    tail += (1.0 - share) * hidden
    gather = 0.0
    if config.zero in (1, 2):
        per_block = [pricer.seconds("all_gather", pr.param_bytes, dp_group) for ch in chunks for pr in ch.profiles]
        if config.overlap_param_gather:
            f_blocks = [c.forward for ch in chunks for c in ch.costs]
            gather = _two_streams(f_blocks, per_block, [0.0] * len(per_block), share) - sum(f_blocks)
        else:
            gather = sum(per_block)
    return tail, gather


def _tied_reduction(blocks: ModelBlocks, stages: Sequence[Stage], pricer: CommPricer, ends: list[float],
                    results: list[dict]) -> None:
    """Parameters several stages hold (an embedding tied to the LM head, ``blocks.tied_parameters()``: name ->
    (bytes, holding blocks)): their gradients are summed over every holder's slots after the holders' last
    backward and data-parallel reduction, before their optimizers."""
    tied = getattr(blocks, "tied_parameters", None)
    if tied is None:
        return
    for nbytes, holders in tied().values():
        ids = [s for s, st in enumerate(stages) if any(b in st.blocks for b in holders)]
        if len(ids) < 2:
            continue
        group = tuple(slot for s in ids for slot in stages[s].slots)
        seconds = pricer.seconds("all_reduce", nbytes, group)
        start = max(ends[s] - results[s]["opt"] for s in ids)
        for s in ids:
            waited = start + seconds - (ends[s] - results[s]["opt"])
            ends[s] += waited
            results[s]["exposed"]["dp"] += waited
            results[s]["busy"] += seconds


def _optimizer_seconds(stage: Stage, chunks: list[_Chunk], config: StepConfig,
                       ties: tuple[tuple[_Tie, ...], ...] = ()) -> float:
    """The optimizer step as torch's fused optimizers run it, over the stage's parameters (a shared one once)
    taken as one tensor per list: Adam(W) first increments its step counters (one ``_foreach_add_``), then
    one fused kernel walks parameters, gradients and state; SGD's walks parameters, gradients and momentum.
    In float32 over master weights, else in the parameters' dtype (torch keeps the state in it)."""
    kernel, _, _ = OPTIMIZERS[config.optimizer]
    profiles = [pr for ch in chunks for pr in ch.profiles]
    n = sum(pr.params for pr in profiles) - sum(t.elements * (len(t.holders) - 1) for ct in ties for t in ct)
    if config.zero >= 1:
        n = math.ceil(n / stage.dp)
    dtype = "float32" if config.master_weights else _param_dtype(profiles)
    if "adam" in kernel:
        lists = [(n,)] * 4 + [()]  # params, grads, exp_avgs, exp_avg_sqs; then the step counters
        counters = devices.estimate(stage.kind, "aten::_foreach_add_.Scalar", [()], "float32", list_length=1)
    else:
        lists, counters = [(n,)] * 3, None  # params, grads, momentum buffers
    e = devices.estimate(stage.kind, f"aten::{kernel}", lists, dtype, list_length=1)
    return e.seconds + (counters.seconds if counters is not None else 0.0)


def _param_dtype(profiles: Sequence[BlockProfile]) -> str:
    """The parameters' dtype as their bytes per element tell it (float32, else a 16-bit format)."""
    per_param = sum(pr.param_bytes for pr in profiles) / max(1, sum(pr.params for pr in profiles))
    return "float32" if per_param >= 4 else "bfloat16"


def _accumulate_seconds(kind: str, profile: BlockProfile, elements: int) -> float:
    """One gradient of ``elements`` added into another (autograd's accumulation of a shared parameter)."""
    shape = [(elements,)] * 2
    return devices.estimate(kind, "aten::add_.Tensor", shape, _param_dtype([profile]), out_shapes=shape[:1]).seconds


@dataclass(frozen=True, slots=True)
class _Tie:
    """A parameter several blocks of one chunk hold (an embedding tied to the LM head): one tensor, whose
    gradient autograd sums over the holders within the chunk's one backward graph."""

    nbytes: int
    elements: int
    holders: tuple[int, ...]
    """Positions of the holding blocks in the chunk, ascending."""


def _stage_ties(blocks: ModelBlocks, stage: Stage, chunks: list[_Chunk]) -> tuple[tuple[_Tie, ...], ...]:
    """Per chunk of ``stage``: the parameters two or more of its blocks hold (``blocks.tied_parameters()``)."""
    tied = getattr(blocks, "tied_parameters", None)
    found = tied() if tied is not None else {}
    out = []
    for block_range, ch in zip(stage.chunks, chunks):
        ties = []
        for nbytes, holders in found.values():
            at = tuple(k for k, i in enumerate(block_range) if i in holders)
            if len(at) > 1:
                first = ch.profiles[at[0]]
                ties.append(_Tie(nbytes, round(nbytes * first.params / max(1, first.param_bytes)), at))
        out.append(tuple(ties))
    return tuple(out)


def _held_gradients(ties: Sequence[_Tie], n: int) -> list[int]:
    """Per block of a chunk (by position): bytes of gradients autograd holds while the block runs backward,
    for parameters it shares with later blocks. Autograd sums the holders' gradients in its input buffer
    out of place (torch's InputBuffer does not modify them in place): from the last holder's backward the
    gradient so far waits, and an earlier holder's backward makes the sum beside its own gradient."""
    held = [0] * n
    for tie in ties:
        last = tie.holders[-1]
        for k in range(tie.holders[0], last):
            held[k] += tie.nbytes + (tie.nbytes if k in tie.holders else 0)
    return held


__all__ = ["COMM_KINDS", "OPTIMIZERS", "Memory", "StageResult", "StepConfig", "StepResult", "step_model"]
