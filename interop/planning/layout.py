"""Where a plan puts the model: stages over block ranges, their replicas and slots (pure Python).

A :class:`Stage` holds blocks ``start..stop-1`` on one pipeline rank. It runs as
``dp`` data-parallel replicas; each replica is a group of ``tp`` slots that
splits the stage's linear layers (tensor parallelism). Stages may differ in
``dp`` and ``tp`` (asymmetric data parallelism): a microbatch's rows are split
evenly over the replicas of each stage and re-split where the next stage has a
different count. :class:`Layout` adds the schedule and the batch split.
"""

from __future__ import annotations

from dataclasses import dataclass

from interop.planning.schedules import check_schedule


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage of a plan."""

    index: int
    start: int
    """First block (inclusive)."""
    stop: int
    """Last block (exclusive)."""
    replicas: tuple[tuple[int, ...], ...]
    """Per data-parallel replica, the slots of its tensor-parallel group (the first one receives the
    stage's inputs and sends its outputs)."""
    kinds: tuple[str, ...] = ()
    """Chip kind of each replica's slots (one per replica, a replica being of one kind)."""
    rank: int = -1
    """The pipeline rank holding it (-1: the stage's own index)."""
    microbatch: int = 0
    """Rows of one microbatch each replica processes (filled in by :class:`Layout`)."""
    block_names: tuple[str, ...] = ()

    @property
    def dp(self) -> int:
        return len(self.replicas)

    @property
    def tp(self) -> int:
        return len(self.replicas[0])

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(s for r in self.replicas for s in r)

    @property
    def blocks(self) -> range:
        return range(self.start, self.stop)

    @property
    def pipeline_rank(self) -> int:
        return self.index if self.rank < 0 else self.rank


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
    def ranks(self) -> int:
        return len({s.pipeline_rank for s in self.stages})

    @property
    def virtual(self) -> int:
        return len(self.stages) // self.ranks

    @property
    def microbatch_rows(self) -> int:
        return self.global_batch // self.microbatches

    @property
    def slots(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s for st in self.stages for s in st.slots))

    def validate(self, n_blocks: int, n_slots: int | None = None) -> None:
        """Raise ValueError naming what does not fit together."""
        if not self.stages:
            raise ValueError("stages: a layout needs at least one stage")
        if self.stages[0].start != 0 or self.stages[-1].stop != n_blocks:
            raise ValueError(f"stages: must cover blocks 0..{n_blocks - 1}, got "
                             f"{self.stages[0].start}..{self.stages[-1].stop - 1}")
        for a, b in zip(self.stages, self.stages[1:]):
            if a.stop != b.start:
                raise ValueError(f"stages: stage {a.index} ends at block {a.stop} but stage {b.index} starts at "
                                 f"{b.start}; stages are contiguous block ranges")
        for st in self.stages:
            if st.start >= st.stop:
                raise ValueError(f"stages: stage {st.index} holds no block ({st.start}..{st.stop})")
            if not st.replicas or any(len(r) != len(st.replicas[0]) or not r for r in st.replicas):
                raise ValueError(f"stages: stage {st.index}'s replicas must be non-empty slot groups of one size")
            if n_slots is not None:
                bad = [s for s in st.slots if not 0 <= s < n_slots]
                if bad:
                    raise ValueError(f"stages: stage {st.index} names slots {bad} outside the rack (0..{n_slots - 1})")
            if self.microbatch_rows % st.dp:
                raise ValueError(f"microbatches: a microbatch of {self.microbatch_rows} rows does not split over "
                                 f"stage {st.index}'s {st.dp} data-parallel replicas")
        if self.global_batch % self.microbatches:
            raise ValueError(f"microbatches: {self.microbatches} does not divide the global batch "
                             f"({self.global_batch} rows)")
        ranks = self.ranks
        check_schedule(self.schedule, ranks, self.microbatches, self.virtual)
        by_rank: dict[int, tuple] = {}
        for st in self.stages:
            if st.pipeline_rank != st.index % ranks:
                raise ValueError(f"stages: stage {st.index} sits on rank {st.pipeline_rank}; with {ranks} ranks "
                                 f"stage j sits on rank j % {ranks}")
            if by_rank.setdefault(st.pipeline_rank, st.replicas) != st.replicas:
                raise ValueError(f"stages: the stages of rank {st.pipeline_rank} must sit on the same slots")
        used: dict[int, int] = {}
        for st in self.stages:
            for s in st.slots:
                if used.setdefault(s, st.pipeline_rank) != st.pipeline_rank:
                    raise ValueError(f"stages: slot {s} is used by ranks {used[s]} and {st.pipeline_rank}")
