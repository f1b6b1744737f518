"""``@triton.autotune`` on an emulated slot: configurations ranked by modelled time.

Triton's autotuner times each configuration with the active GPU driver's
benchmarker; an emulated slot has none, and its wall time (Triton's
interpreter on the host) says nothing about the chip it models. So on an
emulated slot each configuration runs once in the interpreter, on the real
data, with its loads, stores and ``tl.dot`` counted, and is priced by the cost
model for the slot's kind: the autotuner picks the configuration with the
least modelled time, as it would pick the fastest measured one on the chip.
These trial runs are not placed on the timeline (nor are the autotuner's own
``reset_to_zero`` / ``restore_value`` copies); the chosen configuration's
launch is. On a GPU-backed slot Triton times configurations on the GPU as usual.
"""

from __future__ import annotations

from interop.compile.backing import cuda_backing
from interop.compile.triton_launch import launch_slot, modelled_launches


def modelled_seconds(launches) -> float:
    """Modelled time of (slot, KernelLaunch) pairs on the current rack (where the launches ran)."""
    from interop import session

    coster = session.current().timeline.coster
    return sum(coster.kernel(slot, launch).seconds for slot, launch in launches)


def _modelled_bench(kernel_call, quantiles=None, **_ignored):
    from interop import _C

    recording = _C._timeline_enabled()
    _C._set_timeline_enabled(False)
    try:
        with modelled_launches() as trial:
            kernel_call()
    finally:
        _C._set_timeline_enabled(recording)
    ms = modelled_seconds(trial.launches) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


def _wrap_bench(original_bench):
    def _bench(self, *args, config, **meta):
        slot = launch_slot(args, meta)
        if slot is None or cuda_backing(slot) is not None:
            return original_bench(self, *args, config=config, **meta)
        had, previous = "do_bench" in self.__dict__, self.__dict__.get("do_bench")
        self.__dict__["do_bench"] = _modelled_bench  # Autotuner.do_bench is a cached_property
        try:
            return original_bench(self, *args, config=config, **meta)
        finally:
            if had:
                self.__dict__["do_bench"] = previous
            else:
                del self.__dict__["do_bench"]

    _bench._hybrid_original = original_bench
    return _bench


def patch_autotuner(autotuner_module) -> None:
    """Rank configurations by modelled time on emulated slots (``triton.runtime.autotuner`` was just imported)."""
    cls = autotuner_module.Autotuner
    if not hasattr(cls._bench, "_hybrid_original"):
        cls._bench = _wrap_bench(cls._bench)
