"""Run a plan for a few steps and check it against the same model trained on one slot (``hybrid plan --run``).

Computed truth: the losses, the first step's gradients and the parameters after the
last step, compared with the model trained on one emulated slot with the same
optimizer and batches: bit for bit with one microbatch and one replica per stage,
otherwise by the rule of :mod:`interop.live.agreement` (losses and gradients relative,
parameters in units of the optimizer's own step). Modelled figures: the executed step's time on the
timeline against the plan's prediction, and each slot's measured peak memory
against the predicted one.
"""

from __future__ import annotations

import copy
import gc
from dataclasses import dataclass, field

from devices.units import format_bytes
from devices.text_table import paragraph, table
from interop.live.agreement import ROUNDING_UNITS, TOLERANCE, Agreement


@dataclass(slots=True)
class RunCheck:
    steps: int
    losses: list[float]
    reference_losses: list[float]
    agreement: Agreement
    executed_s: float
    predicted_s: float
    peaks: dict[int, int] = field(default_factory=dict)
    predicted_peaks: dict[int, int] = field(default_factory=dict)
    by_design: str = ""
    """Why the plan computes otherwise by design, or "": a batch-statistics layer (BatchNorm) normalises each
    microbatch or replica over its own rows when the plan splits the batch (as pipelining and DDP without
    SyncBatchNorm do); dropout draws its masks from the generators of the plan's slots, in the plan's order."""

    @property
    def matches(self) -> bool:
        return self.agreement.matches

    @property
    def bitwise(self) -> bool:
        return self.agreement.bitwise

    @property
    def time_error(self) -> float:
        return self.executed_s / self.predicted_s - 1.0 if self.predicted_s else 0.0


def run_and_check(plan, pm, steps: int, *, echo=print) -> RunCheck:
    """Train ``plan`` on ``pm``'s model and batches for ``steps`` steps, then the same model on the plan's first
    slot alone, and compare (see the module doc). One training is in memory at a time: what the check compares
    of the plan's (its first step's gradients, its last parameters) waits in a :class:`~interop.live.spill.Spill`
    file while the reference trains, and is compared tensor by tensor as the reference produces its own. The
    model's own values wait there too, through both trainings: each is read back only to be copied onto a slot."""
    from interop.live.exported_blocks import default_loss
    from interop.live.plan import default_optimizer
    from interop.live.spill import Spill

    optimizer = default_optimizer(plan.optimizer)
    loss_fn = pm.loss_fn or default_loss
    batches = [pm.batch(seed=s) for s in range(steps)]
    with Spill() as kept:
        # The runner copies the model's values onto its slots and never writes the model: no copy of it is needed.
        runner = plan.apply(pm.model, optimizer=optimizer)
        losses = []
        with _SetAside(pm.model, kept) as aside:  # both trainings start from them: they wait on disk meanwhile
            for k, (x, y) in enumerate(batches):
                losses.append(float(runner.step(x, y, loss_fn)))
                if k == 0:
                    kept.put_all("grad", runner.gradients())
            runner.end_training()
            record = runner.last_step
            kept.put_all("param", runner.state_dict())
            del runner
            gc.collect()
            slot = plan.layout.stages[0].slots[0]
            ref_losses, judge, ref_state = _reference(plan, pm, batches, optimizer, loss_fn, slot, kept, aside)
        agreement = _judge_parameters(judge, pm.model, losses, ref_losses, ref_state, kept)
    check = RunCheck(steps, losses, ref_losses, agreement, record.modelled_seconds, plan.predicted.seconds,
                     dict(record.peak_bytes), dict(plan.predicted.peak_bytes), _by_design(plan, pm.model))
    _report(check, plan, slot, echo)
    return check


def _reference(plan, pm, batches, optimizer, loss_fn, slot: int, kept, aside):
    """Train ``pm``'s model (its values in ``aside``) on ``slot`` alone with the plan's batches and optimizer,
    judging its first step's gradients against the plan's as it goes (``kept``). Returns its losses, the
    :class:`~interop.live.agreement.Judgement` so far and its parameters after the last step, on the CPU."""
    import torch

    from interop.live.agreement import Judgement

    device = torch.device("hybrid", slot)
    ref = _copy_on(pm.model, device, aside.value)
    aside.forget()
    opt = optimizer(list(ref.parameters()))
    judge = Judgement()
    ref_losses = []
    canonical = plan.blocks.canonical
    for k, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        out = ref(*(t.to(device) for t in x))
        targets = y.to(device) if isinstance(y, torch.Tensor) else y
        loss = loss_fn(out, targets)
        del out  # the outputs (an LM's logits) are not kept into the next step's forward
        loss.backward()
        ref_losses.append(float(loss.detach().cpu()))
        if k == 0:
            for n, p in ref.named_parameters():
                if p.grad is not None:
                    judge.gradient(kept.get(f"grad/{canonical.get(n, n)}"), p.grad.detach().cpu())
        opt.step()
    del opt, loss
    ref.zero_grad(set_to_none=True)
    ref_state = {n: t.detach().cpu() for n, t in ref.state_dict().items()}
    del ref
    gc.collect()
    return ref_losses, judge, ref_state


def _judge_parameters(judge, model, losses, ref_losses, ref_state, kept) -> Agreement:
    """The verdict: ``judge`` (the gradients judged) given the losses, the optimizer's step (from ``model``'s
    initial values to the reference's last) and every parameter of the plan's run (``kept``) against
    ``ref_state``."""
    judge.losses(losses, ref_losses)
    judge.step((ref_state[n], p.detach()) for n, p in model.named_parameters() if n in ref_state)
    for name, t in ref_state.items():
        judge.parameter(kept.get(f"param/{name}"), t)
    return judge.verdict()


class _SetAside:
    """Within: ``model``'s parameters and buffers hold no bytes, theirs written to ``kept`` and read back on the
    way out (the storages emptied and refilled, as FSDP frees what a rank does not hold: every tensor over them,
    a block's included, sees the same values after). Storages that cannot be resized stay. Meanwhile
    :meth:`value` reads one tensor's values back."""

    def __init__(self, model, kept):
        import itertools

        self._kept = kept
        storages: dict[int, object] = {}
        for t in itertools.chain(model.parameters(), model.buffers()):
            storage = t.untyped_storage()
            if storage.device.type == "cpu" and storage.nbytes() and storage.resizable():
                # Keyed by the storage itself (``_cdata``): emptied, every storage's data pointer reads 0.
                storages.setdefault(storage._cdata, storage)
        self._index = {key: i for i, key in enumerate(storages)}
        self._aside = list(storages.values())
        self._read: tuple[int, object] | None = None

    def __enter__(self) -> _SetAside:
        import torch

        for i, storage in enumerate(self._aside):
            self._kept.put(f"aside/{i}", torch.empty(0, dtype=torch.uint8).set_(storage))
            storage.resize_(0)
        return self

    def value(self, t):
        """``t``'s values (any tensor over the model's bytes) as a CPU tensor (``t`` itself where its storage
        stayed): read from the file, the storage read last kept for the next tensor over it."""
        import torch

        i = self._index.get(t.untyped_storage()._cdata)
        if i is None:
            return t
        if self._read is None or self._read[0] != i:
            self._read = (i, self._kept.get(f"aside/{i}").untyped_storage())
        return torch.empty(0, dtype=t.dtype).set_(self._read[1], t.storage_offset(), t.shape, t.stride())

    def forget(self) -> None:
        """Drop the storage :meth:`value` read last."""
        self._read = None

    def __exit__(self, *exc) -> None:
        import torch

        self.forget()
        for i, storage in enumerate(self._aside):
            saved = self._kept.get(f"aside/{i}")
            storage.resize_(saved.numel())
            torch.empty(0, dtype=torch.uint8).set_(storage).copy_(saved)


def _copy_on(model, device, value=lambda t: t):
    """A copy of ``model`` whose parameters and buffers are made on ``device`` (no copy of them on the host),
    each from ``value(tensor)``."""
    import itertools

    import torch.nn as nn

    memo = {}
    for t in itertools.chain(model.parameters(), model.buffers()):
        if id(t) not in memo:
            copied = value(t).detach().to(device, copy=True)
            memo[id(t)] = nn.Parameter(copied, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else copied
    return copy.deepcopy(model, memo)


def _by_design(plan, model) -> str:
    """:attr:`RunCheck.by_design` of ``plan`` on ``model``."""
    import torch.nn as nn

    reasons = []
    norms = sorted({type(m).__name__ for m in model.modules()
                    if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training})
    replicas = max(st.dp for st in plan.stages)
    if norms and (plan.microbatches > 1 or replicas > 1):
        split = " and ".join(p for p in (f"{plan.microbatches} microbatches" if plan.microbatches > 1 else "",
                                         f"{replicas} data-parallel replicas" if replicas > 1 else "") if p)
        reasons.append(f"{', '.join(norms)} normalises each of the plan's {split} over its own rows, not the whole "
                       f"batch (as pipelining and DDP without SyncBatchNorm do); plan with microbatches=1 on one "
                       f"replica to compare bit for bit")
    dropouts = sorted({type(m).__name__ for m in model.modules()
                       if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 and m.training})
    if dropouts:
        reasons.append(f"{', '.join(dropouts)} draws its masks from the plan's slots' generators, in the plan's "
                       f"order; set p=0 (or model.eval() for those layers) to compare")
    return "; ".join(reasons)


def _report(c: RunCheck, plan, slot: int, echo) -> None:
    echo(f"== {c.steps} training step(s) of the plan on rack {plan.rack.name}, against the same model on "
         f"hybrid:{slot} alone (computed) ==")
    echo(table(["step", "loss (plan)", "loss (one slot)", "|difference|"],
               [[k + 1, f"{a:.6f}", f"{b:.6f}", f"{abs(a - b):.1e}"]
                for k, (a, b) in enumerate(zip(c.losses, c.reference_losses))], align="rrrr"))
    agreed = c.agreement
    echo(paragraph(f"first step's gradients: largest |difference| {agreed.grad_diff:.1e} of the largest gradient; "
                   f"parameters after {c.steps} step(s): largest |difference| {agreed.param_diff:.1e} = "
                   f"{agreed.param_steps:.2f} of the optimizer's step ({agreed.step:.1e}), "
                   f"{100 * agreed.differing_share:.4f} % of the elements more than {TOLERANCE.param_step:g} step "
                   f"apart", indent="  "))
    if agreed.bitwise:
        echo("matches single-device: bit for bit (losses, gradients, parameters)")
        return _report_time(c, plan, echo)
    if agreed.matches:
        echo(f"matches single-device within float tolerance: {plan.microbatches} microbatch(es) and the replicas' "
             f"shares are summed in another order")
    else:
        echo("DIFFERS from single-device" + (f", by design: {c.by_design}" if c.by_design else ""))
    echo(paragraph(f"(the rule: {TOLERANCE.describe()})", indent="  "))
    if agreed.loss_limit > TOLERANCE.loss or agreed.grads_limit > TOLERANCE.grads:
        echo(paragraph(f"(the gradients are {agreed.precision}: losses and gradients are judged at its rounding, "
                       f"at most {agreed.loss_limit:.0e} and {agreed.grads_limit:.0e}, and a parameter element "
                       f"differs only when also more than {ROUNDING_UNITS} units of its format's rounding apart)",
                       indent="  "))
    _report_time(c, plan, echo)


def _report_time(c: RunCheck, plan, echo) -> None:
    echo("\n== the executed step on the modelled timeline against the plan's prediction (modelled) ==")
    echo(f"step time: executed {c.executed_s * 1e3:.3f} ms, predicted {c.predicted_s * 1e3:.3f} ms "
         f"({100 * c.time_error:+.2f} %)")
    if c.steps == 1:
        # The prediction is a steady step's; the first also makes the optimizer's state (its zeros placed on the
        # timeline), and its forward and backward run without that state in memory (GPT-2 on one trn3 slot:
        # +14.6 % time and -29.7 % peak after one step, -0.4 % and +0.1 % after two).
        echo(paragraph("the executed step is the first: it also makes the optimizer's state, and runs its forward "
                       "and backward before that state exists, so neither its time nor its peaks are a steady "
                       "step's, which the prediction describes; --run 2 or more compares a steady step",
                       indent="  "))
    rows = []
    for s in sorted(c.peaks):
        pred = c.predicted_peaks.get(s, 0)
        err = f"{100 * (c.peaks[s] / pred - 1):+.1f} %" if pred else "-"
        rows.append([f"hybrid:{s}", plan.rack.slot(s).kind, format_bytes(c.peaks[s]), format_bytes(pred), err])
    echo(table(["slot", "kind", "peak (allocator, measured)", "peak (predicted)", "difference"], rows,
               align="llrrr"))
