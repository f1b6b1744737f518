"""torch.distributed written for NCCL on the rack.

Every process group torch creates for "nccl" (``init_process_group``, ``new_group``, ``new_subgroups``, DeviceMesh,
``split_group``; a composite such as ``"cuda:nccl,cpu:gloo"``, or no backend at all, which is NCCL on CUDA) is the
project's ``hybrid`` backend on the rank's mapped slot, answering in NCCL's terms: torch records it as "nccl"
(``get_backend``, ``get_backend_config``), its backend for the cuda device is a ``ProcessGroupNCCL``
(:mod:`interop.cuda_layer.nccl`), ``init_process_group(device_id=...)`` binds it as on CUDA.
``is_nccl_available()`` is True and ``torch.distributed.ProcessGroupNCCL`` exists; DDP's
``device_ids``/``output_device``, DataParallel's, FSDP's ``device_id``, ``init_device_mesh("cuda", ...)``,
``barrier(device_ids=...)`` and the object collectives' ``device`` take CUDA indices. What NCCL has and a slot has
not (symmetric memory, NCCL-registered memory pools) is refused by name. :mod:`interop.cuda_layer.nccl_surface`
walks every torch path that reaches NCCL's names.
"""

from __future__ import annotations

import functools

import torch

from interop.cuda_layer import mapping
from interop.cuda_layer.patch_ledger import PATCHES, device_kwarg, when_imported
from interop.cuda_layer.refusals import unsupported
from interop.cuda_layer.usage import touch

SYMMETRIC_MEMORY_INSTEAD = ("the group's collectives on the hybrid backend (all_gather_into_tensor, "
                            "reduce_scatter_tensor...): slots share no peer-mapped memory; leave symmetric-memory "
                            "options (async TP, FSDP's symm_mem) off")
"""What to use instead of CUDA's symmetric memory."""

SYMMETRIC_MEMORY_REFUSED = ("empty", "rendezvous", "set_backend", "get_backend", "get_mem_pool",
                            "get_mempool_allocator", "enable_symm_mem_for_group", "get_symm_mem_workspace",
                            "put_signal", "wait_signal", "reduce_scatter_offset", "set_signal_pad_size")
"""The names of ``torch.distributed._symmetric_memory`` that allocate, map or configure symmetric memory."""


def _backend_for(backend):
    """(the hybrid request, whether it was NCCL's): "nccl", and "undefined" (no backend: NCCL on CUDA) ->
    "hybrid"; in a per-device spec "cuda:nccl" -> "hybrid:hybrid"; anything else unchanged."""
    if backend is None:
        return None, False
    text = str(backend).lower()
    if text in ("nccl", "undefined"):
        return "hybrid", True
    if ":" in text and "nccl" in text:
        parts = []
        for item in text.split(","):
            dev, _, name = item.partition(":")
            dev = "hybrid" if dev.strip() == "cuda" else dev.strip()
            name = "hybrid" if name.strip() == "nccl" else name.strip()
            parts.append(f"{dev}:{name}")
        return ",".join(parts), True
    return backend, False


# -- groups: every creation path meets in c10d's _new_process_group_helper ------------------------------------------

def _patch_groups(dist, c10d) -> None:
    """An "nccl" group, however torch reaches its creation, is a hybrid group with NCCL's face (DeviceMesh and
    others bound c10d's new_group before the layer was installed: the creation helper is their common path)."""
    import collectives.distributed as cd
    from interop.cuda_layer import nccl

    original = c10d._new_process_group_helper

    @functools.wraps(original)
    def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store, group_name,
                                  backend_options=None, timeout=None, pg_tag=None, device_id=None, group_desc=None):
        hybrid, was_nccl = _backend_for(backend)
        if not was_nccl:
            if device_id is not None and device_id.type == mapping.DEVICE_TYPE:
                # the default group's bound slot: only an NCCL group's backend answers for it (gloo's serves cpu
                # and cuda, a plain hybrid group's cpu), so the others are made unbound
                device_id = None
            return original(group_size, group_rank, global_ranks_in_group, backend, store, group_name,
                            backend_options=backend_options, timeout=timeout, pg_tag=pg_tag, device_id=device_id,
                            group_desc=group_desc)
        default_group = not global_ranks_in_group
        _record_request(default_group, device_id)
        options = nccl.group_options(backend_options, timeout,
                                     nccl.rank_slot(device_id, default_group=default_group))
        pg, pg_store = original(group_size, group_rank, global_ranks_in_group, c10d.Backend(hybrid), store,
                                group_name, backend_options=options, timeout=timeout, pg_tag=pg_tag,
                                device_id=device_id, group_desc=group_desc)
        if pg is not c10d.GroupMember.NON_GROUP_MEMBER:
            _recorded_as_nccl(c10d, pg, backend, device_id)
        return pg, pg_store
    PATCHES.set(c10d, "_new_process_group_helper", _new_process_group_helper)
    # device_id in CUDA's forms names the mapped slot: torch's own code sees the accelerator as hybrid.
    for name in ("init_process_group", "new_group"):
        wrapped = device_kwarg(getattr(c10d, name), f"torch.distributed.{name}(device_id=...)", kwarg="device_id")
        PATCHES.set(c10d, name, wrapped)
        PATCHES.set(dist, name, wrapped)
    # NCCL's default timeout (10 minutes), which this torch lacks without NCCL: torch warns and uses 30 minutes.
    import torch.distributed.constants as constants

    PATCHES.set(c10d, "default_pg_nccl_timeout", cd.DEFAULT_TIMEOUT)
    PATCHES.set(constants, "default_pg_nccl_timeout", cd.DEFAULT_TIMEOUT)


def _record_request(default_group: bool, device_id) -> None:
    if default_group:
        touch("torch.distributed.init_process_group('nccl')", "mapped",
              "the project's 'hybrid' backend (Gloo moves the bytes, the rack models the time)")
        if device_id is not None:
            touch("torch.distributed.init_process_group(device_id=...)", "mapped",
                  "the group's slot is device_id's mapped slot; bound to device_id as on CUDA")
    else:
        touch("torch.distributed.new_group(backend='nccl')", "mapped", "a 'hybrid' sub-group")


def _recorded_as_nccl(c10d, pg, backend, device_id) -> None:
    """torch's records answer as for NCCL: get_backend() "nccl" (the backend as asked), get_backend_config()
    "cuda:nccl", bound_device_id the device asked for."""
    world = c10d._world
    world.pg_map[pg] = (c10d.Backend(str(backend)), world.pg_map[pg][1])
    world.pg_backend_config[pg] = ("cuda:nccl" if str(backend).lower() == "undefined"
                                   else str(c10d.BackendConfig(c10d.Backend(str(backend)))))
    if device_id is not None:
        pg.bound_device_id = device_id


# -- what torch asks about NCCL -------------------------------------------------------------------------------------

def _patch_queries(dist, c10d) -> None:
    def is_nccl_available() -> bool:
        touch("torch.distributed.is_nccl_available", "mapped", "True: 'nccl' requests get the hybrid backend")
        return True
    PATCHES.set(dist, "is_nccl_available", is_nccl_available)
    PATCHES.set(c10d, "is_nccl_available", is_nccl_available)
    when_imported("torch.distributed._shard.sharded_tensor.api", _patch_sharded_tensor)


def _patch_sharded_tensor(api) -> None:
    """ShardedTensor's device for an NCCL group is ``torch.device(torch.cuda.current_device())``: a bare CUDA
    index, which torch.device reads as a hybrid slot; it is the rank's mapped slot."""
    cls = api.ShardedTensor
    original = cls._get_preferred_device

    @functools.wraps(original)
    def _get_preferred_device(self) -> torch.device:
        import torch.distributed as dist

        if dist.get_backend(self._process_group) == dist.Backend.NCCL:
            touch("ShardedTensor (nccl group)", "mapped", "its collectives' tensors on the rank's mapped slot")
            return torch.device(mapping.DEVICE_TYPE, mapping.slot_of(None))
        return original(self)
    PATCHES.set(cls, "_get_preferred_device", _get_preferred_device)


# -- NCCL's classes, and what stands on them ------------------------------------------------------------------------

def _patch_nccl_classes(dist, c10d) -> None:
    """``ProcessGroupNCCL`` where torch's code names it; _dist2's "nccl" factory; symmetric memory refused."""
    from interop.cuda_layer import nccl

    PATCHES.set(dist, "ProcessGroupNCCL", nccl.ProcessGroupNCCL)
    PATCHES.set(c10d, "ProcessGroupNCCL", nccl.ProcessGroupNCCL)
    if hasattr(c10d, "shrink_group"):  # NCCL's alone (supports_shrinking)
        shrink = unsupported("torch.distributed.shrink_group",
                             "new_group(ranks=...) with the ranks that remain (shrinking is NCCL's)")
        PATCHES.set(c10d, "shrink_group", shrink)
        if hasattr(dist, "shrink_group"):
            PATCHES.set(dist, "shrink_group", shrink)
    when_imported("torch.distributed._dist2", _patch_dist2)
    when_imported("torch.distributed._symmetric_memory", _refuse_symmetric_memory)
    when_imported("torch.distributed._symmetric_memory._nccl", _refuse_external_comms)


def _patch_dist2(dist2) -> None:
    import collectives.distributed as cd
    from interop.cuda_layer import nccl

    def nccl_factory(store, rank: int, world_size: int, timeout, device, **kwargs):
        touch("torch.distributed._dist2.new_group('nccl')", "mapped",
              "a hybrid group on device's mapped slot (registered with torch.distributed no more than _dist2's are)")
        options = nccl.Options()
        options._timeout = timeout
        for name, value in kwargs.items():
            if not hasattr(options, name):
                raise KeyError(f"Unknown option {name}")
            setattr(options, name, value)
        device = torch.device(device)
        slot = nccl.rank_slot(device if device.index is not None else None)
        return cd.create(store, rank, world_size, timeout, nccl.group_options(options, timeout, slot),
                         global_ranks=list(range(world_size)))
    PATCHES.set_item(dist2._BACKENDS, "nccl", nccl_factory)


def _refuse_symmetric_memory(symm_mem) -> None:
    for name in SYMMETRIC_MEMORY_REFUSED:
        if hasattr(symm_mem, name):
            PATCHES.set(symm_mem, name, unsupported(f"torch.distributed._symmetric_memory.{name}",
                                                    SYMMETRIC_MEMORY_INSTEAD))


def _refuse_external_comms(module) -> None:
    if hasattr(module, "register_external_nccl_comm"):
        PATCHES.set(module, "register_external_nccl_comm", unsupported(
            "torch.distributed._symmetric_memory._nccl.register_external_nccl_comm",
            "nothing: there is no NCCL communicator behind a slot"))


# -- barrier and object collectives -----------------------------------------------------------------------------------

def _patch_barrier_and_objects(dist, c10d) -> None:
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


# -- DDP and DataParallel ----------------------------------------------------------------------------------------------

def _patch_ddp_dp() -> None:
    from torch.nn.parallel import DataParallel
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


# -- FSDP, DeviceMesh and DCP (they cost seconds to import: patched when the script imports them) ----------------------

def _patch_fsdp_mesh(dist) -> None:
    def patch_fsdp(fsdp) -> None:
        cls = fsdp.FullyShardedDataParallel
        PATCHES.set(cls, "__init__", device_kwarg(cls.__init__, "FullyShardedDataParallel(device_id=...)",
                                                  kwarg="device_id"))
        if hasattr(fsdp, "FSDPModule") and hasattr(fsdp.FSDPModule, "set_symm_mem_for_comm"):
            PATCHES.set(fsdp.FSDPModule, "set_symm_mem_for_comm", unsupported(
                "torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm",
                "FSDP2's default all-gather buffers (slots share no symmetric memory)"))

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

    when_imported("torch.distributed.fsdp", patch_fsdp)
    when_imported("torch.distributed.device_mesh", patch_mesh)
    when_imported("torch.distributed.checkpoint.filesystem", patch_checkpoint_writer)


def install() -> None:
    """Patch torch.distributed (where torch was built with it)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    _patch_groups(dist, c10d)
    _patch_queries(dist, c10d)
    _patch_nccl_classes(dist, c10d)
    _patch_barrier_and_objects(dist, c10d)
    _patch_ddp_dp()
    _patch_fsdp_mesh(dist)


__all__ = ["SYMMETRIC_MEMORY_INSTEAD", "SYMMETRIC_MEMORY_REFUSED", "install"]
