"""Pipeline schedules and their simulation: when each stage runs each microbatch.

A schedule is, per physical stage, the order of its actions: forward or
backward of (chunk, microbatch). :func:`actions` builds GPipe, 1F1B and
interleaved 1F1B (Megatron's virtual pipeline: ``v`` chunks per stage, chunk
``c`` of stage ``s`` being virtual stage ``c * P + s``). :func:`simulate` plays
it: an action starts when its stage is free and its input has arrived (the
previous virtual stage's forward, or the next one's backward, plus the
point-to-point transfer), which places uneven stages exactly. The result gives
every stage's busy time, its idle time (bubble) and its peak number of
microbatches in flight per chunk (what activation memory is sized by).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

SCHEDULES = ("gpipe", "1f1b", "interleaved")
"""Accepted schedule names."""

Action = tuple[int, int, int]
"""(phase, chunk, microbatch): phase 0 forward, 1 backward."""


def actions(schedule: str, stages: int, chunks: int, microbatches: int) -> list[list[Action]]:
    """Per stage, its actions in execution order."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: unknown {schedule!r}; accepted: {', '.join(SCHEDULES)}")
    if schedule != "interleaved" and chunks != 1:
        raise ValueError(f"schedule: {schedule} runs one chunk per stage; {chunks} chunks need 'interleaved'")
    p, m, v = stages, microbatches, chunks
    out: list[list[Action]] = []
    for s in range(p):
        if schedule == "gpipe":
            out.append([(0, 0, i) for i in range(m)] + [(1, 0, i) for i in range(m)])
            continue
        if schedule == "1f1b":
            warm = min(p - s - 1, m)
            seq = [(0, 0, i) for i in range(warm)]
            for i in range(m - warm):
                seq += [(0, 0, warm + i), (1, 0, i)]
            seq += [(1, 0, i) for i in range(m - warm, m)]
            out.append(seq)
            continue
        total = m * v
        fwd = [_virtual(k, p, v, m, backward=False) for k in range(total)]
        bwd = [_virtual(k, p, v, m, backward=True) for k in range(total)]
        warm = min(total, (p - s - 1) * 2 + (v - 1) * p)
        seq = [(0, c, i) for c, i in fwd[:warm]]
        for k in range(total - warm):
            seq.append((0,) + fwd[warm + k])
            seq.append((1,) + bwd[k])
        seq += [(1,) + x for x in bwd[total - warm:]]
        out.append(seq)
    return out


def _virtual(k: int, p: int, v: int, m: int, backward: bool) -> tuple[int, int]:
    """Megatron's k-th (chunk, microbatch) of a stage: groups of p microbatches cycle through the chunks."""
    group = min(p, m)
    chunk = (k // group) % v
    if backward:
        chunk = v - 1 - chunk
    microbatch = (k // (group * v)) * group + k % group
    return chunk, microbatch


@dataclass(frozen=True, slots=True)
class Simulation:
    """When each stage ran what, for one step's pipeline (seconds from the step's start)."""

    end: float
    """When the last action finished."""
    busy: tuple[float, ...]
    """Per stage: seconds running forward and backward."""
    finish: tuple[float, ...]
    """Per stage: when its last action finished."""
    in_flight: tuple[tuple[int, ...], ...]
    """Per stage, per chunk: the most microbatches whose forward ran and backward had not."""
    peak_chunks: tuple[tuple[int, ...], ...]
    """Per stage: the per-chunk in-flight counts at the moment the activation total peaked."""
    last_backward: tuple[tuple[tuple[float, float], ...], ...]
    """Per stage, per chunk: (start, end) of the chunk's last backward (where gradients become ready)."""
    first_forward: tuple[tuple[float, float], ...]
    """Per stage: (start, end) of its first forward."""
    events: tuple[tuple[int, int, int, int, float, float], ...]
    """(stage, phase, chunk, microbatch, start, end) of every action, when recorded."""


def simulate(forward: Sequence[Sequence[float]], backward: Sequence[Sequence[float]], microbatches: int,
             schedule: str, *, p2p: Sequence[float] = (), activation: Sequence[Sequence[float]] | None = None,
             record: bool = False) -> Simulation:
    """Play a pipeline schedule.

    ``forward[s][c]`` / ``backward[s][c]``: seconds of one microbatch of chunk
    ``c`` on stage ``s``; ``p2p[k]``: seconds to hand a microbatch's activation
    (or its gradient) from virtual stage ``k`` to ``k + 1``; ``activation[s][c]``:
    bytes a microbatch of chunk ``c`` keeps on stage ``s`` (weights the peak).
    """
    p = len(forward)
    v = len(forward[0])
    m = microbatches
    seqs = actions(schedule, p, v, m)
    nv = p * v
    hops = list(p2p) + [0.0] * max(0, nv - 1 - len(p2p))
    # done[phase][virtual stage][microbatch] = finish time
    done = [[[-1.0] * m for _ in range(nv)] for _ in range(2)]
    ptr = [0] * p
    free = [0.0] * p
    busy = [0.0] * p
    finish = [0.0] * p
    live = [[0] * v for _ in range(p)]
    peak = [[0] * v for _ in range(p)]
    peak_at = [[0] * v for _ in range(p)]
    peak_bytes = [-1.0] * p
    last_b = [[(0.0, 0.0)] * v for _ in range(p)]
    first_f = [(0.0, 0.0)] * p
    events: list[tuple[int, int, int, int, float, float]] = []
    remaining = sum(len(q) for q in seqs)
    while remaining:
        progressed = False
        for s in range(p):
            q = seqs[s]
            while ptr[s] < len(q):
                phase, c, i = q[ptr[s]]
                vs = c * p + s
                if phase == 0:
                    if vs == 0:
                        ready = 0.0
                    else:
                        t = done[0][vs - 1][i]
                        if t < 0:
                            break
                        ready = t + hops[vs - 1]
                    length = forward[s][c]
                else:
                    own = done[0][vs][i]
                    if own < 0:
                        break
                    if vs == nv - 1:
                        ready = own
                    else:
                        t = done[1][vs + 1][i]
                        if t < 0:
                            break
                        ready = max(own, t + hops[vs])
                    length = backward[s][c]
                start = max(free[s], ready)
                end = start + length
                done[phase][vs][i] = end
                free[s] = end
                busy[s] += length
                finish[s] = end
                if phase == 0:
                    if i == 0 and c == 0:
                        first_f[s] = (start, end)
                    live[s][c] += 1
                    if live[s][c] > peak[s][c]:
                        peak[s][c] = live[s][c]
                    if activation is not None:
                        total = sum(live[s][k] * activation[s][k] for k in range(v))
                        if total > peak_bytes[s]:
                            peak_bytes[s] = total
                            peak_at[s] = list(live[s])
                else:
                    live[s][c] -= 1
                    last_b[s][c] = (start, end)  # a stage runs its backwards in order: the last one wins
                if record:
                    events.append((s, phase, c, i, start, end))
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocked with {p} stages, {v} chunks, {m} microbatches")
    return Simulation(end=max(finish), busy=tuple(busy), finish=tuple(finish),
                      in_flight=tuple(tuple(x) for x in peak),
                      peak_chunks=tuple(tuple(x) if activation is not None else tuple(peak[s])
                                        for s, x in enumerate(peak_at)),
                      last_backward=tuple(tuple(x) for x in last_b), first_forward=tuple(first_f),
                      events=tuple(events))


def interleaved_bound(f: Sequence[float], b: Sequence[float], m: int, stages: int) -> float:
    """A lower bound on an interleaved step: ``f``, ``b`` per virtual stage (chunk ``c`` of stage ``s`` at
    ``c * stages + s``)."""
    v = len(f) // stages
    best = 0.0
    before_f = before_b = 0.0
    for s in range(stages):
        work = sum(f[c * stages + s] + b[c * stages + s] for c in range(v))
        best = max(best, before_f + m * work + before_b)
        before_f += f[s]
        before_b += b[s]
    return best


def lower_bound(f: Sequence[float], b: Sequence[float], m: int) -> float:
    """A lower bound on a GPipe / 1F1B step with stage times ``f``, ``b`` and ``m`` microbatches."""
    best = 0.0
    before_f = before_b = 0.0
    for fj, bj in zip(f, b):
        best = max(best, before_f + m * (fj + bj) + before_b)
        before_f += fj
        before_b += bj
    return best


def pipeline_bound(forward: Sequence[float], backward: Sequence[float], microbatches: int, stages: int) -> float:
    """A lower bound on a step's pipeline time from per-virtual-stage times alone (whatever the communication,
    which only adds): :func:`lower_bound` for one chunk per stage, :func:`interleaved_bound` for several."""
    if len(forward) == stages:
        return lower_bound(forward, backward, microbatches)
    return interleaved_bound(forward, backward, microbatches, stages)


__all__ = ["SCHEDULES", "Simulation", "actions", "interleaved_bound", "lower_bound", "pipeline_bound", "simulate"]
