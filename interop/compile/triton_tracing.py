"""``torch.compile`` over code that launches Triton kernels, on a machine without a GPU driver.

Dynamo turns a Triton launch into a higher-order op and, to know which of its
tensors the kernel writes, compiles the kernel to Triton IR
(``triton_kernel_wrap.generate_ttir``), asking the active driver for a target.
Without a GPU there is no driver; the analysis then logs a traceback and
assumes every tensor is written (which costs a copy of each). Triton IR does
not depend on the target's architecture, so here the analysis alone runs
against an NVIDIA target; nothing is compiled for, or launched on, it. With a
driver present this changes nothing.
"""

from __future__ import annotations

import functools
import warnings

ANALYSIS_TARGET = ("cuda", 80, 32)
"""The (backend, architecture, warp size) the IR analysis compiles against when no driver exists."""


class _AnalysisDriver:
    """Answers the one question IR generation asks a driver."""

    @staticmethod
    def get_current_target():
        from triton.backends.compiler import GPUTarget

        return GPUTarget(*ANALYSIS_TARGET)


def _driver_available() -> bool:
    from triton.runtime import driver

    try:
        driver.active  # noqa: B018 - creating it is the test
    except RuntimeError:
        return False
    return True


def patch_generate_ttir(module) -> None:
    """Wrap ``torch._higher_order_ops.triton_kernel_wrap.generate_ttir`` (that module was just imported)."""
    original = module.generate_ttir
    if getattr(original, "_hybrid", False):
        return

    @functools.wraps(original)
    def generate_ttir(*args, **kwargs):
        if _driver_available():
            return original(*args, **kwargs)
        from triton.runtime import driver

        driver.set_active(_AnalysisDriver())
        try:
            with warnings.catch_warnings():
                # Triton's notice about a compile option's future default concerns compiling, not this analysis.
                warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
                return original(*args, **kwargs)
        finally:
            driver._active = None  # back to "no driver": the next use asks the machine again

    generate_ttir._hybrid = True
    module.generate_ttir = generate_ttir
