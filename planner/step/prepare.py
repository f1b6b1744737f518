"""A stage made ready for the step model: its blocks profiled for the stage's shard, priced on its kind, and
the collectives its blocks issue priced on the rack (the part compute cannot hide, per microbatch).

:func:`prepare_stage` returns a :class:`PreparedStage`: per chunk the blocks' profiles and costs, their exposed
TP/CP/EP communication, FSDP's (ZeRO-3) per-block gathers and reduce-scatters or ZeRO-2's reduce-scatters, and
the parameters several of its blocks share (an embedding tied to the LM head).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.block_pricing import BlockCost, Execution, block_cost
from planner.blocks import ModelBlocks
from planner.comm import CommPricer
from planner.fitted_efficiency import step_efficiency
from planner.optimizers import GRAD_DTYPES
from planner.profile import BlockProfile, Shard
from planner import tp_overlap
from planner.ring_attention import exposed_exchange
from planner.stage import Stage
from planner.step.config import StepConfig


@dataclass
class Chunk:
    """One chunk of a stage: its blocks' profiles and costs, and their exposed communication per microbatch."""

    profiles: list[BlockProfile]
    costs: list[BlockCost]
    fwd_comm: list[float]
    """Exposed seconds per block in its forward."""
    bwd_comm: list[float]
    comm_kind: dict[str, float] = field(default_factory=dict)
    """Exposed seconds per microbatch by kind (tp, cp, ep; FSDP apart)."""
    recompute_comm: list[float] = field(default_factory=list)
    """Exposed TP seconds per block of a forward repeated by full recompute."""


@dataclass(frozen=True, slots=True)
class Tie:
    """A parameter several blocks of one chunk hold (an embedding tied to the LM head): one tensor, whose
    gradient each holder's backward adds its part into."""

    nbytes: int
    elements: int
    holders: tuple[int, ...]
    """Positions of the holding blocks in the chunk, ascending."""


@dataclass(slots=True)
class PreparedStage:
    """A stage ready for the step model (see the module doc)."""

    index: int
    stage: Stage
    microbatch: int
    """Samples per microbatch on one replica."""
    shard: Shard
    chunks: list[Chunk]
    ties: tuple[tuple[Tie, ...], ...]
    """Per chunk, the parameters two or more of its blocks hold."""
    share: float
    """Of communication hidden behind compute, the share that costs no compute time (fitted, else 1)."""
    fsdp: list[list[tuple[float, float]]] | None = None
    """ZeRO-3: per chunk, per block, (parameter all-gather, gradient reduce-scatter) seconds."""
    zero2: list[list[float]] | None = None
    """ZeRO-2: per chunk, per block, gradient reduce-scatter seconds (every microbatch)."""

    @property
    def kind(self) -> str:
        return self.stage.kind

    @property
    def profiles(self) -> list[BlockProfile]:
        """Every block's profile, chunk by chunk."""
        return [pr for ch in self.chunks for pr in ch.profiles]


def prepare_stage(blocks: ModelBlocks, index: int, stage: Stage, config: StepConfig, execution: Execution,
                  pricer: CommPricer) -> PreparedStage:
    """Profile, price and attach the communication of one stage (see the module doc)."""
    mb = config.global_batch // (config.microbatches * stage.dp)
    shard = Shard(microbatch=mb, seq_len=config.seq_len, tp=stage.tp, cp=stage.cp, ep=stage.ep,
                  sequence_parallel=config.sequence_parallel)
    share = overlap_share(stage.kind, execution)
    memo: dict = {}
    chunks = [_chunk(blocks, stage, c, shard, execution, pricer, config, memo, share) for c in stage.chunks]
    prepared = PreparedStage(index, stage, mb, shard, chunks, _stage_ties(blocks, stage, chunks), share)
    grad_bytes = GRAD_DTYPES[config.grad_dtype]
    if config.zero == 3 and stage.dp > 1:
        dp_group = stage.group("dp")
        prepared.fsdp = [[(pricer.seconds("all_gather", pr.param_bytes, dp_group),
                           pricer.seconds("reduce_scatter", pr.params * grad_bytes, dp_group)) for pr in ch.profiles]
                         for ch in chunks]
    elif config.zero == 2 and stage.dp > 1:
        dp_group = stage.group("dp")
        prepared.zero2 = [[pricer.seconds("reduce_scatter", pr.params * grad_bytes, dp_group) for pr in ch.profiles]
                          for ch in chunks]
    return prepared


def _block_comm(prof: BlockProfile, cost: BlockCost, stage: Stage, pricer: CommPricer, config: StepConfig,
                share: float) -> tuple[float, float, float, dict[str, float]]:
    """(exposed forward, exposed backward, exposed TP of a full-recompute forward, exposed per group) of
    one block's collectives on one stage, per microbatch."""
    per_phase = {"forward": ([], []), "backward": ([], [])}  # (TP beside GEMMs, ring exchanges beside attention)
    plain = {"forward": 0.0, "backward": 0.0}
    kinds: dict[str, float] = {}
    recompute = []
    for coll in prof.collectives:
        group = stage.group(coll.group)
        if coll.op == "send_recv":
            group = group[:2]  # a ring exchange: each member sends to its neighbour
        seconds = coll.calls * pricer.seconds(coll.op, coll.nbytes, group)
        if coll.overlap in ("column_gemm", "row_gemm"):
            per_phase[coll.phase][0].append((tp_overlap.method(coll.phase, coll.overlap), seconds))
        elif coll.overlap == "attention":
            per_phase[coll.phase][1].append((seconds, coll.calls))
        else:
            plain[coll.phase] += seconds
            kinds[coll.group] = kinds.get(coll.group, 0.0) + seconds
        if coll.phase == "forward" and coll.group == "tp":
            recompute.append((tp_overlap.method(coll.phase, coll.overlap), seconds))
    for phase, nbytes in prof.host_reads:
        # The host waits for the copy: nothing hides it.
        seconds = pricer.to_host(nbytes, stage.group("tp")[0])
        plain[phase] += seconds
        kinds["host"] = kinds.get("host", 0.0) + seconds
    exposed = {}
    for phase, gemm, attn in (("forward", cost.forward_gemm, cost.forward_attention),
                              ("backward", cost.backward_gemm, cost.backward_attention)):
        tp_exp = tp_overlap.exposed(per_phase[phase][0], gemm, stage.tp, share, config.tp_comm_overlap)
        cp_exp = sum(exposed_exchange(sec, calls, attn) for sec, calls in per_phase[phase][1])
        kinds["tp"] = kinds.get("tp", 0.0) + tp_exp
        kinds["cp"] = kinds.get("cp", 0.0) + cp_exp
        exposed[phase] = tp_exp + cp_exp + plain[phase]
    return (exposed["forward"], exposed["backward"],
            tp_overlap.exposed(recompute, cost.forward_gemm, stage.tp, share, config.tp_comm_overlap), kinds)


def overlap_share(kind: str, execution: Execution) -> float:
    """Of communication hidden behind compute on ``kind``, the share that costs no compute time."""
    eff = step_efficiency(kind) if execution.calibrated else None
    return eff.overlap.value if eff is not None and eff.overlap is not None else 1.0


def _chunk(blocks: ModelBlocks, stage: Stage, chunk: range, shard: Shard, execution: Execution,
           pricer: CommPricer, config: StepConfig, memo: dict, share: float) -> Chunk:
    out = Chunk([], [], [], [])
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


def _stage_ties(blocks: ModelBlocks, stage: Stage, chunks: list[Chunk]) -> tuple[tuple[Tie, ...], ...]:
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
                ties.append(Tie(nbytes, round(nbytes * first.params / max(1, first.param_bytes)), at))
        out.append(tuple(ties))
    return tuple(out)


__all__ = ["Chunk", "PreparedStage", "Tie", "prepare_stage", "overlap_share"]
