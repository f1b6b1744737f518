"""Whether a training run agrees with its single-device reference: the rule ``hybrid plan --run`` judges by.

A plan that splits the batch (several microbatches, data-parallel replicas) sums each gradient in another order
than one slot does, so its numbers differ by float32 re-association; a plan with a bug (a skipped gradient
reduction, a wrong learning rate, a missed step) differs by whole optimizer steps. The rule tells the two apart in
units that do not depend on which CPU kernels ran (``ATEN_CPU_CAPABILITY`` default, avx2 or avx512 give other
roundings of the same sums):

* **losses**, every step: |difference| relative to the reference's loss, at most :data:`TOLERANCE` ``.loss``
  (1e-5). A mean over a batch re-associated differs by ~1e-7 relative. (A wrong step may move the next loss by
  less than that at a small lr: the parameters are where it shows whole.)
* **gradients**, first step: the largest |difference| relative to the largest gradient, at most ``.grads`` (1e-4).
  Re-association of a float32 sum over the batch moves each element by ~1e-7 of the terms summed.
* **parameters** after the last step, in units of the optimizer's own step: ``step`` = the root mean square, over
  every parameter element, of how far the reference's optimizer moved it (last step's value - initial value). An
  element *differs* when it is more than ``.param_step`` (a tenth) of a step from the reference; at most
  ``.param_share`` (0.1 %) of the elements may differ. Not a bound on every element, because Adam divides each
  element's step by its own gradient's magnitude: an element whose gradient is rounding noise (mathematically
  zero: softmax's shift invariance leaves attention's key bias without a gradient) takes a full lr-sized step in
  the direction the rounding picks, one way on one CPU and the other way on another. Such elements are a
  structural few (GPT-2: its key biases, 9,216 of 124 M, 0.007 %); a real divergence moves nearly every element
  by another step (a wrong lr: all of them; a skipped reduction: every element of a replica's gradient). An
  element NaN or infinite on one side only is never rounding: one such fails the run. Measured on the README
  flagship (GPT-2 on trn3:4+h100:4, 4 replicas, 3 AdamW steps of lr 1e-3, step 2.1e-3): its largest parameter
  difference is 0.02, 0.03 and 0.04 of a step under avx512, default and avx2 (4.5e-5 to 8.8e-5 absolute; the
  absolute bound of 1e-4 this rule replaces was reported exceeded, at 2.6e-4, by another run), none beyond 0.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from devices.dtypes import dtype_name


@dataclass(frozen=True, slots=True)
class Tolerance:
    """The rule's limits (see the module doc for why each)."""

    loss: float = 1e-5
    """|loss difference| / |reference loss|, every step."""
    grads: float = 1e-4
    """Largest |gradient difference| / largest |gradient|, first step."""
    param_step: float = 0.1
    """An element differs when it is more than this many optimizer steps from the reference."""
    param_share: float = 1e-3
    """The share of parameter elements that may differ (those whose gradient is rounding noise, moved by Adam)."""

    def describe(self) -> str:
        """The rule in words, as the verdict prints it: what is compared, in which units, the limits and why."""
        return (f"losses: |difference| relative to the loss, at most {self.loss:.0e} each step; first step's "
                f"gradients: largest |difference| relative to the largest gradient, at most {self.grads:.0e}; "
                f"parameters: in units of the optimizer's step (the RMS distance the reference's optimizer moved "
                f"them), at most {100 * self.param_share:g} % of the elements more than {self.param_step:g} step "
                f"apart, since Adam moves an element whose gradient is rounding noise by a whole step in the "
                f"direction the rounding picks, which differs between CPUs")


TOLERANCE = Tolerance()

FLOOR = {"bfloat16": 2e-2, "float16": 2e-3}
"""Relative limits a 16-bit run's values are judged by at least: its rounding (bfloat16 keeps 8 bits of mantissa)
moves a re-associated value by about this much (:mod:`interop.diverge.tolerance` says how it was measured)."""
GRADIENT_FLOOR = {dtype: 2.5 * value for dtype, value in FLOOR.items()}
"""The same for gradients, sums of the batch's rounded products (their error grows with the rows summed)."""
ROUNDING_UNITS = 2
"""A 16-bit parameter element differs only when it is also more than this many units of its format's rounding
(``finfo.eps`` times its magnitude) from the reference's: each update rounds it, one way or the other."""


@dataclass(frozen=True, slots=True)
class Agreement:
    """A run compared with its reference under :data:`TOLERANCE` (see the module doc)."""

    loss_diff: float
    """Largest |loss difference| relative to the reference's loss, over the steps."""
    grad_diff: float
    """Largest |gradient difference| of the first step, relative to the largest gradient."""
    param_diff: float
    """Largest finite |parameter difference| after the last step, absolute (a NaN where the reference has a number
    counts among the differing elements)."""
    step: float
    """The optimizer's step: RMS over the reference's parameter elements of (last value - initial value)."""
    param_steps: float
    """Largest |parameter difference| in units of :attr:`step`."""
    differing_share: float
    """Share of parameter elements more than ``TOLERANCE.param_step`` steps from the reference."""
    non_finite: int
    """Parameter elements NaN or infinite where the reference's are finite, or the other way: never rounding."""
    bitwise: bool
    matches: bool
    precision: str = "float32"
    """The coarsest floating dtype of the reference's gradients: a 16-bit one raises the loss and gradient limits
    to its rounding (:data:`FLOOR`, :data:`GRADIENT_FLOOR`)."""
    loss_limit: float = TOLERANCE.loss
    """The limit :attr:`loss_diff` was judged by."""
    grads_limit: float = TOLERANCE.grads
    """The limit :attr:`grad_diff` was judged by."""


def compare(losses, ref_losses, grads: dict, ref_grads: dict, params: dict, ref_params: dict, initial: dict,
            tolerance: Tolerance = TOLERANCE) -> Agreement:
    """Judge a run (``losses`` per step, first-step ``grads``, ``params`` after the last step) against the
    reference's, ``initial`` being the parameters both started from (name -> tensor, on the CPU; ``params`` may
    hold buffers too, compared alike). Names of ``ref_grads``/``ref_params`` missing from the run raise KeyError.
    The same judgement as :class:`Judgement` fed the tensors one by one (what ``hybrid plan --run`` does, so that
    neither run's tensors need be held whole while the other trains)."""
    judge = Judgement(tolerance)
    judge.losses(losses, ref_losses)
    for name, ref in ref_grads.items():
        judge.gradient(grads[name], ref)
    judge.step(((ref_params[name], start) for name, start in initial.items() if name in ref_params))
    for name, ref in ref_params.items():
        judge.parameter(params[name], ref)
    return judge.verdict()


class Judgement:
    """:func:`compare`'s judgement, fed one tensor at a time: the losses (:meth:`losses`, any time), every
    first-step gradient pair (:meth:`gradient`), the optimizer's step (:meth:`step`) and then every parameter
    pair (:meth:`parameter`), then :meth:`verdict`. Each pair is walked in chunks; nothing is kept but running
    figures."""

    def __init__(self, tolerance: Tolerance = TOLERANCE):
        self.tolerance = tolerance
        self.loss_diff: float | None = None
        self.equal = True
        """Bit for bit so far."""
        self._grad_scale: float | None = None
        self._grad_diff: float | None = None
        self._step: float | None = None
        self._param_diff, self._differing, self._total, self._non_finite = 0.0, 0, 0, 0
        self._scratch = _Scratch()
        self._precision = "float32"

    def losses(self, losses, ref_losses) -> None:
        """The run's loss per step and the reference's."""
        if len(losses) != len(ref_losses) or not ref_losses:
            raise ValueError(f"losses: {len(losses)} step(s) against the reference's {len(ref_losses)}")
        self.loss_diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses))
        self.equal = self.equal and list(losses) == list(ref_losses)

    def gradient(self, got, ref) -> None:
        """One first-step gradient of the run (``got``) and the reference's (``ref``), on the CPU."""
        import torch

        dtype = dtype_name(ref.dtype)
        if dtype in FLOOR and FLOOR[dtype] > FLOOR.get(self._precision, 0.0):
            self._precision = dtype
        if ref.numel():
            self._grad_scale = _larger(self._grad_scale, float(ref.abs().max()))
            for a, b in _chunks(got, ref):
                self._grad_diff = _larger(self._grad_diff, float((a.float() - b.float()).abs().max()))
        self.equal = self.equal and torch.equal(got, ref)

    def step(self, moved) -> float:
        """The optimizer's step from ``moved``: (reference's last value, initial value) pairs, every parameter
        the reference trained (floating ones count), in the model's order. Returns it."""
        moved_sq, moved_n = 0.0, 0
        for ref, start in moved:
            if start.is_floating_point():
                moved_sq += sum(float((r.double() - s.double()).square().sum()) for r, s in _chunks(ref, start))
                moved_n += start.numel()
        self._step = (moved_sq / moved_n) ** 0.5 if moved_n else 0.0
        return self._step

    def parameter(self, got, ref) -> None:
        """One parameter or buffer after the last step: the run's (``got``) and the reference's (``ref``), on
        the CPU (after :meth:`step`)."""
        import torch

        if self._step is None:
            raise RuntimeError("Judgement.parameter: call step() first (a parameter is judged in its units)")
        self._total += ref.numel()
        self.equal = self.equal and torch.equal(got, ref)
        if not ref.is_floating_point():
            self._differing += 0 if torch.equal(got, ref) else ref.numel()
            return
        limit = self.tolerance.param_step * self._step
        # A 16-bit parameter is rounded to its format at every update: an element a few of its own units of
        # rounding apart was rounded the other way, not moved by another step (bfloat16 GPT-2 on trn3:2 after two
        # AdamW steps: 0.15 % of the elements a unit apart, a tenth of a step being about one unit there).
        ulps = ROUNDING_UNITS * torch.finfo(ref.dtype).eps if dtype_name(ref.dtype) in FLOOR else 0.0
        for a, b in _chunks(got, ref):
            a, b = a.float(), b.float()
            if not a.numel():
                continue
            diff = self._scratch.difference(a, b)
            largest = float(diff.max())
            bound = (b.abs() * ulps).clamp_min_(limit) if ulps else limit
            if math.isfinite(largest) and math.isfinite(limit):
                # Every difference finite: so is every value on both sides (a NaN or infinity on either side makes
                # its difference NaN or infinite), and equal values differ by 0 <= limit. The rule below then
                # reduces to counting the differences over the limit, in two passes instead of a dozen: a
                # flagship's 124 M elements are judged in ~1 s instead of ~7 s (benchmarks plan_call).
                self._differing += int(self._scratch.over(diff, bound).sum())
                self._param_diff = max(self._param_diff, largest)
                continue
            same = (diff <= bound) | (a == b) | (a.isnan() & b.isnan())
            self._differing += int((~same).sum())
            self._non_finite += int((a.isfinite() != b.isfinite()).sum())
            finite = diff[diff.isfinite()]
            self._param_diff = max(self._param_diff, float(finite.max()) if finite.numel() else 0.0)

    def verdict(self) -> Agreement:
        """The :class:`Agreement` of everything fed."""
        if self.loss_diff is None:
            raise RuntimeError("Judgement.verdict: the losses were not given (losses())")
        tolerance, step = self.tolerance, self._step or 0.0
        grad_diff = (self._grad_diff or 0.0) / (self._grad_scale or 1.0)
        share = self._differing / self._total if self._total else 0.0
        loss_limit = max(tolerance.loss, FLOOR.get(self._precision, 0.0))
        grads_limit = max(tolerance.grads, GRADIENT_FLOOR.get(self._precision, 0.0))
        matches = self.equal or (self.loss_diff <= loss_limit and grad_diff <= grads_limit
                                 and share <= tolerance.param_share and self._non_finite == 0)
        param_diff = self._param_diff
        in_steps = param_diff / step if step else (0.0 if param_diff == 0 else float("inf"))
        return Agreement(self.loss_diff, grad_diff, param_diff, step, in_steps, share, self._non_finite,
                         self.equal, matches, self._precision, loss_limit, grads_limit)


class _Scratch:
    """Buffers of :data:`_CHUNK` elements that every chunk's comparison reuses: a fresh temporary per chunk is a
    fresh mapping of the host's memory, zeroed by the kernel before it is written."""

    def __init__(self):
        self._diff = self._flags = None

    def difference(self, a, b):
        """|a - b| (float32, same length, at most :data:`_CHUNK`) in the reused buffer."""
        import torch

        if self._diff is None:
            self._diff = torch.empty(_CHUNK, dtype=torch.float32)
        return torch.sub(a, b, out=self._diff[:a.numel()]).abs_()

    def over(self, diff, limit):
        """``diff > limit`` (a number or a tensor like ``diff``), elementwise, in the reused buffer."""
        import torch

        if self._flags is None:
            self._flags = torch.empty(_CHUNK, dtype=torch.bool)
        return torch.gt(diff, limit, out=self._flags[:diff.numel()])


def _larger(current: float | None, value: float) -> float:
    """The running maximum as Python's ``max`` keeps it over a sequence (the first of equals; a NaN first stays)."""
    return value if current is None or value > current else current


_CHUNK = 1 << 20
"""Elements compared at a time: the temporaries of a comparison stay a few MB whatever the parameter's size."""


def _chunks(a, b):
    """``a`` and ``b`` (same shape) flattened, in pairs of slices of :data:`_CHUNK` elements."""
    if a.shape != b.shape:
        raise ValueError(f"compare: shapes differ, {tuple(a.shape)} against the reference's {tuple(b.shape)}")
    a, b = a.reshape(-1), b.reshape(-1)
    return zip(a.split(_CHUNK), b.split(_CHUNK))
