"""Memory per chip of a stage, and the activation recompute that makes it fit.

Weights, gradients and optimizer state (sharded by the ZeRO stage, :data:`~planner.optimizers.OPTIMIZERS`
for the state and master bytes), activations of the microbatches in flight at the schedule's peak
(:func:`live_frontier`), and the transient buffers (the running block's temporaries, a recomputed layer,
FSDP's gathered parameters, the gradients autograd holds for a shared parameter). :func:`choose_recompute`
applies a stage's recompute, or with ``"auto"`` the cheapest that fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.blocks import ModelBlocks
from planner.optimizers import OPTIMIZERS
from planner.profile import BlockProfile
from planner.schedule import actions
from planner.stage import Stage
from planner.step.config import StepConfig
from planner.step.prepare import Chunk, PreparedStage, Tie
from planner.step.results import Memory


@dataclass(frozen=True, slots=True)
class RecomputePlan:
    """A stage's recompute and the memory it leaves."""

    mode: str
    """``none``, ``selective``, ``full`` or ``full:K``."""
    modes: list[list[str]]
    """Per chunk, per block: ``none``, ``selective`` or ``full``."""
    memory: Memory
    in_flight: tuple[int, ...]
    """Per chunk: microbatches whose activations are held at the activation peak."""


def choose_recompute(blocks: ModelBlocks, prepared: PreparedStage, stages: int, config: StepConfig, spec,
                     grad_bytes: int) -> RecomputePlan:
    """The stage's recompute (its own, else the step's); ``auto``: the cheapest whose memory fits (none,
    selective, then whole layers: memory falls as K grows, so bisect for the fewest that fit), else
    ``full`` (which does not fit either)."""
    stage = prepared.stage
    asked = stage.recompute or config.recompute
    layer_pos = [_layer_positions(blocks, c) for c in stage.chunks]
    frontier = live_frontier(config.schedule, stages, len(stage.chunks), config.microbatches, prepared.index)

    def attempt(mode: str) -> RecomputePlan:
        modes = [_recompute_modes(ch, lp, mode) for ch, lp in zip(prepared.chunks, layer_pos)]
        memory, inflight = stage_memory(stage, prepared.chunks, modes, frontier, config, grad_bytes,
                                        prepared.fsdp is not None, spec,
                                        receives=prepared.index > 0 or len(stage.chunks) > 1, ties=prepared.ties)
        return RecomputePlan(mode, modes, memory, inflight)

    if asked != "auto":
        return attempt(asked)
    chosen = attempt("none")
    if not chosen.memory.fits:
        chosen = attempt("selective")
    most = max(map(len, layer_pos), default=0)
    if chosen.memory.fits or not most:
        return chosen
    full = attempt("full")
    if not full.memory.fits:
        return full
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        if attempt(f"full:{mid}").memory.fits:
            hi = mid
        else:
            lo = mid + 1
    return attempt(f"full:{lo}") if lo < most else full


def _layer_positions(blocks: ModelBlocks, chunk: range) -> list[int]:
    return [k for k, i in enumerate(chunk) if i in blocks.layers]


def _recompute_modes(chunk: Chunk, layers: list[int], mode: str) -> list[str]:
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


def frontier_microbatches(schedule: str, stages: int, chunks: int, microbatches: int, stage: int) -> int:
    """A microbatch count whose schedule passes ``stage`` through the same in-flight states as ``microbatches``.

    GPipe holds every microbatch at its peak, so its states are its own. 1F1B warms up with
    ``stages - stage - 1`` forwards, then alternates: past ``stages`` microbatches no new state appears.
    Interleaved 1F1B (microbatches a multiple of ``stages``) warms up with a fixed number of forwards,
    then alternates one forward and one backward whose chunks repeat every ``stages * chunks`` pairs (each
    chunk gets as many forwards as backwards per period, so the in-flight counts repeat too), then drains
    from a state the period already visited: once the steady part holds a whole period, a longer step
    adds none."""
    p, v, m = stages, chunks, microbatches
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(m, p)
    warm = (p - stage - 1) * 2 + (v - 1) * p
    shortest = p * -(-(warm + p * v) // (p * v))  # the least multiple of p whose steady part holds a period
    return m if m <= shortest or m % p else shortest


_FRONTIERS: dict[tuple, tuple[tuple[int, ...], ...]] = {}


def live_frontier(schedule: str, stages: int, chunks: int, microbatches: int, stage: int):
    """The per-chunk in-flight counts a stage passes through that no other state dominates (cached):
    the activation peak for any per-chunk sizes is reached at one of them. The states a long step passes
    through are those of a short one (:func:`frontier_microbatches`), so the cost does not grow with the
    microbatches."""
    if schedule == "gpipe" and chunks == 1 and microbatches >= 1:
        return ((microbatches,),)  # every forward, then every backward: the peak holds them all
    microbatches = frontier_microbatches(schedule, stages, chunks, microbatches, stage)
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


_SAVED: dict[tuple[int, str], tuple[BlockProfile, int]] = {}


def _saved(profile: BlockProfile, mode: str) -> int:
    """``profile.saved_bytes(mode)``, cached (the auto-recompute search asks many times)."""
    key = (id(profile), mode)
    hit = _SAVED.get(key)
    if hit is None or hit[0] is not profile:
        hit = _SAVED[key] = (profile, profile.saved_bytes(mode))
    return hit[1]


def stage_memory(stage: Stage, chunks: list[Chunk], modes: list[list[str]], frontier, config: StepConfig,
                 grad_bytes: int, fsdp: bool, spec, receives: bool = False,
                 ties: tuple[tuple[Tie, ...], ...] = ()) -> tuple[Memory, tuple[int, ...]]:
    """Modelled bytes per chip of ``stage`` under recompute ``modes`` (per chunk, per block), and the per-chunk
    in-flight counts at the activation peak (of ``frontier``, :func:`live_frontier`)."""
    dp, ep = stage.dp, stage.ep
    dense = sum(pr.params - pr.expert_params for ch in chunks for pr in ch.profiles)
    expert = sum(pr.expert_params for ch in chunks for pr in ch.profiles)
    param_bytes = sum(pr.param_bytes for ch in chunks for pr in ch.profiles)
    per_param = param_bytes / max(1, dense + expert)
    dense -= sum(t.elements * (len(t.holders) - 1) for chunk_ties in ties for t in chunk_ties)  # one tensor each
    optimizer = OPTIMIZERS[config.optimizer]
    master = optimizer.master_bytes if config.master_weights else 0
    state = optimizer.state_bytes() if config.state_bytes is None else config.state_bytes
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
        later = 0  # this microbatch's activations of the chunk's later blocks: freed before a block's backward
        for k in reversed(range(len(ch.profiles))):
            pr, md = ch.profiles[k], cm[k]
            # The running block's temporaries (where measured), beside what the microbatch still keeps. A
            # parameter several blocks share holds no gradient of its own between them: each holder adds its
            # part into the one gradient as its backward makes it (interop.live.pipeline.untie_holders).
            transient = max(transient, pr.workspace - (later if at[c] else 0))
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


__all__ = ["RecomputePlan", "choose_recompute", "frontier_microbatches", "live_frontier", "stage_memory"]
