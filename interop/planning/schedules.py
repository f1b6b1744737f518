"""Pipeline schedules as per-rank action orders (pure Python, no torch).

A pipeline *rank* is one group of slots (its data-parallel replicas, each a
tensor-parallel group) that holds one stage, or ``v`` stages under the
interleaved schedule (stage ``j`` sits on rank ``j % p``). A schedule is, for
each rank, the order in which it runs the forward (``F``) and backward (``B``)
of each (stage, microbatch). The orders are the ones torch.distributed.pipelining
runs (``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``), without
the idle placeholders torch pads its tables with: here idleness is not part of
the order, it follows from the dependencies when the order is timed.

Both the in-process runner and the step model consume :func:`rank_orders`, so a
prediction and a run execute the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved")
"""Schedule names accepted by the planner (``"auto"`` picks one of these)."""

FORWARD, BACKWARD = "F", "B"


@dataclass(frozen=True, slots=True)
class Action:
    """One unit of pipeline work: the forward or backward of one microbatch through one stage."""

    kind: str
    """``"F"`` or ``"B"``."""
    stage: int
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


def check_schedule(schedule: str, ranks: int, microbatches: int, virtual: int = 1) -> None:
    """Raise ValueError naming the argument when the combination cannot run."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)} (or 'auto'), got {schedule!r}")
    if ranks < 1:
        raise ValueError(f"ranks: a pipeline needs at least one rank, got {ranks}")
    if microbatches < 1:
        raise ValueError(f"microbatches: expected a positive count, got {microbatches}")
    if virtual < 1:
        raise ValueError(f"virtual: expected at least one stage per rank, got {virtual}")
    if schedule != "interleaved" and virtual != 1:
        raise ValueError(f"virtual: {schedule} runs one stage per rank; only 'interleaved' takes virtual > 1")
    if schedule == "interleaved":
        rounds = max(1, microbatches // ranks)
        if microbatches % rounds:
            raise ValueError(f"microbatches: interleaved 1F1B needs a multiple of its rounds ({rounds}) "
                             f"for {ranks} ranks, got {microbatches}")


def rank_orders(schedule: str, ranks: int, microbatches: int, virtual: int = 1) -> list[list[Action]]:
    """Per rank, the order of its actions. ``virtual`` is the stages per rank (interleaved only)."""
    check_schedule(schedule, ranks, microbatches, virtual)
    if schedule == "gpipe":
        return [[Action(FORWARD, r, i) for i in range(microbatches)]
                + [Action(BACKWARD, r, i) for i in range(microbatches)] for r in range(ranks)]
    if schedule == "1f1b":
        return [_one_f_one_b(r, ranks, microbatches) for r in range(ranks)]
    return [_interleaved(r, ranks, microbatches, virtual) for r in range(ranks)]


def _one_f_one_b(rank: int, ranks: int, m: int) -> list[Action]:
    warmup = min(ranks - 1 - rank, m)
    order = [Action(FORWARD, rank, i) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        order.append(Action(FORWARD, rank, f))
        order.append(Action(BACKWARD, rank, b))
        f, b = f + 1, b + 1
    order.extend(Action(BACKWARD, rank, i) for i in range(b, m))
    return order


def _interleaved(rank: int, ranks: int, m: int, v: int) -> list[Action]:
    # torch.distributed.pipelining.schedules.ScheduleInterleaved1F1B (depth first, Megatron's order).
    rounds = max(1, m // ranks)
    per_round = m // rounds
    total = v * m
    warmup = min((v - 1) * per_round + 2 * (ranks - 1 - rank), total)

    def forward_stage(step: int) -> int:
        return ((step // per_round) % v) * ranks + rank

    def backward_stage(step: int) -> int:
        return (v - 1 - ((step - warmup) // per_round) % v) * ranks + rank

    fwd_mb: dict[int, int] = {}
    bwd_mb: dict[int, int] = {}
    order: list[Action] = []

    def forward(step: int) -> None:
        s = forward_stage(step)
        order.append(Action(FORWARD, s, fwd_mb.get(s, 0)))
        fwd_mb[s] = fwd_mb.get(s, 0) + 1

    def backward(step: int) -> None:
        s = backward_stage(step)
        order.append(Action(BACKWARD, s, bwd_mb.get(s, 0)))
        bwd_mb[s] = bwd_mb.get(s, 0) + 1

    for step in range(warmup):
        forward(step)
    for step in range(warmup, total):
        forward(step)
        backward(step)
    for step in range(total, total + warmup):
        backward(step)
    return order


def issue_order(orders: list[list[Action]], stages: int) -> list[tuple[int, Action]]:
    """One host order of every (rank, action) that respects the pipeline's dependencies.

    ``F(s, i)`` needs ``F(s-1, i)``; ``B(s, i)`` needs ``B(s+1, i)`` (the last stage's
    backward needs its own forward). Ranks are visited round-robin, each issuing its
    next action once that action's producer is issued. Timed with per-rank clocks, any
    such order gives the same times, so the runner issues work in this one.
    """
    done: set[tuple[str, int, int]] = set()
    pos = [0] * len(orders)
    out: list[tuple[int, Action]] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r, order in enumerate(orders):
            while pos[r] < len(order):
                a = order[pos[r]]
                if a.kind == FORWARD:
                    ready = a.stage == 0 or (FORWARD, a.stage - 1, a.microbatch) in done
                else:
                    ready = ((FORWARD, a.stage, a.microbatch) in done if a.stage == stages - 1
                             else (BACKWARD, a.stage + 1, a.microbatch) in done)
                if not ready:
                    break
                done.add((a.kind, a.stage, a.microbatch))
                out.append((r, a))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: str(o[pos[r]]) for r, o in enumerate(orders) if pos[r] < len(o)}
            raise RuntimeError(f"pipeline schedule deadlocks: next actions per rank {stuck}")
    return out


def in_flight(order: list[Action]) -> int:
    """The largest number of microbatches whose forward ran and backward has not, along one rank's order
    (the activations the rank holds at its peak)."""
    live = peak = 0
    for a in order:
        live += 1 if a.kind == FORWARD else -1
        peak = max(peak, live)
    return peak
