"""`hybrid demo --compile`: what torch.compile buys on each kind of chip of the rack.

The demo's GPT-style model takes the same training step eagerly and compiled
(``torch.compile`` with default options, forward and backward; the optimizer
step stays eager) on one slot of each kind. The compiled step's loss is checked
against the eager one (computed), and both steps' modelled times are read from
the slot's timeline: eager, one record per ATen op; compiled, one per fused
kernel (costed from the kernel's own bytes and FLOPs) and per ATen kernel the
compiled graph calls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

import interop
from devices.text_table import table


@dataclass(slots=True)
class CompiledStep:
    slot: int
    kind: str
    projected: bool
    eager_step_s: float
    """Modelled time of one eager training step on the slot."""
    compiled_step_s: float
    """Modelled time of the same step with the model compiled."""
    eager_ops: int
    """Eager ATen ops in one eager step."""
    kernels: int
    """Kernel records (fused kernels and the ATen kernels the graphs call) in one compiled step."""
    compiled_ops: int
    """Eager ATen ops left in the compiled step (the optimizer's, which is not compiled)."""
    loss_diff: float
    """|compiled loss - eager loss| after the step (computed)."""

    @property
    def speedup(self) -> float:
        return self.eager_step_s / self.compiled_step_s if self.compiled_step_s else 0.0


LOSS_TOLERANCE = 1e-4
"""Largest |compiled - eager| loss accepted: fused kernels round differently from the eager ones."""


def _step(model, optimizer, idx, tgt) -> float:
    optimizer.zero_grad(set_to_none=True)
    logits = model(idx)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())
    loss.backward()
    optimizer.step()
    return loss.item()


def _modelled_step(model, slot: int, batch) -> tuple[float, float, int, int]:
    """(loss, modelled step seconds, eager ops, kernels) of one step after a warm-up step (which compiles)."""
    idx, tgt = (t.to(f"hybrid:{slot}") for t in batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    _step(model, optimizer, idx, tgt)
    interop.reset_timeline()
    loss = _step(model, optimizer, idx, tgt)
    report = interop.report().slot(slot)
    return loss, report.busy_s, report.ops, report.kernels


def compile_comparison(reference, batch, slots: list[int], echo) -> list[CompiledStep]:
    """Eager vs compiled training step on each of ``slots`` (one per chip kind)."""
    rack = interop.current_rack()
    out: list[CompiledStep] = []
    for slot in slots:
        device = rack.devices[slot]
        eager_model = copy.deepcopy(reference).to(f"hybrid:{slot}")
        eager_loss, eager_s, ops, _ = _modelled_step(eager_model, slot, batch)
        compiled_model = copy.deepcopy(reference).to(f"hybrid:{slot}")
        compiled_loss, compiled_s, compiled_ops, kernels = _modelled_step(torch.compile(compiled_model), slot, batch)
        out.append(CompiledStep(slot, device.kind, device.spec.projected, eager_s, compiled_s, ops, kernels,
                                compiled_ops, abs(compiled_loss - eager_loss)))
        del eager_model, compiled_model
    echo("\n== torch.compile: the same training step eager and compiled (modelled; loss checked, computed; "
         "* = projected chip) ==")
    echo(table(["slot", "kind", "eager ms/step", "eager ops", "compiled ms/step", "kernels + eager ops", "speed-up",
                "|dloss|"],
               [[f"hybrid:{c.slot}", c.kind + ("*" if c.projected else ""), f"{c.eager_step_s * 1e3:.3f}",
                 c.eager_ops, f"{c.compiled_step_s * 1e3:.3f}", f"{c.kernels} + {c.compiled_ops}",
                 f"{c.speedup:.2f}x", f"{c.loss_diff:.1e}"] for c in out], align="llrrrrrr"))
    echo("(the optimizer step stays eager in both; a fused kernel is costed from its own bytes and FLOPs)")
    return out
