"""Pipeline timing of a step: each chunk's forward and backward per microbatch (with FSDP / ZeRO-2 collectives on
a second stream), the point-to-point hops between virtual stages, and the schedule played over them."""

from __future__ import annotations

from dataclasses import dataclass

from planner.comm import CommPricer
from planner.schedule import Simulation, simulate
from planner.step.memory import RecomputePlan
from planner.step.prepare import Chunk, PreparedStage

SIMULATE_LIMIT = 4096
"""Most schedule actions simulated one by one; longer steps are extrapolated from two shorter ones
(the steady state of a schedule repeats every ``stages`` microbatches)."""


@dataclass(frozen=True, slots=True)
class StageTimes:
    """One stage's per-microbatch times under its recompute."""

    forward: tuple[float, ...]
    """Per chunk: seconds of one microbatch's forward, exposed TP/CP/EP/FSDP communication included."""
    backward: tuple[float, ...]
    compute: float
    """Seconds computing (forward, backward, recompute) per microbatch over the chunks."""
    fsdp: float
    """Exposed FSDP / ZeRO-2 seconds per microbatch over the chunks."""


def stage_times(prepared: PreparedStage, plan: RecomputePlan) -> StageTimes:
    """Per-microbatch forward and backward of each chunk of ``prepared`` under ``plan``."""
    times = [_chunk_times(ch, md, prepared.fsdp[c] if prepared.fsdp else None,
                          prepared.zero2[c] if prepared.zero2 else None, prepared.share)
             for c, (ch, md) in enumerate(zip(prepared.chunks, plan.modes))]
    return StageTimes(tuple(t[0] for t in times), tuple(t[1] for t in times), sum(t[2] for t in times),
                      sum(t[3] for t in times))


def hops(prepared: list[PreparedStage], pricer: CommPricer) -> tuple[float, ...]:
    """Point-to-point sends between consecutive virtual stages: the last block's output, first slot to first
    slot (virtual stage ``k`` is chunk ``k // p`` of stage ``k % p``)."""
    p, v = len(prepared), len(prepared[0].chunks)
    out = []
    for k in range(p * v - 1):
        c, s = divmod(k, p)
        ns = (k + 1) % p
        nbytes = prepared[s].chunks[c].profiles[-1].output_bytes
        out.append(pricer.send(nbytes, prepared[s].stage.slots[0], prepared[ns].stage.slots[0]))
    return tuple(out)


def _chunk_times(chunk: Chunk, modes: list[str], fsdp: list[tuple[float, float]] | None,
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
    fwd = two_streams(f, ag, [0.0] * len(f), share) if fsdp else plain_f
    bwd = two_streams(b[::-1], ag[::-1] if fsdp else [0.0] * len(b), rs[::-1], share)
    return fwd, bwd, compute, (fwd - plain_f) + (bwd - plain_b)


def two_streams(compute: list[float], before: list[float], after: list[float], share: float = 1.0) -> float:
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


def play_schedule(forward, backward, m: int, schedule: str, hops, record: bool) -> Simulation:
    """The pipeline schedule played (:func:`planner.simulate`): action by action when short or recorded; a long
    step from two short ones, since its steady state repeats every ``stages`` microbatches (the cost does not
    grow with the microbatches)."""
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


__all__ = ["SIMULATE_LIMIT", "StageTimes", "hops", "play_schedule", "stage_times", "two_streams"]
