"""Registers the `hybrid` device type with PyTorch (once per process)."""

from __future__ import annotations

import sys

import torch

DEVICE_TYPE = "hybrid"
_registered = False

BUILD_HINT = "build it with `MAX_JOBS=2 python setup.py build_ext --inplace` in the repository"


class MissingExtension:
    """Stands in for ``interop._C`` when it cannot be loaded: any use raises a clear error.

    The catalogue, the cost model and the what-ifs (``interop.whatif``) are pure Python and keep working.
    """

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def __getattr__(self, name: str):
        raise RuntimeError(f"interop._C (the hybrid device extension) could not be loaded ({self._error}); "
                           f"{BUILD_HINT}. Without it the device, racks and collectives on tensors are "
                           f"unavailable; devices, collectives.estimate and interop.whatif still work")


def register() -> bool:
    """Rename PrivateUse1 to ``hybrid``, install ``torch.hybrid`` and the
    ``Tensor.hybrid()`` / ``Module.hybrid()`` / storage methods.

    Returns False, leaving a :class:`MissingExtension` as ``interop._C``, when the
    extension cannot be loaded."""
    global _registered
    if _registered:
        return True
    if isinstance(sys.modules.get("interop._C"), MissingExtension):
        return False
    try:
        from interop import _C  # loading it registers the C++ backend
    except ImportError as error:
        sys.modules["interop._C"] = MissingExtension(error)
        setattr(sys.modules[__package__], "_C", sys.modules["interop._C"])
        return False
    from interop import hybrid as module
    from interop import session

    if torch._C._get_privateuse1_backend_name() != DEVICE_TYPE:
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    torch._register_device_module(DEVICE_TYPE, module)
    sys.modules.setdefault(f"torch.{DEVICE_TYPE}", module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _backward_on_the_calling_thread()
    _C._set_elapsed_hook(session.elapsed_hook)
    _C._set_drain_hook(session.drain, session.DRAIN_BATCH)
    _print_from_host_copies()
    from interop import cuda_only_ops, data_parallel, fidelity, profiling
    from interop.compile import flex_attention

    cuda_only_ops.install()
    data_parallel.install()
    fidelity.install()
    flex_attention.install()
    profiling.install()
    _register_collective_hooks()
    _register_distributed_backend()
    _register_compilers()
    _registered = True
    return True


def _backward_on_the_calling_thread() -> None:
    """Run backward passes on the thread that calls them, a slot's as the CPU's (this thread's setting).

    torch's engine hands a non-CPU device's work to a thread of its own, and every backward stashes the
    caller's contextvars Context in the task's thread-local state. When that device thread dropped the task
    after the interpreter had begun finalizing (a script's last backward, then exit), it took the GIL, and
    CPython ended it with a forced unwind through a noexcept destructor: std::terminate, exit status 134,
    at random. An emulated slot's kernels run on the host's cores either way, and a backed slot's launch
    asynchronously, so the calling thread loses nothing.
    """
    torch._C._set_multithreading_enabled(False)


def _print_from_host_copies() -> None:
    """Print hybrid tensors from a host copy of their bytes, as torch prints xla, lazy and mtia tensors.

    torch formats a tensor by running a dozen ops on it (abs, isfinite, masked_select, ...). On a slot
    those would land on the modelled timeline as if the program had run them, and a tensor of a retired
    rack may not run ops at all, though it must still print. One copy to the host serves both: the
    formatting runs on the CPU, on the same values, and prints exactly what the CPU tensor would (the
    device suffix is torch's own).
    """
    import torch._tensor_str as tensor_str

    original = tensor_str._str_intern
    if getattr(original, "__hybrid__", False):
        return

    def _str_intern(inp, *, tensor_contents=None):
        from torch._subclasses.fake_tensor import is_fake

        if (tensor_contents is None and isinstance(inp, torch.Tensor) and inp.device.type == DEVICE_TYPE
                and inp.layout == torch.strided and not inp.is_nested and inp.numel() > 0
                and not torch._C._functorch.is_functorch_wrapped_tensor(inp) and not is_fake(inp)):
            # (A fake tensor, which a compiler's error message may print, has no values: torch prints its shape.)
            plain = type(inp) is torch.Tensor or type(inp) is torch.nn.Parameter
            prefix = "tensor(" if plain else f"{type(inp).__name__}("
            primal, _ = torch.autograd.forward_ad.unpack_dual(inp)
            tensor_contents = tensor_str._tensor_str(primal.detach().to("cpu"), len(prefix))
        return original(inp, tensor_contents=tensor_contents)

    _str_intern.__hybrid__ = True
    tensor_str._str_intern = _str_intern


def _register_collective_hooks() -> None:
    """Give the collective layer what it needs from the device layer (it may not import us)."""
    import collectives.device_hooks
    from interop import _C
    from interop import session
    from interop.rack import current_rack

    def place(name, slots, seconds, nbytes, algorithm, sources, link, ready_ps=0):
        return session.current_timeline().place_collective(name, slots, seconds, nbytes, algorithm, sources, link,
                                                           ready_ps=ready_ps)

    def clock(slot):
        return session.current_timeline().stream_clock(slot)

    def place_transfer(name, src, dst, start_ps, seconds, nbytes, algorithm, sources, link, wait=None):
        return session.current_timeline().place_transfer(name, src, dst, start_ps, seconds, nbytes, algorithm,
                                                         sources, link, wait=wait)

    collectives.device_hooks.register(collectives.device_hooks.DeviceHooks(
        alias=_C._execution_alias, rack=current_rack, place=place, clock=clock, place_transfer=place_transfer,
        fused_program=_C._FusedProgram, run_fused=_C._run_fused))


def _register_distributed_backend() -> None:
    """Make ``torch.distributed.init_process_group("hybrid")`` available (collectives.distributed), and give
    DTensor's random number tracker the rank's own slot and sharding rules for the attention kernel slots run
    (when DTensor is imported)."""
    import collectives.distributed
    from interop import dtensor_attention
    from interop.import_hooks import after_import

    collectives.distributed.register()
    after_import("torch.distributed.tensor._random", _dtensor_rng_on_the_rank_slot)
    dtensor_attention.install()


def _dtensor_rng_on_the_rank_slot(module) -> None:
    """DTensor's random ops on a hybrid mesh.

    Its RNG tracker keeps CUDA's Philox state (seed and offset) and puts it on device ``rank % device_count()``.
    An emulated slot's generator is the CPU's (Mersenne Twister), which has no offset to advance: on a mesh of
    emulated slots DTensor's random ops draw from each rank's own generator, as on a CPU mesh (so a run equals
    the same run on Gloo and CPUs). On cuda-backed slots the tracker runs, on the rank's own slot: the one its
    hybrid group was made on, which ``rank % device_count()`` does not give on a rack.
    """
    import warnings

    import collectives.distributed
    from interop.import_hooks import after_import

    original_resolve, original_supported = module._resolve_device, module.is_rng_supported_mesh

    def rank_slot() -> int:
        slot = collectives.distributed.local_slot()
        return torch.hybrid.current_device() if slot is None else slot

    def _resolve_device(device_mesh):
        if device_mesh.device_type == DEVICE_TYPE:
            return torch.device(DEVICE_TYPE, rank_slot())
        return original_resolve(device_mesh)

    def is_rng_supported_mesh(device_mesh) -> bool:
        if device_mesh.device_type == DEVICE_TYPE:
            from interop.rack import current_rack

            slot = rank_slot()
            if not current_rack().devices[slot].backing.is_cuda:
                warnings.warn(f"DTensor random ops on hybrid:{slot} (emulated) draw from this rank's own generator, "
                              "as on a CPU mesh: an emulated slot's generator is the CPU's, not CUDA's Philox",
                              stacklevel=2)
                return False
            return True
        return original_supported(device_mesh)

    for patched, original in ((_resolve_device, original_resolve), (is_rng_supported_mesh, original_supported)):
        patched.__wrapped__ = original
    module._resolve_device = _resolve_device
    module.is_rng_supported_mesh = is_rng_supported_mesh

    def patch_dispatch(dispatch) -> None:  # it imports the function by name
        if getattr(dispatch, "is_rng_supported_mesh", None) is original_supported:
            dispatch.is_rng_supported_mesh = is_rng_supported_mesh
    after_import("torch.distributed.tensor._dispatch", patch_dispatch)


def _register_compilers() -> None:
    """torch.compile (Dynamo, Inductor) and Triton on the slots; each waits for its module's import."""
    from interop.compile import install

    install()
