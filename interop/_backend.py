"""Registers the `hybrid` device type with PyTorch (once per process)."""

from __future__ import annotations

import sys

import torch

DEVICE_TYPE = "hybrid"
_registered = False


def register() -> None:
    """Rename PrivateUse1 to ``hybrid``, install ``torch.hybrid`` and the
    ``Tensor.hybrid()`` / ``Module.hybrid()`` / storage methods."""
    global _registered
    if _registered:
        return
    from interop import _C  # loading it registers the C++ backend
    from interop import hybrid as module
    from interop import timelines as timeline

    if torch._C._get_privateuse1_backend_name() != DEVICE_TYPE:
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    torch._register_device_module(DEVICE_TYPE, module)
    sys.modules.setdefault(f"torch.{DEVICE_TYPE}", module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _C._set_elapsed_hook(timeline._elapsed_hook)
    from interop import fidelity, profiling

    fidelity.install()
    profiling.install()
    _register_collective_hooks()
    _register_distributed_backend()
    _registered = True


def _register_collective_hooks() -> None:
    """Give the collective layer what it needs from the device layer (it may not import us)."""
    import collectives.device_hooks
    from interop import _C
    from interop import timelines
    from interop.rack import current_rack

    def place(name, slots, seconds, nbytes, algorithm, sources, link):
        return timelines.current().place_collective(name, slots, seconds, nbytes, algorithm, sources, link)

    collectives.device_hooks.register(collectives.device_hooks.DeviceHooks(alias=_C._execution_alias,
                                                                           rack=current_rack, place=place))


def _register_distributed_backend() -> None:
    """Make ``torch.distributed.init_process_group("hybrid")`` available (collectives.distributed)."""
    import collectives.distributed

    collectives.distributed.register()
