"""Installing the CUDA layer: every patch made once, at start, and undone by :func:`uninstall_patches`.

The patches, by concern: :mod:`interop.cuda_layer.cuda_module` (``torch.cuda`` itself),
:mod:`interop.cuda_layer.namespace` (its submodules, torch.backends.cuda/cudnn, torch.version), :mod:`interop.cuda_layer.device_args`
(device arguments in every form), :mod:`interop.cuda_layer.settings` (autocast, GradScaler, torch.backends flags,
profiler activities), :mod:`interop.cuda_layer.distributed` (``"nccl"`` -> the ``hybrid`` backend, DDP/FSDP device ids).
Each records its use for the report. Triton, torch.compile and torch.jit are left as they are; nothing here sits
on the per-op path (an op on a hybrid tensor never reaches Python because of the layer).
"""

from __future__ import annotations

from interop.cuda_layer import cuda_module, device_args, distributed, ipc, namespace, settings
from interop.cuda_layer.patch_ledger import PATCHES, forget_pending_imports, skip_frames, when_imported


def install_patches() -> None:
    """Make every patch (once)."""
    if PATCHES.done:
        return
    namespace.import_all()
    cuda_module.install()
    namespace.install()
    device_args.install()
    settings.install()
    distributed.install()
    ipc.install()
    # Patches made from now on are marked as they are made (Patches.set); those made before Dynamo loads, then.
    when_imported("torch._dynamo", lambda _: skip_frames(PATCHES.values()))


def uninstall_patches() -> None:
    """Restore every patched attribute."""
    PATCHES.undo()
    forget_pending_imports()


__all__ = ["install_patches", "uninstall_patches"]
