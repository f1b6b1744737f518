"""What one block costs on one chip kind: its profile's ops priced by the cost model.

:func:`block_cost` prices every op of a :class:`~planner.profile.BlockProfile`
with ``devices.estimate`` (roofline with efficiency curves, catalogue figures)
under an :class:`Execution`: the precision recipe (:data:`planner.precision.PRECISIONS`:
FP8 matmuls with their casts, the rest in BF16) and the step-level efficiencies of
:mod:`planner.fitted_efficiency` (fitted per chip family and op class, the
same for every model). Ops that sequence parallelism divides by tp are charged
``1/tp`` of their traced time.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterator

import devices
import devices.cost
from devices.figure import Figure
from planner.fitted_efficiency import FITTED, StepEfficiency, step_efficiency
from planner.precision import Precision, check_precision
from planner.profile import BlockProfile
from planner.ring_attention import ring_steps

_GEMM = ("matmul",)
_ATTENTION = ("attention", "attention_backward", "attention_math")


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """How a block's ops run on a chip: the precision recipe and the step-level efficiencies."""

    precision: str = "bfloat16"
    """A training precision of :data:`~planner.precision.PRECISIONS`: ``bfloat16``, or ``fp8``: matmuls in FP8
    with a scaling pass (amax) and a cast of each input, attention and everything else in BF16, as FP8
    training recipes (Transformer Engine) do."""
    calibrated: bool = True
    """Apply the fitted step efficiencies (:mod:`planner.fitted_efficiency`); False: the
    per-op cost model alone, as the in-process runner's timeline prices ops."""

    def __post_init__(self) -> None:
        check_precision(self.precision)


@dataclass(frozen=True, slots=True)
class BlockCost:
    """Modelled seconds of one block for one microbatch on one chip (a model, never a measurement)."""

    kind: str
    forward: float
    """Seconds of one forward."""
    backward: float
    """Seconds of one backward."""
    forward_gemm: float
    """Of the forward, seconds in matmuls (what TP communication can overlap)."""
    backward_gemm: float
    forward_attention: float
    """Of the forward, seconds in attention (what a CP ring exchange can overlap)."""
    backward_attention: float
    forward_pointwise: float
    """Of the forward, seconds outside matmuls and attention (what selective recompute repeats)."""
    flops: float
    """FLOPs executed by forward and backward on this chip."""
    projected: bool
    """True when a projected catalogue figure was used (e.g. every trn4 figure)."""
    sources: tuple[Figure, ...]
    """Every catalogue and efficiency figure used."""

    def recompute(self, mode: str) -> float:
        """Seconds of forward work repeated in backward under recompute ``mode``."""
        return {"none": 0.0, "selective": self.forward_pointwise, "full": self.forward}[mode]


_CACHE: dict[tuple[int, str, Execution], tuple[BlockProfile, BlockCost]] = {}


def block_cost(profile: BlockProfile, kind: str, execution: Execution = Execution()) -> BlockCost:
    """Price ``profile`` on chip ``kind`` (cached per profile, kind and execution)."""
    key = (id(profile), kind, execution)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    cost = _price(profile, devices.chip(kind).kind, execution)
    _CACHE[key] = (profile, cost)
    return cost


def cache_clear() -> None:
    """Forget priced blocks (after the step efficiencies change)."""
    _CACHE.clear()


@contextmanager
def use(efficiencies: dict[str, StepEfficiency]) -> Iterator[None]:
    """Price with other step efficiencies (by family) inside the block (fitting, tests)."""
    saved = dict(FITTED)
    FITTED.clear()
    FITTED.update(efficiencies)
    step_efficiency.cache_clear()
    cache_clear()
    try:
        yield
    finally:
        FITTED.clear()
        FITTED.update(saved)
        step_efficiency.cache_clear()
        cache_clear()


def _cast_matmuls(records, precision: Precision):
    low = precision.matmul_dtype
    out = []
    for r in records:
        if devices.cost.classify(r.op)[0] in _GEMM and r.dtype in ("bfloat16", "float16", "float32"):
            act = r.shapes[0]
            # current scaling: an amax pass over the input, then the cast to the low precision
            out.append(devices.cost.OpRecord("aten::amax", (act,), r.dtype, ((),)))
            out.append(devices.cost.OpRecord("aten::_to_copy", (act,), r.dtype, (act,),
                                             MappingProxyType({"dtype": low})))
            out.append(devices.cost.OpRecord(r.op, r.shapes, low, r.out_shapes, r.args))
        else:
            out.append(r)
    return out


def _estimate(kind: str, rec) -> devices.cost.Estimate:
    return devices.cost.estimate(kind, rec.op, rec.shapes, rec.dtype, out_shapes=rec.out_shapes, args=rec.args)


def _estimates(kind: str, rec, profile: BlockProfile) -> list:
    """The cost model's estimates for one record: one, or a context-parallel ring's kernels and merges
    (:func:`planner.ring_attention.ring_steps`; each step its slowest form)."""
    steps = ring_steps(rec, profile.shard)
    if steps is None:
        return [_estimate(kind, rec)]
    return [max((_estimate(kind, alt) for alt in step), key=lambda e: e.seconds) for step in steps]


def _price(profile: BlockProfile, kind: str, execution: Execution) -> BlockCost:
    eff: StepEfficiency | None = step_efficiency(kind) if execution.calibrated else None
    precision = check_precision(execution.precision)
    tp = profile.shard.tp
    n_forward = len(profile.forward)
    sources: dict[int, Figure] = {}
    totals = {"forward": [0.0, 0.0, 0.0, 0.0], "backward": [0.0, 0.0, 0.0, 0.0]}
    flops = 0.0
    projected = False
    for phase, records, offset in (("forward", profile.forward, 0), ("backward", profile.backward, n_forward)):
        acc = totals[phase]
        for i, r in enumerate(records):
            weight = 1.0 / tp if (offset + i) in profile.sequence_sharded else 1.0
            expanded = _cast_matmuls((r,), precision) if precision.matmul_dtype else (r,)
            for e in (e for rec in expanded for e in _estimates(kind, rec, profile)):
                if e.category in ("view", "none"):
                    continue
                seconds = e.seconds * weight
                if eff is not None:
                    factor = eff.factor(e.category, e.dtype)
                    if factor is not None:
                        seconds *= factor.value
                        sources[id(factor)] = factor
                for fig in e.sources:
                    sources[id(fig)] = fig
                projected |= e.projected
                flops += e.flops * weight
                acc[0] += seconds
                if e.category in _GEMM:
                    acc[1] += seconds
                elif e.category in _ATTENTION:
                    acc[2] += seconds
                else:
                    acc[3] += seconds
    f, b = totals["forward"], totals["backward"]
    return BlockCost(kind=kind, forward=f[0], backward=b[0], forward_gemm=f[1], backward_gemm=b[1],
                     forward_attention=f[2], backward_attention=b[2], forward_pointwise=f[3], flops=flops,
                     projected=projected, sources=tuple(sources.values()))


__all__ = ["BlockCost", "Execution", "block_cost", "cache_clear"]
