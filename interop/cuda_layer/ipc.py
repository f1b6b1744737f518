"""CUDA IPC under the layer: sharing a mapped slot's tensor with another process is refused by name.

CUDA shares device memory between processes through IPC handles (``UntypedStorage._share_cuda_``, which
``torch.multiprocessing`` calls when a CUDA tensor goes through a Queue or a Process's arguments). A slot's
memory has no such handle: an emulated slot's bytes are this process's own host allocations. Rather than
torch's "CUDA is not available" or "_share_fd_: only available on CPU" (raised in a Queue's feeder thread,
while the receiver waits), the sender gets :class:`UnsupportedCudaAPI` naming what it did and what to use.
"""

from __future__ import annotations

import torch

from interop.cuda_layer.patch_ledger import PATCHES
from interop.cuda_layer.refusals import UNSUPPORTED, unsupported

INSTEAD = ("send tensor.cpu() (torch.multiprocessing shares CPU tensors through shared memory) and move it to "
           "'cuda' in the receiving process, or use torch.distributed between processes")
SHARING = "torch.multiprocessing (a tensor on a mapped slot sent to another process: CUDA IPC)"

UNSUPPORTED["torch.UntypedStorage._share_cuda_"] = INSTEAD
UNSUPPORTED[SHARING] = INSTEAD


def _on_slot(obj) -> bool:
    if isinstance(obj, torch.storage.TypedStorage):
        # Its `device` property warns that TypedStorage is deprecated: a DataLoader worker's batches would warn
        # in the user's output although the user never touched a TypedStorage.
        obj = obj._untyped_storage
    device = getattr(obj, "device", None)
    return isinstance(device, torch.device) and device.type == "hybrid"


def install() -> None:
    """Refuse ``_share_cuda_`` and the pickling of slot tensors and storages by torch.multiprocessing."""
    PATCHES.set(torch.UntypedStorage, "_share_cuda_",
                unsupported("torch.UntypedStorage._share_cuda_", INSTEAD))
    import importlib
    from multiprocessing.reduction import ForkingPickler

    importlib.import_module("torch.multiprocessing")  # registers torch's reducers

    refuse = unsupported(SHARING, INSTEAD)
    reducers = ForkingPickler._extra_reducers
    for cls, original in list(reducers.items()):
        if not (issubclass(cls, torch.Tensor) or cls in (torch.UntypedStorage, torch.storage.TypedStorage)):
            continue

        def reduce(*args, __original=original, **kwargs):
            if args and _on_slot(args[0]):
                refuse()
            return __original(*args, **kwargs)
        PATCHES.set_item(reducers, cls, reduce)
