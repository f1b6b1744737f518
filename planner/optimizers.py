"""Optimizers as the planner prices them: torch's fused kernel, the state it keeps, the master copy.

One table (:data:`OPTIMIZERS`) serves the step model's memory (state and master bytes per parameter)
and time (the fused kernel), the live plan (state tensors in the parameters' dtype, as torch keeps them)
and the CLIs' ``--optimizer`` choices. Gradient dtypes (:data:`GRAD_DTYPES`) take their sizes from
:func:`devices.itemsize`.
"""

from __future__ import annotations

from dataclasses import dataclass

import devices


@dataclass(frozen=True, slots=True)
class Optimizer:
    """One optimizer (torch's fused implementation)."""

    name: str
    """What callers pass (``optimizer="adamw"``)."""
    kernel: str
    """torch's fused kernel (``aten::<kernel>``), one multi-tensor launch over parameters, gradients and state."""
    state_tensors: int
    """State tensors per parameter: Adam(W)'s exp_avg and exp_avg_sq, SGD's momentum buffer."""
    step_counters: bool
    """Adam(W) increments per-parameter step counters (one ``_foreach_add_``) before the fused kernel."""
    master_bytes: int = 4
    """Bytes per parameter of the float32 master copy a mixed-precision optimizer keeps."""

    def state_bytes(self, itemsize: int = 4) -> int:
        """Bytes of state per parameter, each state tensor ``itemsize`` bytes (float32 unless given)."""
        return self.state_tensors * itemsize


OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("adamw", "_fused_adamw_", 2, True),
    Optimizer("adam", "_fused_adam_", 2, True),
    Optimizer("sgd", "_fused_sgd_", 1, False),
)}
"""Accepted optimizers, by name."""

GRAD_DTYPES: dict[str, int] = {name: devices.itemsize(name) for name in ("bfloat16", "float32")}
"""Gradient buffer and reduction dtypes -> bytes per element."""


def check_optimizer(value: object, name: str = "optimizer") -> Optimizer:
    """The :class:`Optimizer` called ``value``; ValueError naming the argument and listing the accepted ones."""
    found = OPTIMIZERS.get(value) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{name}: unknown {value!r}; accepted: {', '.join(OPTIMIZERS)}")
    return found


__all__ = ["GRAD_DTYPES", "OPTIMIZERS", "Optimizer", "check_optimizer"]
