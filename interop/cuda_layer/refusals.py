"""The CUDA APIs the rack cannot serve: each refused by name, at its call site, with what to use instead."""

from __future__ import annotations

from interop.cuda_layer.usage import touch

UNSUPPORTED: dict[str, str] = {
    "torch.cuda.ExternalStream": "torch.cuda.Stream() (there are no external CUDA streams on a slot)",
    "torch.cuda.get_stream_from_external": "torch.cuda.Stream()",
    "torch.cuda.CUDAPluggableAllocator": "the slot allocator (capacity per slot: a rack file's `capacity`)",
    "torch.cuda.change_current_allocator": "the slot allocator (capacity per slot: a rack file's `capacity`)",
    "torch.cuda.MemPool": "the slot allocator",
    "torch.cuda.use_mem_pool": "the slot allocator",
    "torch.cuda.caching_allocator_alloc": "torch.empty(..., device='cuda')",
    "torch.cuda.caching_allocator_delete": "let the tensor go out of scope",
    "torch.cuda.memory_snapshot": "torch.cuda.memory_stats() / interop.report()",
    "torch.cuda.memory._record_memory_history": "torch.profiler with profile_memory=True, or interop.report()",
    "torch.cuda.memory._snapshot": "torch.cuda.memory_stats()",
    "torch.cuda.memory._dump_snapshot": "torch.cuda.memory_stats()",
    "torch.cuda.utilization": "interop.report() (modelled utilisation per slot)",
    "torch.cuda.temperature": "nothing: a modelled slot has no temperature",
    "torch.cuda.power_draw": "interop.report() (modelled energy)",
    "torch.cuda.clock_rate": "the catalogue: devices.chip(kind)",
    "torch.cuda.memory_usage": "torch.cuda.memory_allocated()",
    "torch.cuda.current_blas_handle": "nothing: there is no cuBLAS handle on a slot",
    "torch.cuda.current_solver_handle": "nothing: there is no cuSOLVER handle on a slot",
    "torch.cuda.jiterator._create_jit_fn": "a Python function of torch ops, or torch.compile",
    "torch.cuda.jiterator._create_multi_output_jit_fn": "a Python function of torch ops, or torch.compile",
    "torch.cuda.cudart": "nothing: there is no CUDA runtime behind a slot",
    "torch.cuda.host_memory_stats": "torch.cuda.memory_stats() (pinned host memory is not counted per slot)",
}
"""APIs the layer refuses, each with what to use instead."""


class UnsupportedCudaAPI(RuntimeError):
    """A CUDA API the rack cannot serve; the message names it, the call site and what to use instead.

    ``api`` is the API's name (``"torch.cuda.graph"``)."""

    def __init__(self, message: str, api: str = "") -> None:
        super().__init__(message)
        self.api = api


def unsupported(api: str, instead: str, original=None):
    """A stand-in for ``api`` that records the use and raises :class:`UnsupportedCudaAPI`.

    A class stays a class (code annotates with ``torch.cuda.CUDAGraph | None`` and calls ``isinstance``):
    constructing it raises.
    """
    def refuse(*args, **kwargs):
        from interop.callsite import call_site

        touch(api, "unsupported", f"instead: {instead}")
        raise UnsupportedCudaAPI(f"{api} is not supported by the CUDA layer (called at {call_site(2)}); "
                                 f"instead: {instead}", api)
    if isinstance(original, type):
        def __new__(cls, *args, **kwargs):
            refuse()
        return type(original.__name__, (), {"__new__": __new__, "__hybrid_api__": api, "__hybrid_refused__": instead,
                                            "__module__": api.rsplit(".", 1)[0],
                                            "__doc__": f"Unsupported on the rack: {instead}"})
    refuse.__name__ = api.rsplit(".", 1)[1]
    refuse.__qualname__ = refuse.__name__
    refuse.__doc__ = f"Unsupported on the rack: {instead}"
    refuse.__hybrid_api__ = api
    refuse.__hybrid_refused__ = instead
    return refuse
