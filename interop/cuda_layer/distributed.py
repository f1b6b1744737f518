"""torch.distributed written for NCCL on the rack: ``init_process_group("nccl")`` and ``new_group(backend="nccl")``
create the project's ``hybrid`` backend on the rank's mapped slot, ``get_backend()`` answers ``"nccl"`` for them,
``is_nccl_available()`` is True; DDP's ``device_ids``/``output_device``, DataParallel's, FSDP's ``device_id``,
``init_device_mesh("cuda", ...)``, ``barrier(device_ids=...)`` and the object collectives' ``device`` take CUDA
indices."""

from __future__ import annotations

import functools

import torch

from interop.cuda_layer import mapping
from interop.cuda_layer.patch_ledger import PATCHES, device_kwarg, when_imported
from interop.cuda_layer.usage import touch


_NCCL_GROUPS: set = set()
"""Process groups created for an "nccl" request (their get_backend() answers "nccl")."""


def _backend_for(backend):
    """"nccl" (and "cuda:nccl" in a per-device spec) -> "hybrid"; anything else unchanged."""
    if backend is None:
        return None, False
    text = str(backend)
    if text.lower() == "nccl":
        return "hybrid", True
    if ":" in text and "nccl" in text.lower():
        parts = []
        for item in text.split(","):
            dev, _, name = item.partition(":")
            dev = "hybrid" if dev.strip() == "cuda" else dev.strip()
            name = "hybrid" if name.strip().lower() == "nccl" else name.strip()
            parts.append(f"{dev}:{name}")
        return ",".join(parts), True
    return backend, False


def _rank_slot_options(device_id=None):
    """The hybrid group's options: the rank's slot from ``device_id`` (the CUDA device it named), else from
    LOCAL_RANK, else the current slot."""
    import collectives.distributed as cd
    from collectives.torchrun_env import torchrun_env

    if device_id is not None:
        return cd.Options(slot=mapping.slot_of(device_id))
    local = torchrun_env().local_rank
    if local is not None:
        return cd.Options(slot=mapping.current().slot(local))
    from interop import _C

    return cd.Options(slot=_C._current_slot())


def _patch_distributed() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    original_init = dist.init_process_group

    @functools.wraps(original_init)
    def init_process_group(backend=None, *args, **kwargs):
        backend, was_nccl = _backend_for(backend if backend is not None else kwargs.pop("backend", None))
        if was_nccl:
            touch("torch.distributed.init_process_group('nccl')", "mapped",
                  "the project's 'hybrid' backend (Gloo moves the bytes, the rack models the time)")
            # device_id (current recipes pass the rank's CUDA device) names the group's slot. It is not bound in
            # c10d: binding selects a per-device backend and NCCL-style communicator splitting, which the hybrid
            # group (one backend for every device, Gloo moving the bytes) has no use for.
            device_id = kwargs.pop("device_id", None)
            if device_id is not None:
                touch("torch.distributed.init_process_group(device_id=...)", "mapped",
                      "the group's slot is the mapped slot of device_id")
                device_id = mapping.to_hybrid(torch.device("cuda", device_id) if isinstance(device_id, int)
                                              else device_id)
            if kwargs.get("pg_options") is None:
                kwargs["pg_options"] = _rank_slot_options(device_id)
        out = original_init(backend, *args, **kwargs)
        if was_nccl:
            _NCCL_GROUPS.add(dist.group.WORLD)
        return out
    PATCHES.set(dist, "init_process_group", init_process_group)
    import torch.distributed.distributed_c10d as c10d

    PATCHES.set(c10d, "init_process_group", init_process_group)

    original_new_group = dist.new_group

    @functools.wraps(original_new_group)
    def new_group(*args, **kwargs):
        backend, was_nccl = _backend_for(kwargs.get("backend"))
        if was_nccl:
            touch("torch.distributed.new_group(backend='nccl')", "mapped", "a 'hybrid' sub-group")
            kwargs["backend"] = backend
        group = original_new_group(*args, **kwargs)
        if was_nccl or (kwargs.get("backend") is None and dist.group.WORLD in _NCCL_GROUPS):
            _NCCL_GROUPS.add(group)
        return group
    PATCHES.set(dist, "new_group", new_group)
    PATCHES.set(c10d, "new_group", new_group)

    original_get_backend = dist.get_backend

    @functools.wraps(original_get_backend)
    def get_backend(group=None):
        name = original_get_backend(group)
        key = dist.group.WORLD if group is None else group
        if name == "hybrid" and key in _NCCL_GROUPS:
            touch("torch.distributed.get_backend", "same", "answers 'nccl' for groups created as 'nccl'")
            return dist.Backend.NCCL
        return name
    PATCHES.set(dist, "get_backend", get_backend)
    PATCHES.set(c10d, "get_backend", get_backend)

    def is_nccl_available() -> bool:
        touch("torch.distributed.is_nccl_available", "mapped", "True: 'nccl' requests get the hybrid backend")
        return True
    PATCHES.set(dist, "is_nccl_available", is_nccl_available)
    PATCHES.set(c10d, "is_nccl_available", is_nccl_available)

    original_barrier = dist.barrier

    @functools.wraps(original_barrier)
    def barrier(*args, **kwargs):
        if kwargs.get("device_ids") is not None:
            touch("torch.distributed.barrier(device_ids=...)", "mapped", "barrier on the hybrid group")
            kwargs.pop("device_ids")
        return original_barrier(*args, **kwargs)
    PATCHES.set(dist, "barrier", barrier)
    PATCHES.set(c10d, "barrier", barrier)

    for name in ("broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
                 "send_object_list", "recv_object_list"):
        if hasattr(dist, name):
            wrapped = device_kwarg(getattr(dist, name), f"torch.distributed.{name}(device=cuda)")
            PATCHES.set(dist, name, wrapped)

    from torch.nn.parallel import DistributedDataParallel as DDP

    original_ddp = DDP.__init__

    @functools.wraps(original_ddp)
    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if device_ids is not None:
            touch("DistributedDataParallel(device_ids=...)", "mapped", "the ranks' mapped slots")
            device_ids = [mapping.to_hybrid(d) for d in device_ids]
        if output_device is not None:
            output_device = mapping.to_hybrid(output_device)
        original_ddp(self, module, device_ids, output_device, *args, **kwargs)
    PATCHES.set(DDP, "__init__", ddp_init)

    from torch.nn.parallel import DataParallel

    original_dp = DataParallel.__init__

    @functools.wraps(original_dp)
    def dp_init(self, module, device_ids=None, output_device=None, dim=0):
        # torch picks "cuda" (CUDA looks available) and CUDA indices; the replicas live on the mapped slots, and
        # the scatter, broadcast and gather run on them (interop.data_parallel).
        original_dp(self, module, device_ids, output_device, dim)
        if self.device_ids and self.src_device_obj.type == "cuda":
            touch("torch.nn.DataParallel", "mapped", "replicas on the mapped slots; scatter, broadcast, gather and "
                  "the gradients' sum between them (modelled copies)")
            device_map = mapping.current()
            self.device_ids = [device_map.slot(i) for i in self.device_ids]
            self.output_device = device_map.slot(self.output_device)
            self.src_device_obj = torch.device(mapping.DEVICE_TYPE, self.device_ids[0])
    PATCHES.set(DataParallel, "__init__", dp_init)

    def patch_fsdp(fsdp) -> None:
        cls = fsdp.FullyShardedDataParallel
        PATCHES.set(cls, "__init__", device_kwarg(cls.__init__, "FullyShardedDataParallel(device_id=...)",
                                                  kwarg="device_id"))

    def patch_mesh(dm) -> None:
        original_mesh = dm.init_device_mesh

        @functools.wraps(original_mesh)
        def init_device_mesh(device_type, *args, **kwargs):
            if device_type == "cuda":
                touch("init_device_mesh('cuda')", "mapped", "a mesh of hybrid slots")
                device_type = "hybrid"
            return original_mesh(device_type, *args, **kwargs)
        PATCHES.set(dm, "init_device_mesh", init_device_mesh)
        if hasattr(dist, "init_device_mesh"):
            PATCHES.set(dist, "init_device_mesh", init_device_mesh)

    def patch_checkpoint_writer(filesystem) -> None:
        # torch asks torch._utils._get_available_device_type() in two places (torch 2.13): DataParallel, which
        # wants CUDA's indices ("cuda", mapped to slots by dp_init above), and DCP's file writer, which copies
        # the tensors of that device type to the CPU before writing them and refuses any other ("Tensor must be
        # on CPU"): the tensors are on slots, so the writer is told the slots' device type.
        PATCHES.set(filesystem, "_get_available_device_type", lambda: mapping.DEVICE_TYPE)

    # FSDP, DeviceMesh and DCP cost seconds to import: patched when the script imports them.
    when_imported("torch.distributed.fsdp", patch_fsdp)
    when_imported("torch.distributed.device_mesh", patch_mesh)
    when_imported("torch.distributed.checkpoint.filesystem", patch_checkpoint_writer)


def install() -> None:
    """Patch torch.distributed (where torch was built with it)."""
    _patch_distributed()


def clear() -> None:
    """Forget the groups created for "nccl" (uninstall)."""
    _NCCL_GROUPS.clear()
