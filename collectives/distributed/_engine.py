"""The engines that move the bytes: Gloo on host memory, NCCL where every slot is a real GPU.

A hybrid tensor on an emulated slot is host memory, so Gloo runs on its
zero-copy CPU alias.  A slot backed by a real GPU has a CUDA alias: a group
whose slots are all distinct real GPUs runs those on NCCL; otherwise the CUDA
alias is staged through host memory for Gloo and copied back afterwards.
"""

from __future__ import annotations

import torch

from collectives.distributed._checks import GLOO_REDUCE
from devices import Backing


class Engine:
    """One c10d backend and what it can do natively."""

    def __init__(self, name: str, backend, native_reduce: bool):
        self.name = name
        self.backend = backend
        self.native_reduce = native_reduce
        """True: AVG and PREMUL_SUM go to the backend as they are (NCCL); False: emulated (Gloo)."""


class Run:
    """The per-call scratch of one collective: staged buffers and the steps that finish it.

    ``finish()`` runs when the engine's works have succeeded: averages are
    divided, then staged outputs are copied back to their device.
    """

    def __init__(self, engine: Engine, world: int, timeout=None):
        self.engine = engine
        self.world = world
        self.timeout = timeout
        """The call's own timeout (``dist.barrier(timeout=...)``), None: the group's."""
        self._after: list = []
        self._back: list[tuple[torch.Tensor, torch.Tensor]] = []

    def opts(self, cls, **fields):
        """Engine options of type ``cls`` with ``fields`` set and the call's timeout, if it has one."""
        o = cls()
        for name, value in fields.items():
            setattr(o, name, value)
        if self.timeout is not None:
            o.timeout = self.timeout
        return o

    def buf(self, t: torch.Tensor, *, out: bool = False) -> torch.Tensor:
        """``t`` as the engine takes it: itself, or (Gloo with a CUDA alias) a host copy written back if ``out``."""
        if t.device.type == "cpu" or self.engine.name == "nccl":
            return t
        host = t.to("cpu")
        if out:
            self._back.append((t, host))
        return host

    def reduce_op(self, name: str, factor, inputs: list[torch.Tensor], *, in_place: bool,
                  original=None) -> tuple[object, list[torch.Tensor]]:
        """The op to hand the engine and the inputs to reduce (premultiplied copies where emulated).

        ``factor``: premul_sum's factor, already a number of the dtype's class
        (``collectives.ops.premul_factor``).  In place (the input is the
        output, as in all_reduce) a premultiplied sum scales the buffer itself;
        otherwise it scales copies, so the caller's input is never written.
        NCCL takes its own ops, except an integer premul_sum, which torch's
        NCCL binding refuses although NCCL defines it: that one is emulated too.
        """
        integer_premul = name == "premul_sum" and not (inputs[0].is_floating_point() or inputs[0].is_complex())
        if self.engine.native_reduce and not integer_premul:
            return (original if original is not None else GLOO_REDUCE[name]), inputs
        if name == "premul_sum":
            if in_place:
                for t in inputs:
                    t.mul_(factor)
            else:
                inputs = [t * factor for t in inputs]
        return GLOO_REDUCE[name], inputs

    def average(self, name: str, outputs: list[torch.Tensor]) -> None:
        """Divide ``outputs`` by the group size once the sum is in (emulated AVG; integers truncate toward
        zero, as NCCL's ``FuncSumPostDiv``)."""
        if name == "avg" and not self.engine.native_reduce:
            def divide(outs=tuple(outputs), n=self.world):
                for o in outs:
                    if o.is_floating_point() or o.is_complex():
                        o.div_(n)
                    else:
                        o.div_(n, rounding_mode="trunc")
            self._after.append(divide)

    def then(self, step) -> None:
        """Run ``step()`` when the engine's works have finished (before copies back)."""
        self._after.append(step)

    def finish(self) -> None:
        for step in self._after:
            step()
        for dst, src in self._back:
            dst.copy_(src)

    @property
    def needs_finish(self) -> bool:
        return bool(self._after or self._back)


def choose(backings: list[Backing | None], hosts: list[str], requested: str, nccl_available: bool) -> str:
    """The engine for a group's hybrid tensors: ``gloo`` or ``nccl``.

    ``backings``: each rank's slot backing, parsed (None: a rank without a slot);
    ``hosts``: each rank's host name.  ``auto`` takes NCCL only when every slot
    is a real GPU and no two ranks share one (NCCL refuses duplicate GPUs).
    """
    if requested not in ("auto", "gloo", "nccl"):
        raise ValueError(f"engine: expected 'auto', 'gloo' or 'nccl', got {requested!r}")
    all_gpu = bool(backings) and all(b is not None and b.is_cuda for b in backings)
    distinct = len(set(zip(hosts, backings))) == len(backings)
    if requested == "nccl":
        if not nccl_available:
            raise ValueError("engine='nccl': this torch has no NCCL")
        if not (all_gpu and distinct):
            raise ValueError("engine='nccl' needs every rank's slot backed by its own real GPU; backings: "
                             + ", ".join(b or "host" for b in backings))
        return "nccl"
    if requested == "auto" and all_gpu and distinct and nccl_available:
        return "nccl"
    return "gloo"

