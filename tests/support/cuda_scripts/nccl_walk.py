"""Under torchrun and the CUDA layer, two ranks: exercise every row of interop.cuda_layer.nccl_surface.SURFACE (each
torch path that reaches NCCL's names), and the same process's groups that are not NCCL's (gloo, hybrid).

Each row records {"outcome": "works", "checks": {name: [got, expected]}} (expected: a CPU computation or a formula),
{"outcome": "refused", "api": ..., "message": ...} or {"outcome": "error", ...}; the test asserts on them.

torchrun --nproc_per_node=2 -m interop.run nccl_walk.py --out walk   (writes walk.rank0.json, walk.rank1.json)
"""

import argparse
import contextlib
import copy
import json
import os
import time
import traceback
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from interop.cuda_layer import UnsupportedCudaAPI
from interop.cuda_layer.nccl_surface import SURFACE

C10D = "torch.distributed.distributed_c10d."
PG = "torch.distributed.ProcessGroupNCCL."
CUDA = torch.device("cuda")
RESULTS: dict = {}


def row(*names):
    """Run the decorated check now and record its outcome under every name (a row reached only through another
    shares its outcome)."""
    def run(fn):
        start = time.monotonic()
        try:
            out = {"outcome": "works", "checks": fn() or {}}
        except UnsupportedCudaAPI as e:
            out = {"outcome": "refused", "api": e.api, "message": str(e)}
        except Exception as e:  # noqa: BLE001
            out = {"outcome": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        out["seconds"] = round(time.monotonic() - start, 3)
        for name in names:
            RESULTS[name] = out
        return fn
    return run


def values(t):
    return t.detach().to("cpu").tolist()


def nccl_backend(group):
    return group._get_backend(CUDA)


def creating_groups(ctx):
    """Every way torch creates an NCCL group."""
    rank, world, local, own = ctx.rank, ctx.world, ctx.local, ctx.own
    total, WORLD, slot_device, all_reduce_on = ctx.total, ctx.group, ctx.slot_device, ctx.all_reduce_on
    @row(C10D + "<module>")
    def _():
        return {"same class": [dist.ProcessGroupNCCL is c10d.ProcessGroupNCCL, True],
                "world's cuda backend": [isinstance(nccl_backend(WORLD), dist.ProcessGroupNCCL), True],
                "world's slot backend": [nccl_backend(WORLD) is WORLD._get_backend(slot_device), True]}

    @row(C10D + "Backend")
    def _():
        return {"name": [dist.Backend.NCCL, "nccl"], "capability": [dist.Backend.backend_capability["nccl"], ["cuda"]]}

    @row(C10D + "_new_process_group_helper", C10D + "init_process_group")
    def _():
        face = nccl_backend(WORLD)
        return {"all_reduce": [all_reduce_on(WORLD), [total] * 3],
                "bound_device_id": [str(WORLD.bound_device_id), str(slot_device)],
                "current device": [torch.cuda.current_device(), local],
                "timeout": [WORLD.timeout.total_seconds(), 60.0],
                "options kept": [[face.options.is_high_priority_stream, face.options.config.cta_policy], [True, 2]],
                "options' timeout": [face.options._timeout.total_seconds(), 60.0]}

    @row(C10D + "new_group")
    def _():
        sub = dist.new_group(backend="nccl", pg_options=dist.ProcessGroupNCCL.Options(is_high_priority_stream=True))
        inherited = dist.new_group()
        composite = dist.new_group(backend="cuda:nccl,cpu:gloo")  # torchtitan's spec with a CPU backend
        on_cpu = torch.full((2,), own)
        dist.all_reduce(on_cpu, group=composite)
        return {"all_reduce": [all_reduce_on(sub), [total] * 3], "backend": [dist.get_backend(sub), "nccl"],
                "composite": [[dist.get_backend_config(composite), all_reduce_on(composite), on_cpu.tolist()],
                              ["cuda:nccl,cpu:gloo", [total] * 3, [total] * 2]],
                "options": [nccl_backend(sub).options.is_high_priority_stream, True],
                "inherited": [[dist.get_backend(inherited), all_reduce_on(inherited)], ["nccl", [total] * 3]],
                "bound": [str(sub.bound_device_id), str(slot_device)]}

    @row(C10D + "new_subgroups")
    def _():
        mine, groups = dist.new_subgroups(group_size=1)
        return {"own group": [all_reduce_on(mine), [own] * 3], "groups": [len(groups), world],
                "backend": [dist.get_backend(mine), "nccl"]}

    @row(C10D + "new_subgroups_by_enumeration")
    def _():
        mine, _ = dist.new_subgroups_by_enumeration([[r] for r in range(world)])
        return {"own group": [all_reduce_on(mine), [own] * 3]}

    @row(C10D + "_get_split_source", PG + "perform_nocolor_split")
    def _():
        first = dist.new_group([0])  # rank 1 is outside: it takes NCCL's no-color split, which does nothing
        member = first is not dist.GroupMember.NON_GROUP_MEMBER
        checks = {"member": [member, rank == 0]}
        if member:
            checks["alone"] = [all_reduce_on(first), [own] * 3]
        return checks

    @row(C10D + "split_group", PG + "comm_split_count", PG + "supports_splitting",
         "torch.distributed.device_mesh.DeviceMesh._init_one_process_group")
    def _():
        face = nccl_backend(WORLD)
        before = face.comm_split_count()
        alone = dist.split_group(split_ranks=[[r] for r in range(world)])
        pair = dist.split_group(split_ranks=[list(range(world))], group_desc="pair")
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        mesh = init_device_mesh("cuda", (world, 1), mesh_dim_names=("dp", "tp"))
        full = torch.arange(8.0).reshape(4, 2)
        dt = distribute_tensor(full.to("cuda"), mesh["dp"], [Shard(0)])
        return {"alone": [all_reduce_on(alone), [own] * 3], "pair": [all_reduce_on(pair), [total] * 3],
                "backends": [[dist.get_backend(alone), dist.get_backend(pair)], ["nccl", "nccl"]],
                # two here, then the mesh's tp dimension (its dp dimension, the whole world, is the default group)
                "split count": [face.comm_split_count() - before, 3],
                "description": [alone.group_desc.startswith("default_pg:split:"), True],
                "supports_splitting": [face.supports_splitting, True],
                "mesh groups": [[mesh["dp"].get_group().size(), mesh["tp"].get_group().size(),
                                 dist.get_backend(mesh["tp"].get_group())], [world, 1, "nccl"]],
                "dtensor": [values(dt.redistribute(mesh["dp"], [Replicate()]).to_local()), full.tolist()],
                "shard": [values(dt.to_local()), full.chunk(world)[rank].tolist()]}

    @row("torch.distributed.device_mesh.DeviceMesh.__init__")
    def _():
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = DeviceMesh("cuda", list(range(world)))
        local_part = torch.full((2,), own, device="cuda")
        whole = DTensor.from_local(local_part, mesh, [Shard(0)]).full_tensor()
        return {"full_tensor": [values(whole), [float(r + 1) for r in range(world) for _ in range(2)]],
                "device": [str(whole.device), str(slot_device)]}

    @row(C10D + "_get_default_timeout")
    def _():
        return {"nccl": [c10d._get_default_timeout(dist.Backend.NCCL).total_seconds(), 600.0]}


def asking_groups(ctx):
    """What torch asks of an NCCL group, and what it does to one."""
    rank, world, local = ctx.rank, ctx.world, ctx.local
    own, WORLD, all_reduce_on = ctx.own, ctx.group, ctx.all_reduce_on
    @row(C10D + "is_nccl_available", C10D + "is_backend_available")
    def _():
        return {"available": [[dist.is_nccl_available(), dist.is_backend_available("nccl"),
                               dist.is_backend_available("cuda:nccl,cpu:gloo")], [True, True, True]]}

    @row(C10D + "get_backend", C10D + "get_backend_config")
    def _():
        return {"backend": [dist.get_backend(), "nccl"], "config": [dist.get_backend_config(), "cuda:nccl"]}

    @row(C10D + "_get_pg_config", C10D + "get_pg_count")
    def _():
        before = dist.distributed_c10d.get_pg_count()
        dist.new_group()
        config = c10d._get_pg_config()
        return {"config": [[config["backend_config"], config["pg_size"], config["ranks"]],
                           ["cuda:nccl", world, list(range(world))]],
                "count": [dist.distributed_c10d.get_pg_count() - before, 1]}

    @row(C10D + "_get_process_group_uid", PG + "uid")
    def _():
        other = dist.new_group()
        uids = [c10d._get_process_group_uid(WORLD), c10d._get_process_group_uid(other)]
        return {"uid": [uids[0], nccl_backend(WORLD).uid], "distinct": [uids[0] != uids[1], True]}

    @row(C10D + "_set_pg_timeout", PG + "_set_default_timeout", PG + "options", C10D + "_abort_process_group",
         PG + "_group_start", PG + "_group_end")
    def _():
        group = dist.new_group()
        before = group.timeout.total_seconds()
        c10d._set_pg_timeout(timedelta(seconds=2), group)
        reported = [group.timeout.total_seconds(), nccl_backend(group).options._timeout.total_seconds()]
        nccl_backend(group)._set_default_timeout(timedelta(seconds=1.5))
        checks = {"before": [before, 600.0], "set": [reported, [2.0, 2.0]],
                  "backend's": [group.timeout.total_seconds(), 1.5]}
        if rank == 0:  # alone in a collective its peer never calls: it fails after 1.5 s, not 10 minutes
            start = time.monotonic()
            try:
                all_reduce_on(group)
                failed = "no error"
            except dist.DistBackendError as e:
                failed = "rank 1" in str(e)
            waited = time.monotonic() - start
            checks["timed out, naming the peer"] = [failed, True]
            checks["within the new timeout"] = [1.0 < waited < 15.0, True]
        dist.barrier()
        c10d._abort_process_group(group)
        checks["aborted"] = [group in c10d._world.pg_map, False]
        return checks

    @row(C10D + "_add_ephemeral_timeout_for_all_pgs", PG + "_add_ephemeral_timeout")
    def _():
        # torch's Inductor calls it while loading a compiled graph from its caches in a distributed job.
        group = nccl_backend(WORLD)._group()
        c10d._add_ephemeral_timeout_for_all_pgs(timedelta(seconds=10))
        pending = group._ephemeral.total_seconds()
        dist.barrier()
        return {"extends the next operation": [pending, 10.0], "once": [group._ephemeral.total_seconds(), 0.0]}

    @row(C10D + "_time_estimator")
    def _():
        with c10d._time_estimator(group=WORLD):
            pass

    @row(C10D + "shrink_group", C10D + "_create_shrunk_process_group")
    def _():
        dist.distributed_c10d.shrink_group([world - 1])

    @row(C10D + "destroy_process_group")
    def _():
        group = dist.new_group()
        dist.destroy_process_group(group)
        return {"destroyed": [group in c10d._world.pg_map, False]}

    @row(C10D + "barrier")
    def _():
        store = c10d._get_default_store()
        if rank == world - 1:
            store.set("walk/before-barrier", "1")
        dist.barrier()
        seen = store.check(["walk/before-barrier"])
        dist.barrier(device_ids=[local])
        return {"ordered": [seen, True]}

    @row(C10D + "batch_isend_irecv")
    def _():
        peer = (rank + 1) % world
        send = torch.full((2,), own, device="cuda")
        recv = torch.zeros(2, device="cuda")
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return {"received": [values(recv), [float((rank - 1) % world + 1)] * 2]}

    @row(C10D + "_object_to_tensor", C10D + "_tensor_to_object")
    def _():
        gathered = [None] * world
        dist.all_gather_object(gathered, {"rank": rank})
        return {"objects": [gathered, [{"rank": r} for r in range(world)]]}


def nccl_api(ctx):
    """ProcessGroupNCCL's own API."""
    rank, world, own = ctx.rank, ctx.world, ctx.own
    total, WORLD, slot_device = ctx.total, ctx.group, ctx.slot_device
    @row(PG + "Options", PG + "NCCLConfig", PG + "NCCL_CTA_POLICY_ZERO")
    def _():
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = True
        options._timeout = timedelta(seconds=7)
        options.config.blocking, options.config.net_name = 0, "Socket"
        options.config.cta_policy = dist.ProcessGroupNCCL.NCCL_CTA_POLICY_EFFICIENCY
        twin = copy.deepcopy(options)
        try:
            options.config.no_such_field = 1
            unknown = "accepted"
        except AttributeError:
            unknown = "AttributeError"
        return {"fields": [[twin.is_high_priority_stream, twin._timeout.total_seconds(), twin.config.blocking,
                            twin.config.net_name, twin.config.cta_policy, twin.backend], [True, 7.0, 0, "Socket", 1,
                                                                                          "nccl"]],
                "copy is separate": [twin.config is options.config, False],
                "policies": [[dist.ProcessGroupNCCL.NCCL_CTA_POLICY_DEFAULT,
                              dist.ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO], [0, 2]],
                "unknown config field": [unknown, "AttributeError"]}

    @row(PG + "__init__", PG + "abort")
    def _():
        store = c10d.PrefixStore("walk-direct/", c10d._get_default_store())
        direct = dist.ProcessGroupNCCL(store, rank, world, dist.ProcessGroupNCCL.Options())
        x = torch.full((2,), own)
        direct.allreduce([x]).wait()
        direct.abort()
        return {"cpu all_reduce": [x.tolist(), [total] * 2], "name": [direct.name(), "nccl"]}

    @row(PG + "eager_connect_single_device", PG + "_is_initialized", PG + "name", PG + "get_build_nccl_version",
         PG + "get_runtime_nccl_version")
    def _():
        face = nccl_backend(WORLD)
        face.eager_connect_single_device(slot_device)
        return {"answers": [[face._is_initialized(), face.name(), list(face.get_build_nccl_version()),
                             list(dist.ProcessGroupNCCL.get_runtime_nccl_version())],
                            [True, "nccl", [2, 27, 3], [2, 27, 3]]]}

    @row(PG + "register_mem_pool")
    def _():
        nccl_backend(WORLD).register_mem_pool(None)

    @row(PG + "deregister_mem_pool")
    def _():
        nccl_backend(WORLD).deregister_mem_pool(None)

    @row(PG + "NCCLConfig.unsafe_get_ptr")
    def _():
        dist.ProcessGroupNCCL.Options().config.unsafe_get_ptr()


def beyond_c10d(ctx):
    """NCCL's paths outside c10d: _dist2, torch.distributed.nn, ShardedTensor, the c10d logger, DDP."""
    rank, world, local = ctx.rank, ctx.world, ctx.local
    own, total, slot_device = ctx.own, ctx.total, ctx.slot_device
    @row("torch.distributed._dist2.<module>", "torch.distributed._dist2._nccl_factory")
    def _():
        from torch.distributed import _dist2

        pg = _dist2.new_group("nccl", timedelta(seconds=60), "cuda", is_high_priority_stream=True)
        x = torch.full((3,), own, device="cuda")
        with _dist2.process_group(pg):
            current = _dist2.current_process_group() is pg
        pg.allreduce([x]).wait()
        try:
            _dist2._BACKENDS["nccl"](None, rank, world, timedelta(seconds=1), CUDA, no_such_option=1)
            unknown = "accepted"
        except KeyError:
            unknown = "KeyError"
        return {"all_reduce": [values(x), [total] * 3], "current": [current, True],
                "options": [nccl_backend(pg).options.is_high_priority_stream, True], "unknown option": [unknown,
                                                                                                      "KeyError"]}

    @row("torch.distributed.nn.functional._AllGather.backward")
    def _():
        import torch.distributed.nn.functional as fn

        x = torch.full((1,), own, device="cuda", requires_grad=True)
        gathered = fn.all_gather(x)
        sum((i + 1) * t for i, t in enumerate(gathered)).sum().backward()
        # every rank weighs position r by r + 1, and the gradient of x on rank r sums over the ranks
        return {"grad": [values(x.grad), [float(world * (rank + 1))]]}

    @row("torch.distributed.nn.functional._AllGatherBase.backward")
    def _():
        import torch.distributed.nn.functional as fn

        x = torch.full((2,), own, device="cuda", requires_grad=True)
        out = fn._all_gather_base(torch.zeros(2 * world, device="cuda"), x)
        weights = torch.arange(1.0, 2 * world + 1)
        (out * weights.to("cuda")).sum().backward()
        return {"grad": [values(x.grad), (world * weights[2 * rank:2 * rank + 2]).tolist()]}

    @row("torch.distributed._shard.sharded_tensor.api.ShardedTensor._get_preferred_device")
    def _():
        from torch.distributed._shard.sharded_tensor.api import ShardedTensor

        return {"device": [str(ShardedTensor._get_preferred_device(SimpleNamespace(_process_group=None))),
                           str(slot_device)]}

    @row("torch.distributed.c10d_logger._get_msg_dict")
    def _():
        from torch.distributed.c10d_logger import _get_msg_dict

        logged = _get_msg_dict("all_reduce")
        return {"logged": [[logged["backend"], logged["nccl_version"]], ["nccl", "2.27.3"]]}

    @row("torch.nn.parallel.distributed.DistributedDataParallel._check_comm_hook",
         "torch.nn.parallel.distributed._dump_DDP_relevant_env_vars")
    def _():
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.nn.parallel.distributed import _dump_DDP_relevant_env_vars

        _dump_DDP_relevant_env_vars()
        layer = torch.nn.Linear(3, 1, bias=False)
        torch.nn.init.constant_(layer.weight, 1.0)
        ddp = DDP(layer.to("cuda"), device_ids=[local])
        ddp.register_comm_hook(None, bf16_compress_hook)
        ddp(torch.full((1, 3), own, device="cuda")).sum().backward()
        # each rank's gradient is its input (own, three times); the hook averages them, in bf16 (exact here)
        return {"grad": [values(layer.weight.grad), [[total / world] * 3]]}

    @row("torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._start_workers")
    def _():
        return {"set for the workers": [os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") is not None, True]}


def fsdp_and_symmetric_memory(ctx):
    """FSDP2 on an NCCL group, and CUDA's symmetric memory (refused)."""
    rank, world, WORLD = ctx.rank, ctx.world, ctx.group

    @row("torch.distributed.fsdp._fully_shard._fsdp_collectives.ProcessGroupAllocMixin.allocate")
    def _():
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        reference = torch.nn.Linear(4, 2)
        inputs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(r)) for r in range(world)]
        grads = []
        for r in range(world):  # the CPU reference: each rank's gradient of the unsharded layer, then their mean
            reference.zero_grad()
            reference(inputs[r]).square().sum().backward()
            grads.append(reference.weight.grad.clone())
        expected = (sum(grads) / world).tolist()
        model = torch.nn.Linear(4, 2)
        model.load_state_dict(reference.state_dict())
        model = fully_shard(model.to("cuda"))
        model.set_allocate_memory_from_process_group_for_comm(True)
        model(inputs[rank].to("cuda")).square().sum().backward()
        return {"weight grad": [model.weight.grad.full_tensor().tolist(), expected]}

    @row("torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm",
         "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule.set_symm_mem_for_comm",
         "torch.distributed.fsdp._fully_shard._fsdp_param_group.FSDPParamGroup.set_symm_mem",
         "torch.distributed.fsdp._fully_shard._fsdp_collectives.SymmMemAllocMixin.__init__",
         "torch.distributed.fsdp._fully_shard._fsdp_collectives.SymmMemAllGather.__init__",
         "torch.distributed.fsdp._fully_shard._fsdp_collectives.SymmMemReduceScatter.__init__")
    def _():
        from torch.distributed.fsdp import fully_shard

        fully_shard(torch.nn.Linear(2, 2).to("cuda")).set_symm_mem_for_comm()

    @row("torch._inductor.fx_passes.micro_pipeline_tp.fuse_all_gather_matmul",
         "torch._inductor.fx_passes.micro_pipeline_tp.fuse_matmul_reduce_scatter")
    def _():
        from torch.distributed._symmetric_memory import is_symm_mem_enabled_for_group

        return {"never enabled": [is_symm_mem_enabled_for_group(WORLD.group_name), False]}

    import torch.distributed._symmetric_memory as symm_mem

    for name in [n.rsplit(".", 1)[1] for n in SURFACE if n.startswith("torch.distributed._symmetric_memory.")
                 and n.count(".") == 3]:
        row(f"torch.distributed._symmetric_memory.{name}")(lambda name=name: getattr(symm_mem, name)(None, None))

    @row("torch.distributed._symmetric_memory._nccl.register_external_nccl_comm")
    def _():
        from torch.distributed._symmetric_memory._nccl import register_external_nccl_comm

        register_external_nccl_comm("0", 0, CUDA)


def other_groups(ctx):
    """Groups that are not NCCL's, in the same processes."""
    own, total = ctx.own, ctx.total
    from torch.testing._internal.distributed import fake_pg  # noqa: F401  registers "fake" (torchtitan uses it)

    others = {}
    for backend in ("gloo", "hybrid", "fake"):
        group = dist.new_group(backend=backend)
        # torchtitan sets every mesh group's timeout; a fake group answers for cuda, so this reached torch's NCCL
        # branch (a NameError where is_nccl_available() was True and no ProcessGroupNCCL existed)
        c10d._set_pg_timeout(timedelta(seconds=30), group)
        others[backend] = {"backend": [dist.get_backend(group), backend], "bound": [group.bound_device_id, None]}
        if backend != "fake":  # a fake group moves no data
            x = torch.full((2,), own, device="cpu" if backend == "gloo" else "cuda")
            dist.all_reduce(x, group=group)
            others[backend]["all_reduce"] = [values(x), [total] * 2]
        if backend == "hybrid":
            others[backend]["timeout"] = [group.timeout.total_seconds(), 30.0]
    RESULTS["others"] = {"outcome": "works", "checks": others}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])

    opts = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    opts.config.cta_policy = dist.ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO
    dist.init_process_group("nccl", pg_options=opts, device_id=local, timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    WORLD = dist.group.WORLD
    slot_device = torch.empty(0, device="cuda").device  # cuda:<local> mapped: the rank's slot
    own = float(rank + 1)
    total = float(sum(r + 1 for r in range(world)))

    def all_reduce_on(group, value=own):
        x = torch.full((3,), value, device="cuda")
        dist.all_reduce(x, group=group)
        return values(x)
    ctx = SimpleNamespace(rank=rank, world=world, local=local, own=own, total=total, group=WORLD,
                          slot_device=slot_device, all_reduce_on=all_reduce_on)
    creating_groups(ctx)
    asking_groups(ctx)
    nccl_api(ctx)
    beyond_c10d(ctx)
    fsdp_and_symmetric_memory(ctx)
    other_groups(ctx)
    dist.barrier()
    with open(f"{args.out}.rank{rank}.json", "w") as f:
        json.dump({"rows": RESULTS, "script": os.path.abspath(__file__)}, f, default=str)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
