"""Which kernels a what-if prices: ``kernels="fused"`` or ``kernels="eager"``, the one vocabulary of the training
and serving what-ifs (:func:`planner.whatif`, :func:`planner.serving.serving_whatif`).

Both questions are worth asking, and they have different answers (on small models about 2x apart):

* ``fused`` (the default): a tuned production stack. Training: one fused RMSNorm kernel, FlashAttention without a
  materialised mask, the step efficiencies fitted to published throughput (:mod:`planner.fitted_efficiency`).
  Serving: the fitted production engine (:meth:`planner.serving.Engine.fitted`).
* ``eager``: the model's code as written, op by op, as a slot runs it, priced by the per-op cost model alone, as
  the plan's prediction and the executed timeline price it. Training: RMSNorm as its elementwise ops (the float32
  upcast kept), the causal mask materialised and handed to attention (as the exported graph a plan runs does),
  gradients accumulated into their buffers. Serving: :meth:`planner.serving.Engine.eager`, the batched code
  ``interop.serve`` runs.
"""

from __future__ import annotations

KERNELS: dict[str, str] = {
    "fused": "fused production kernels (fused RMSNorm, flash attention), fitted step efficiencies",
    "eager": "the ops the slot runs as written (unfused), per-op cost model alone",
}
"""Accepted ``kernels=`` values -> what each prices (one line, printed with every estimate)."""

DEFAULT_KERNELS = "fused"

SERVING_ENGINES: dict[str, str] = {
    "fused": "the fitted production engine (fused kernels, per-iteration overheads fitted to published serving rows)",
    "eager": "interop.serve's engine (transformers' forward op by op, one prompt per prefill, no fitted factor)",
}
"""The serving what-if's engine per ``kernels=`` value (:class:`planner.serving.Engine`), named in every estimate."""


def check_kernels(value: object, name: str = "kernels") -> str:
    """``value`` if it names a kernel choice of :data:`KERNELS`; ValueError naming the argument otherwise."""
    if not isinstance(value, str) or value not in KERNELS:
        raise ValueError(f"{name}: expected one of {', '.join(repr(k) for k in KERNELS)}, got {value!r}")
    return value


def kernels_of(blocks) -> str:
    """The kernels ``blocks`` were traced for (:attr:`planner.ModelBlocks.kernels`; ``fused`` when unsaid)."""
    return getattr(blocks, "kernels", DEFAULT_KERNELS)


def calibrated(blocks) -> bool:
    """Whether ``blocks`` are priced with the fitted step efficiencies: those traced as a fused production stack
    are (the efficiencies were fitted to such stacks' published throughput); eager ones by the per-op cost model
    alone, as the plan and the executed timeline price the ops a slot runs."""
    return kernels_of(blocks) == "fused"


__all__ = ["DEFAULT_KERNELS", "KERNELS", "SERVING_ENGINES", "calibrated", "check_kernels", "kernels_of"]
