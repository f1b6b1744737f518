"""What a plan runs: the step model's stages, the schedule and the batch split (pure Python).

A :class:`Layout` is the part of a plan the runner and the export need: the
pipeline stages (:class:`planner.Stage`: block ranges per virtual chunk,
one chip kind, slots ordered replica-major then tensor rank), the schedule, the
number of microbatches and the global batch. Stages may differ in data-parallel
replicas (asymmetric data parallelism): each microbatch's rows split evenly over
a stage's replicas and re-split where the next stage has a different count.
:meth:`Layout.virtual_stages` unrolls interleaved chunks into the order the
blocks run in (chunk ``c`` of stage ``s`` is virtual stage ``c * P + s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from planner.schedule import SCHEDULES, actions
from planner.stage import Stage


@dataclass(frozen=True, slots=True)
class VirtualStage:
    """One contiguous block range in pipeline order, on the slots of its physical stage."""

    index: int
    start: int
    stop: int
    rank: int
    """The physical stage (pipeline rank) holding it."""
    chunk: int
    kind: str
    replicas: tuple[tuple[int, ...], ...]
    """Per data-parallel replica, its tensor-parallel slots."""

    @property
    def dp(self) -> int:
        return len(self.replicas)

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(s for r in self.replicas for s in r)


@dataclass(frozen=True, slots=True)
class Layout:
    """Stages, schedule and batch split of a plan."""

    stages: tuple[Stage, ...]
    schedule: str
    """``gpipe``, ``1f1b`` or ``interleaved``."""
    microbatches: int
    global_batch: int
    """Rows of one training step (split into ``microbatches`` equal microbatches)."""

    @property
    def chunks(self) -> int:
        return len(self.stages[0].chunks)

    @property
    def microbatch_rows(self) -> int:
        return self.global_batch // self.microbatches

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s for st in self.stages for s in st.slots))

    def virtual_stages(self) -> list[VirtualStage]:
        p = len(self.stages)
        out = []
        for c in range(self.chunks):
            for s, st in enumerate(self.stages):
                slots = tuple(st.slots)
                group = st.tp * st.cp
                replicas = tuple(slots[r * group:r * group + st.tp] for r in range(st.dp))
                rng = st.chunks[c]
                out.append(VirtualStage(c * p + s, rng.start, rng.stop, s, c, st.kind, replicas))
        return out

    def orders(self) -> list[list[tuple[str, int, int]]]:
        """Per physical stage, its actions in order: (``"F"``/``"B"``, virtual stage, microbatch)."""
        p = len(self.stages)
        return [[("F" if phase == 0 else "B", c * p + s, i) for phase, c, i in seq]
                for s, seq in enumerate(actions(self.schedule, p, self.chunks, self.microbatches))]

    def validate(self, n_blocks: int, n_slots: int | None = None) -> None:
        """Raise ValueError naming what does not fit together."""
        if not self.stages:
            raise ValueError("stages: a layout needs at least one stage")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.microbatches < 1 or self.global_batch % self.microbatches:
            raise ValueError(f"microbatches: {self.microbatches} does not divide the global batch "
                             f"({self.global_batch} rows)")
        if any(len(st.chunks) != self.chunks for st in self.stages):
            raise ValueError("stages: every stage needs the same number of chunks")
        if self.chunks > 1 and self.schedule != "interleaved":
            raise ValueError(f"schedule: {self.chunks} chunks per stage need 'interleaved', got {self.schedule!r}")
        expect = 0
        for vs in self.virtual_stages():
            if vs.start != expect:
                raise ValueError(f"stages: virtual stage {vs.index} starts at block {vs.start}, expected {expect} "
                                 "(stages are contiguous block ranges in pipeline order)")
            expect = vs.stop
        if expect != n_blocks:
            raise ValueError(f"stages: the stages cover blocks 0-{expect - 1} but the model has {n_blocks}")
        seen: dict[int, int] = {}
        for s, st in enumerate(self.stages):
            if st.cp != 1 or st.ep != 1:
                raise ValueError(f"stages: stage {s} asks for cp={st.cp}, ep={st.ep}; a live plan runs cp=ep=1")
            if n_slots is not None:
                bad = [x for x in st.slots if not 0 <= x < n_slots]
                if bad:
                    raise ValueError(f"stages: stage {s} names slots {bad} outside the rack (0..{n_slots - 1})")
            for x in st.slots:
                if seen.setdefault(x, s) != s:
                    raise ValueError(f"stages: slot {x} is used by stages {seen[x]} and {s}")
            if self.microbatch_rows % st.dp:
                raise ValueError(f"microbatches: a microbatch of {self.microbatch_rows} rows does not split over "
                                 f"stage {s}'s {st.dp} data-parallel replicas")


def layout(stages: Sequence[Stage], schedule: str, microbatches: int, global_batch: int) -> Layout:
    return Layout(tuple(stages), schedule, microbatches, global_batch)
