"""The timeline records of kernel launches (imported by generated wrapper code: keep it light)."""

from __future__ import annotations

from interop.timelines import KernelLaunch, record_kernel

INDUCTOR_PREFIX = "inductor:"
"""Op-name prefix of a compiled graph's kernels on the timeline (``inductor:cpp_fused_add_relu_0``)."""
TRITON_PREFIX = "triton:"
"""Op-name prefix of a Triton launch on the timeline (``triton:add_kernel``)."""
COMPILED_PREFIXES = (INDUCTOR_PREFIX, TRITON_PREFIX)

INDUCTOR_METHOD = ("bytes: Inductor's accesses of the kernel's own argument buffers (per buffer and direction, "
                   "min of its size and the elements touched); FLOPs: torch.utils.flop_counter on the FX nodes "
                   "fused into it (matrix products, convolutions, attention)")
"""How a compiled kernel's bytes and FLOPs are obtained (the record's sources say it)."""


def inductor_kernel(slot: int, name: str, dtype: str, nbytes, matmul_flops, matmul_outputs) -> None:
    """Called by Inductor's wrapper code after each launch of a generated kernel on a hybrid slot."""
    record_kernel(slot, KernelLaunch(name, dtype, float(nbytes), 0.0, float(matmul_flops), float(matmul_outputs),
                                     (), INDUCTOR_METHOD))
