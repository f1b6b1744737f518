"""The walk of torch's NCCL surface under the CUDA layer: every torch path that reaches NCCL's names.

Under the layer ``is_nccl_available()`` answers True and groups created for "nccl" answer as NCCL's, so torch's code
that then names ``ProcessGroupNCCL``, reads a group's NCCL backend or branches on ``Backend.NCCL`` runs. Each such
path is one row of :data:`SURFACE`, with how the layer meets it:

- **served**: the layer makes it work on the hybrid backend (:mod:`interop.cuda_layer.distributed`,
  :mod:`interop.cuda_layer.nccl`);
- **answered**: torch's own code runs as it is and, the group answering as NCCL's, does what it does on CUDA;
- **refused**: it raises :class:`~interop.cuda_layer.refusals.UnsupportedCudaAPI` naming the API, the call site and
  what to use instead.

:func:`scan` reads the installed torch's sources for the functions that name NCCL (``ProcessGroupNCCL``,
``is_nccl_available``, ``Backend.NCCL``, the string ``"nccl"``, ``NCCL_*`` variables); a test checks that each is a
row, so a torch that adds one fails until it is walked. Rows that name no NCCL symbol but reach NCCL's backend
through a group's device binding (``split_group``, DeviceMesh, FSDP's allocation) are added by hand.
tests/support/cuda_scripts/nccl_walk.py exercises every row on two ranks.
"""

from __future__ import annotations

import ast
import os
import re

from interop.cuda_layer.distributed import SYMMETRIC_MEMORY_INSTEAD, SYMMETRIC_MEMORY_REFUSED
from interop.cuda_layer.nccl import REFUSED

_C10D = "torch.distributed.distributed_c10d."
_PG = "torch.distributed.ProcessGroupNCCL."
_HYBRID = "the hybrid group's"

SURFACE: dict[str, tuple[str, str]] = {
    # -- c10d: creating groups ------------------------------------------------------------------------------------
    _C10D + "<module>": ("served", "ProcessGroupNCCL is bound in torch.distributed and distributed_c10d: the "
                                   "layer's class (interop.cuda_layer.nccl), the hybrid group's NCCL face"),
    _C10D + "Backend": ("answered", "NCCL's name, capability (cuda) and backend type: torch's own"),
    _C10D + "_new_process_group_helper": ("served", "every 'nccl' group (also 'undefined' and 'cuda:nccl,...') is a "
                                                    "hybrid group on the rank's slot, recorded by torch as 'nccl', "
                                                    "with ProcessGroupNCCL as its cuda and hybrid backend"),
    _C10D + "init_process_group": ("served", "'nccl' with pg_options=ProcessGroupNCCL.Options(...) and "
                                             "device_id (a CUDA device or index: the group's slot, bound as on "
                                             "CUDA)"),
    _C10D + "new_group": ("served", "backend='nccl' (or the default group's), pg_options, device_id"),
    _C10D + "new_subgroups": ("answered", "sub-groups through new_group"),
    _C10D + "new_subgroups_by_enumeration": ("answered", "sub-groups through new_group"),
    _C10D + "_get_split_source": ("served", "the bound default group's ProcessGroupNCCL; non-members' "
                                            "perform_nocolor_split does nothing (a hybrid sub-group is made by its "
                                            "members on the store)"),
    _C10D + "split_group": ("served", "ProcessGroupHybrid.split_group: sub-groups made by their members on the "
                                      "parent's store, keeping its options and NCCL face"),
    _C10D + "_get_default_timeout": ("served", "10 minutes for 'nccl' (default_pg_nccl_timeout), NCCL's default"),
    # -- c10d: what torch asks of a group ------------------------------------------------------------------------------
    _C10D + "is_nccl_available": ("served", "True: 'nccl' requests get the hybrid backend"),
    _C10D + "is_backend_available": ("answered", "'nccl': True (through is_nccl_available)"),
    _C10D + "get_backend": ("answered", "'nccl' for a group created for it (torch's own record)"),
    _C10D + "get_backend_config": ("answered", "'cuda:nccl' for such a group"),
    _C10D + "_get_pg_config": ("answered", "the group's name, description, 'cuda:nccl', size and ranks"),
    _C10D + "get_pg_count": ("answered", "the groups created, torch's own count"),
    _C10D + "_get_process_group_uid": ("served", "ProcessGroupNCCL.uid: the backend's number in this process"),
    _C10D + "_set_pg_timeout": ("served", "changes " + _HYBRID + " timeout: its operations after fail that much "
                                          "sooner"),
    _C10D + "_add_ephemeral_timeout_for_all_pgs": ("served", "extends the next operation of each group (Inductor "
                                                             "calls it loading a cached graph in a distributed job)"),
    _C10D + "_time_estimator": ("refused", REFUSED["torch.distributed._time_estimator"]),
    _C10D + "_abort_process_group": ("served", "aborts the group's engines (ProcessGroupNCCL._group_start/_end "
                                               "around the aborts do nothing)"),
    _C10D + "destroy_process_group": ("answered", "shuts the group down"),
    _C10D + "shrink_group": ("refused", "new_group(ranks=...) with the ranks that remain (shrinking is NCCL's)"),
    _C10D + "_create_shrunk_process_group": ("refused", "reached only from shrink_group, refused"),
    _C10D + "barrier": ("served", "on the bound slot, or device_ids= mapped (the hybrid group's barrier)"),
    _C10D + "batch_isend_irecv": ("answered", "each operation on the hybrid group (not NCCL's coalescing: the "
                                              "group is not a plain ProcessGroup); pipelining's P2P path"),
    _C10D + "_object_to_tensor": ("answered", "is_nccl_available() only gates a debug log (torch.cuda's answer)"),
    _C10D + "_tensor_to_object": ("answered", "is_nccl_available() only gates a debug log (torch.cuda's answer)"),
    # -- ProcessGroupNCCL's own API (interop.cuda_layer.nccl) ----------------------------------------------------------
    _PG + "Options": ("served", "is_high_priority_stream, config, split_from, split_color, _timeout, "
                                "global_ranks_in_group, group_name: the group's options (the timeout is honoured; "
                                "stream priority and ncclConfig are NCCL's tuning, kept)"),
    _PG + "NCCLConfig": ("served", "ncclConfig_t's fields, kept"),
    _PG + "NCCL_CTA_POLICY_ZERO": ("answered", "NCCL's value (2); NCCL_CTA_POLICY_DEFAULT 0, _EFFICIENCY 1"),
    _PG + "__init__": ("served", "ProcessGroupNCCL(store, rank, size, options): a Gloo engine answering NCCL's API "
                                 "(CPU tensors); groups of slot tensors come from init_process_group/new_group"),
    _PG + "options": ("served", "the group's Options, _timeout its current timeout"),
    _PG + "_set_default_timeout": ("served", "changes " + _HYBRID + " timeout"),
    _PG + "uid": ("served", "the backend's number in this process"),
    _PG + "comm_split_count": ("served", "the groups split from this one"),
    _PG + "perform_nocolor_split": ("served", "nothing to take part in"),
    _PG + "eager_connect_single_device": ("served", "nothing left to connect"),
    _PG + "_group_start": ("served", "nothing to batch: each operation is issued when called"),
    _PG + "_group_end": ("served", "nothing to batch: each operation is issued when called"),
    _PG + "_is_initialized": ("served", "True"),
    _PG + "name": ("served", "'nccl'"),
    _PG + "supports_splitting": ("served", "True: split_group works"),
    _PG + "abort": ("answered", "aborts the engine (its group's operations fail)"),
    _PG + "get_build_nccl_version": ("served", "the NCCL version the layer reports (namespace.CUDA_STACK)"),
    _PG + "get_runtime_nccl_version": ("served", "the NCCL version the layer reports (namespace.CUDA_STACK)"),
    _PG + "register_mem_pool": ("refused", REFUSED[_PG + "register_mem_pool"]),
    _PG + "deregister_mem_pool": ("refused", REFUSED[_PG + "deregister_mem_pool"]),
    _PG + "_add_ephemeral_timeout": ("served", "the hybrid group's next operation waits that much longer, once"),
    _PG + "NCCLConfig.unsafe_get_ptr": ("refused", REFUSED[_PG + "NCCLConfig.unsafe_get_ptr"]),
    # -- beyond c10d --------------------------------------------------------------------------------------------------
    "torch.distributed._dist2.<module>": ("answered", "registers its 'nccl' factory, which the layer replaces"),
    "torch.distributed._dist2._nccl_factory": ("served", "_dist2.new_group('nccl', ...): a hybrid group with NCCL's "
                                                         "face on the device's mapped slot"),
    "torch.distributed.device_mesh.DeviceMesh._init_one_process_group": (
        "served", "a bound default group's mesh dimensions come from split_group; the backend's name() is 'nccl'"),
    "torch.distributed.device_mesh.DeviceMesh.__init__": ("answered", "DeviceMesh('cuda', ...): DTensors on the "
                                                                       "ranks' mapped slots"),
    "torch.distributed.fsdp._fully_shard._fsdp_collectives.ProcessGroupAllocMixin.allocate": (
        "served", "the group's backend for the slot device is ProcessGroupNCCL, which allocates nothing itself: "
                  "torch.empty on the slot"),
    "torch.distributed.nn.functional._AllGather.backward": ("answered", "NCCL's branch: a reduce_scatter on the "
                                                                         "hybrid group"),
    "torch.distributed.nn.functional._AllGatherBase.backward": ("answered", "NCCL's branch: a reduce_scatter on the "
                                                                             "hybrid group"),
    "torch.distributed._shard.sharded_tensor.api.ShardedTensor._get_preferred_device": (
        "served", "the rank's mapped slot (torch asks torch.device(torch.cuda.current_device()), a CUDA index)"),
    "torch.distributed.c10d_logger._get_msg_dict": ("answered", "logs the NCCL version the layer reports"),
    "torch.nn.parallel.distributed.DistributedDataParallel._check_comm_hook": (
        "answered", "bf16 communication hooks are allowed (NCCL >= 2.10)"),
    "torch.nn.parallel.distributed._dump_DDP_relevant_env_vars": ("answered", "logs the NCCL_* variables, as on "
                                                                               "CUDA; none changes the rack"),
    "torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._start_workers": (
        "answered", "sets TORCH_NCCL_ASYNC_ERROR_HANDLING for the workers; nothing on the rack reads it"),
    "torch._inductor.fx_passes.micro_pipeline_tp.fuse_all_gather_matmul": (
        "answered", "fuses only for groups with symmetric memory, which the layer refuses: never fused"),
    "torch._inductor.fx_passes.micro_pipeline_tp.fuse_matmul_reduce_scatter": (
        "answered", "fuses only for groups with symmetric memory, which the layer refuses: never fused"),
    "torch.distributed._symmetric_memory._nccl.register_external_nccl_comm": (
        "refused", "nothing: there is no NCCL communicator behind a slot"),
    "torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm": (
        "refused", "FSDP2's default all-gather buffers (slots share no symmetric memory)"),
    "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule.set_symm_mem_for_comm": (
        "refused", "reached only from FSDPModule.set_symm_mem_for_comm, refused"),
    "torch.distributed.fsdp._fully_shard._fsdp_param_group.FSDPParamGroup.set_symm_mem": (
        "refused", "reached only from FSDPModule.set_symm_mem_for_comm, refused"),
    "torch.distributed.fsdp._fully_shard._fsdp_collectives.SymmMemAllocMixin.__init__": (
        "refused", "reached only from FSDPModule.set_symm_mem_for_comm, refused"),
    "torch.distributed.fsdp._fully_shard._fsdp_collectives.SymmMemAllGather.__init__": (
        "refused", "reached only from FSDPModule.set_symm_mem_for_comm, refused"),
    "torch.distributed.fsdp._fully_shard._fsdp_collectives.SymmMemReduceScatter.__init__": (
        "refused", "reached only from FSDPModule.set_symm_mem_for_comm, refused"),
}
for _name in SYMMETRIC_MEMORY_REFUSED:
    SURFACE[f"torch.distributed._symmetric_memory.{_name}"] = ("refused", SYMMETRIC_MEMORY_INSTEAD)
"""Every torch path that reaches NCCL's names under the layer: qualified name -> (how, note)."""

SCANNED = ("distributed", "nn/parallel", "_inductor/fx_passes")
"""The parts of torch :func:`scan` reads (``torch.cuda.nccl`` is walked with CUDA's namespace)."""
NOT_SCANNED = ("distributed/flight_recorder",)
"""Parts left out: torch's offline reader of NCCL flight-recorder dumps (``torchfrtrace``), which no training
script reaches and for which the hybrid backend writes no dump."""

_MENTION = re.compile(r"ProcessGroupNCCL|is_nccl_available|NCCL|[\"']nccl[\"']")
_NAMES = frozenset({"ProcessGroupNCCL", "is_nccl_available"})


def _functions_naming_nccl(source: str, module: str) -> set[str]:
    """The qualified names of the functions (``<module>`` for top-level code) of one source that name NCCL."""
    found: set[str] = set()
    stack: list[str] = []

    def note() -> None:
        found.add(f"{module}.{'.'.join(stack) if stack else '<module>'}")

    class Visitor(ast.NodeVisitor):
        def _scope(self, node) -> None:
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

        def visit_Name(self, node) -> None:
            if node.id in _NAMES:
                note()

        def visit_Attribute(self, node) -> None:
            if node.attr in _NAMES or node.attr == "NCCL":
                note()
            self.generic_visit(node)

        def visit_Constant(self, node) -> None:
            if isinstance(node.value, str) and (node.value.lower() == "nccl"
                                                or re.fullmatch(r"(TORCH_)?NCCL_[A-Z_]+", node.value)):
                note()

    Visitor().visit(ast.parse(source))
    return found


def scan(torch_dir: str | None = None) -> set[str]:
    """The functions of the installed torch (:data:`SCANNED`; tests excluded) whose code names NCCL."""
    if torch_dir is None:
        import torch

        torch_dir = os.path.dirname(torch.__file__)
    found: set[str] = set()
    for part in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(torch_dir, part)):
            dirs[:] = [d for d in dirs if not d.startswith(("test", "__pycache__"))
                       and os.path.relpath(os.path.join(folder, d), torch_dir) not in NOT_SCANNED]
            for name in files:
                if not name.endswith(".py") or name.startswith("test"):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    source = f.read()
                if not _MENTION.search(source):
                    continue
                relative = os.path.relpath(path, torch_dir)[:-3].replace(os.sep, ".")
                module = "torch." + relative.removesuffix(".__init__")
                found |= _functions_naming_nccl(source, module)
    return found


def unwalked(torch_dir: str | None = None) -> list[str]:
    """The scanned functions that are not rows of :data:`SURFACE` (none, while the walk is complete)."""
    return sorted(scan(torch_dir) - SURFACE.keys())


__all__ = ["NOT_SCANNED", "SCANNED", "SURFACE", "scan", "unwalked"]
