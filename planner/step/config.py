"""What a step does beyond its stages (:class:`StepConfig`), and the checks that stages and config fit together."""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from typing import Sequence

from planner.blocks import ModelBlocks
from planner.optimizers import GRAD_DTYPES, check_optimizer
from planner.precision import check_precision, precision_argument
from planner.schedule import SCHEDULES
from planner.stage import Stage, check_recompute

COMM_KINDS = ("tp", "cp", "ep", "dp", "pp", "host")
"""Kinds of exposed communication in a breakdown (``host``: blocks' reads of device data by the host,
:attr:`planner.profile.BlockProfile.host_reads`)."""


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
    precision: str = "bfloat16"
    """The training precision (:data:`~planner.precision.PRECISIONS`): ``bfloat16``, or ``fp8`` (FP8 matmuls,
    the rest BF16). ``dtype=`` is its deprecated spelling."""
    recompute: str = "none"
    """Activation recompute: ``none``, ``selective`` (repeat non-GEMM ops), ``full`` (repeat whole
    layers), ``full:K`` (the first K layers of every chunk, as Megatron's ``recompute_num_layers``) or
    ``auto`` (per stage, the cheapest that fits)."""
    optimizer: str = "adamw"
    """``adamw``, ``adam`` or ``sgd`` (:data:`~planner.optimizers.OPTIMIZERS`: state per parameter, kernel)."""
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
    """Optimizer state bytes per parameter (None: the optimizer's float32 state, :data:`~planner.optimizers.OPTIMIZERS`). torch's
    optimizers keep their state in the parameters' dtype: 2 x 2 bytes for AdamW on bfloat16 parameters."""
    master_weights: bool = True
    """The optimizer keeps a float32 master copy of the parameters (mixed precision). False for a model
    trained in float32, whose parameters are their own master copy (a live plan of a float32 model)."""
    record: bool = False
    """Simulate every schedule action and keep its times in :attr:`StepResult.events` (without it, a long
    step is extrapolated and its events are played again only when asked for)."""
    dtype: InitVar[str | None] = None
    """Deprecated spelling of :attr:`precision` (a FutureWarning)."""

    def __post_init__(self, dtype: str | None) -> None:
        if dtype is not None:
            object.__setattr__(self, "precision", precision_argument(
                None if self.precision == "bfloat16" else self.precision, dtype))
        for name in ("global_batch", "seq_len", "microbatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: unknown {self.schedule!r}; accepted: {', '.join(SCHEDULES)}")
        check_recompute(self.recompute)
        check_optimizer(self.optimizer)
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero: expected 0, 1, 2 or 3, got {self.zero!r}")
        if self.grad_dtype not in GRAD_DTYPES:
            raise ValueError(f"grad_dtype: unknown {self.grad_dtype!r}; accepted: {', '.join(GRAD_DTYPES)}")
        check_precision(self.precision)


def _dtype_property(self) -> str:
    """Deprecated: :attr:`precision`."""
    import warnings

    warnings.warn("StepConfig.dtype is deprecated: read StepConfig.precision", FutureWarning, stacklevel=2)
    return self.precision


StepConfig.dtype = property(_dtype_property)  # the InitVar's name read back (an InitVar is not stored)


def validate(blocks: ModelBlocks, stages: Sequence[Stage], config: StepConfig) -> None:
    """ValueError naming what of ``stages`` and ``config`` does not fit together (chunks, blocks, batch split)."""
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
        if config.global_batch % (config.microbatches * stage.dp):
            raise ValueError(f"global_batch: {config.global_batch} samples do not split into {config.microbatches} "
                             f"microbatches over stage {s}'s {stage.dp} data-parallel replicas")


__all__ = ["COMM_KINDS", "StepConfig", "validate"]
