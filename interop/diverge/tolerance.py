"""When a recorded tensor differs from the reference's: the limits, by dtype and phase, and why each.

Differences are measured relative to the reference tensor's largest magnitude (``max_rel_diff`` =
``max_abs_diff`` / max |reference|), not element by element: an element near zero would make any rounding an
unbounded relative difference. An element NaN or infinite on one side only is a divergence whatever the limit.

* ``init``: parameters before the first step come from the same seeded generator on both sides; float32 at most
  1e-6 (a copy or a sharded initialisation rounds no element; this leaves room for a shard's arithmetic).
* ``forward``: float32 at most 1e-5. Splitting a batch over ranks, a tensor-parallel row-wise sum, another
  kernel blocking re-associate float32 sums: ~1e-7 relative per layer, a few layers deep.
* ``input_grad`` and ``param_grad``: float32 at most 1e-4, the rule ``hybrid plan --run`` applies to gradients
  (:mod:`interop.live.agreement`): a gradient is a sum over the batch, re-associated by every split.
* ``update``: in units of the reference's optimizer step (the root mean square of its update), at most a tenth
  of a step on more than 0.1 % of the elements: Adam moves an element whose gradient is rounding noise by a
  whole step in a direction the rounding picks (:mod:`interop.live.agreement`'s parameter rule).

Lower precisions scale the float32 limits to their own rounding: bfloat16 (8 bits of mantissa) at least 2e-2,
float16 at least 2e-3; float64 one hundredth of float32's. Gradients in the lower precisions at least 2.5 times
that: a gradient sums the batch's rounded products, whose error grows as the unit roundoff (2^-8 for bfloat16)
times the root of the rows summed (3e-2 at 64 rows); FSDP2 under bfloat16 mixed precision, its batch split over
2 ranks, measured 2.4e-2 on a norm's gradient. A tensor is judged at the lower of its own precision
and the lowest its run computed module outputs in (:func:`judged_dtype`): under mixed precision (FSDP2's
``MixedPrecisionPolicy``, autocast) a float32 gradient or upcast logit carries bfloat16's rounding.
"""

from __future__ import annotations

from interop.live.agreement import FLOOR, GRADIENT_FLOOR
from interop.live.agreement import TOLERANCE as AGREEMENT

FLOAT32 = {"init": 1e-6, "forward": 1e-5, "input_grad": AGREEMENT.grads, "param_grad": AGREEMENT.grads}
UPDATE_STEP = AGREEMENT.param_step
"""An update element differs when it is more than this many reference steps from the reference's."""
UPDATE_SHARE = AGREEMENT.param_share
"""The share of update elements that may differ."""


PRECISION = {"float64": 3, "float32": 2, "float16": 1, "bfloat16": 0}
"""Float dtypes from the finest rounding to the coarsest (float16 has 3 more mantissa bits than bfloat16)."""


def judged_dtype(dtype: str, computed: str | None) -> str:
    """The dtype whose limit a tensor of ``dtype`` is judged by, when its run computed in ``computed`` at the
    lowest (None: as its own)."""
    if computed is None or dtype not in PRECISION or computed not in PRECISION:
        return dtype
    return computed if PRECISION[computed] < PRECISION[dtype] else dtype


def lowest_computed(points) -> str | None:
    """The lowest float precision among the recorded ``forward`` points' tensors (None when all are float64 or
    not float)."""
    seen = {s.dtype for p in points if p["phase"] == "forward" for _, s in p["tensors"]} & set(PRECISION)
    return min(seen, key=PRECISION.get, default=None)


def limit(phase: str, dtype: str) -> float:
    """The largest ``max_rel_diff`` that still agrees, for phases other than ``update``."""
    base = FLOAT32[phase]
    if dtype == "float64":
        return base / 100
    floor = GRADIENT_FLOOR if phase in ("input_grad", "param_grad") else FLOOR
    return max(base, floor.get(dtype, 0.0))


def describe() -> str:
    """The rule in words, for the report."""
    parts = ", ".join(f"{phase} {value:.0e}" for phase, value in FLOAT32.items())
    return (f"max |difference| relative to the reference's largest |element|: float32 {parts}; bfloat16 at "
            f"least {FLOOR['bfloat16']:g} (gradients {GRADIENT_FLOOR['bfloat16']:g}), float16 at least "
            f"{FLOOR['float16']:g} (gradients {GRADIENT_FLOOR['float16']:g}), float64 1/100 of float32's, each "
            f"tensor at the lowest precision its run computed in; "
            f"update: at most {100 * UPDATE_SHARE:g} % of the elements more than {UPDATE_STEP:g} of the "
            f"reference's RMS step apart; a NaN or inf on one side only always differs")
