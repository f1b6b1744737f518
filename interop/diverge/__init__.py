"""``interop.diverge``: where a training run on the rack first parts from its single-device reference.

The user's unmodified script runs twice for a few optimizer steps with the same seeds and data: the run under
test on the rack (one process, or N ranks launched as torchrun launches them) and the reference: one process
(plain torch on the CPU, or one slot), or the same N ranks on the CPU over Gloo, rank r compared with rank r.
Hooks record each module's parameters before the first step, its
forward outputs, the gradients of its inputs, each parameter's gradient and the optimizer's update, keyed by
(step, module, call index, phase) (:mod:`interop.diverge.recorder`), and every collective of the run under
test. The first point that differs beyond a stated tolerance (:mod:`interop.diverge.tolerance`) is reported
with the last that agreed, the magnitudes, the module's call site and the collective nearest before it
(:mod:`interop.diverge.result`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import types

from interop.diverge.launch import RunFailed
from interop.diverge.result import DivergeResult, Point

REFERENCES = ("cpu", "slot", "gloo")
"""``cpu``: plain torch, one process; ``slot``: one slot under the CUDA layer; ``gloo``: plain torch on the CPU
with the run under test's ranks (the same parallelism over Gloo)."""

__all__ = ["DivergeResult", "Point", "RunFailed", "REFERENCES", "check_rack", "diverge"]


def check_rack(rack: str) -> None:
    """``ValueError`` naming ``rack`` when it is no rack preset or spec (before two runs start only to fail)."""
    from interop import Rack

    try:
        Rack.from_spec(rack)
    except Exception as e:  # the rack's own words: an unknown preset, a malformed spec
        raise ValueError(f"{rack!r}: {e}") from None


def _check(script, args, nproc_per_node, steps, reference, rack) -> None:
    if not isinstance(script, (str, os.PathLike)) or not os.path.isfile(script):
        raise ValueError(f"script {script!r} not found (working directory {os.getcwd()})")
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"args must be a list of strings (the script's arguments), got {args!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number of optimizer steps, at least 1, got {steps!r}")
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be a whole number of ranks, at least 1, got {nproc_per_node!r}")
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)} (the CPU with plain torch, one slot "
                         f"under the CUDA layer, or the same ranks on the CPU over Gloo), got {reference!r}")
    if reference == "gloo" and nproc_per_node < 2:
        raise ValueError(f"reference 'gloo' runs the run under test's parallelism over Gloo: it needs "
                         f"nproc_per_node of at least 2, got {nproc_per_node} (one process: reference 'cpu')")
    if rack is not None:
        try:
            check_rack(rack)
        except ValueError as e:
            raise ValueError(f"rack {e}") from None


def diverge(script: str, args: list[str] | tuple = (), *, nproc_per_node: int = 1, steps: int = 2,
            reference: str = "cpu", rack: str | None = None, timeout: float | None = 600) -> DivergeResult:
    """Run ``script`` (with ``args``) on the rack and as its reference for ``steps`` optimizer steps, and return
    where they first differ (a :class:`DivergeResult`: ``diverged``, ``first``, ``last_agreed``...).

    ``nproc_per_node`` > 1 launches the run under test as ``torchrun --nproc-per-node`` would (each rank under
    the CUDA layer, "nccl" on the ``hybrid`` backend); the reference is one process, ``"cpu"`` (plain torch, no
    CUDA: a script that requires a GPU needs ``"slot"``) or ``"slot"`` (the CUDA layer), or ``"gloo"``: plain
    torch on the CPU with the same ``nproc_per_node`` ranks (at least 2), launched alike, for a script that
    picks "gloo" and the CPU where CUDA is not available; rank r is then compared with the reference's rank r,
    shard against shard (a bug of the script itself is in both runs and does not show; one of the rack's, a
    collective or a kernel that computes otherwise, does). Raises :class:`RunFailed` when a run recorded no
    optimizer step (its output is in the message), or when the Gloo reference recorded other ranks than the
    run; ``ValueError`` for a bad argument.
    """
    args = list(args) if isinstance(args, tuple) else args
    _check(script, args, nproc_per_node, steps, reference, rack)
    from interop.diverge import launch
    from interop.diverge.result import build

    script = os.path.abspath(script)
    with tempfile.TemporaryDirectory(prefix="diverge-") as work:
        test_dir, ref_dir = os.path.join(work, "run"), os.path.join(work, "reference")
        # Both at once: neither waits for the other.
        runs = [(launch.run_reference(script, args, ref_dir, steps=steps, reference=reference,
                                      nproc=nproc_per_node, rack=rack), ref_dir),
                (launch.run_under_test(script, args, test_dir, steps=steps, nproc=nproc_per_node, rack=rack),
                 test_dir)]
        failed = launch.wait(runs, timeout)
        order = [(ref_dir, f"reference ({reference})"), (test_dir, "run under test")]
        if failed == test_dir:  # its error first: the reference was stopped because of it
            order.reverse()
        loaded = {folder: launch.load(folder, what) for folder, what in order}
        reference_records, ranks = loaded[ref_dir], loaded[test_dir]
    run = "the rack, 1 process" if nproc_per_node == 1 else f"the rack, {nproc_per_node} ranks (torchrun)"
    if reference == "gloo":
        from interop.diverge.result import build_peers

        try:
            return build_peers(reference_records, ranks, run, f"the CPU over Gloo ({nproc_per_node} ranks, "
                                                              f"rank against rank)", reference)
        except ValueError as e:  # the script ran another parallelism on the CPU: nothing to set rank against rank
            raise RunFailed(str(e)) from None
    ref_name = "the CPU (plain torch, 1 process)" if reference == "cpu" else "one slot (1 process)"
    return build(reference_records[0], ranks, run, ref_name, reference)


class _CallableModule(types.ModuleType):
    """``interop.diverge(...)`` calls :func:`diverge`; ``interop.diverge.DivergeResult`` and the rest stay names of
    the package."""

    def __call__(self, *args, **kwargs) -> DivergeResult:
        return diverge(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
