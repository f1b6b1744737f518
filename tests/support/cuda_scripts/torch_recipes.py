"""PyTorch's own distributed training recipes, written for CUDA as torch's docs and tutorials write them (no
hybrid-interop in it): DDP; FSDP2 (fully_shard) with meta-device init, mixed precision, CPU offload, full and
sharded state dicts with DCP; tensor and sequence parallelism (parallelize_module); pipelining (PipelineStage and
ScheduleGPipe); FSDP2 over compiled blocks; activation checkpointing; nn.DataParallel. Each recipe is a function
that trains a tiny model 2-3 steps and returns its losses and parameters; every rank saves its results to
OUT/rank<r>.pt.

On CUDA (or the rack under ``python -m interop.run``): ``torchrun --nproc_per_node=2 torch_recipes.py --out DIR``.
Its reference, the same code on the CPU over Gloo: ``... torch_recipes.py --device cpu --out DIR`` (the flag
maps "cuda" to "cpu" and "nccl" to "gloo", and skips the torch.cuda calls a CPU has no counterpart of).
``--only NAME,...`` runs some recipes.
"""

import argparse
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.api import CheckpointException

DIM, HIDDEN, VOCAB, SEQ, BATCH, STEPS = 16, 32, 32, 8, 4, 3
DEVICE_TYPE = "cuda"
BACKEND = {"cuda": "nccl", "cpu": "gloo"}


class Block(nn.Module):
    """A pre-norm residual MLP block (a transformer block without attention)."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.GELU(), nn.Dropout(dropout), nn.Linear(HIDDEN, DIM))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Model(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(dropout) for _ in range(2))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def init_weights(self):
        nn.init.normal_(self.embed.weight)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.LayerNorm)):
                m.reset_parameters()


def tokens(step, rank=0, batch=BATCH):
    """Step ``step``'s batch of rank ``rank``, from a generator of its own (the global streams stay untouched)."""
    return torch.randint(0, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(1000 * step + rank))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def train(model, optimizer, device, rank, steps=STEPS, clip=False):
    losses = []
    for step in range(steps):
        x = tokens(step, rank).to(device)
        loss = lm_loss(model(x), x)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def local(state):
    """A state dict's tensors on the CPU (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    return {k: (v.to_local() if isinstance(v, DTensor) else v).detach().cpu().clone() for k, v in state.items()}


def full_params(model):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


# -- the recipes ---------------------------------------------------------------------------------------------


def ddp(device, rank):
    """DDP as its tutorial writes it: DistributedDataParallel(model, device_ids=[local_rank])."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = Model().to(device)
    wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    losses = train(wrapped, optimizer, device, rank)
    return {"losses": losses, "params": local(model.state_dict())}


def sharded_on_meta(device):
    """The model built on the meta device, fully_shard on each block and the root, then to_empty on the device."""
    from torch.distributed.fsdp import fully_shard

    with torch.device("meta"):
        model = Model()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    model.to_empty(device=device)
    return model


def fsdp2_meta_init(device, rank):
    """FSDP2's recipe for large models: the model built on the meta device, fully_shard on each block and the
    root, to_empty on the device, then initialised (DTensor's random initialisation); Adam and clip_grad_norm_."""
    model = sharded_on_meta(device)
    torch.manual_seed(0)
    model.init_weights()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = train(model, optimizer, device, rank, clip=True)
    return {"losses": losses, "params": full_params(model), "shards": local(model.state_dict())}


def fsdp2_mixed_precision(device, rank):
    """FSDP2 with MixedPrecisionPolicy: bfloat16 parameters in forward and backward, float32 gradient reduction
    and float32 sharded parameters for the optimizer; the model created directly on the device."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    torch.manual_seed(0)
    with torch.device(device):
        model = Model()
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train(model, optimizer, device, rank)
    return {"losses": losses, "params": full_params(model)}


def fsdp2_cpu_offload(device, rank):
    """FSDP2 with CPUOffloadPolicy: sharded parameters, gradients and the optimizer step stay on the CPU, each
    block's parameters are copied to the device for its forward and backward (pinned where CUDA can pin)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    policy = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    torch.manual_seed(0)
    model = Model()
    for block in model.blocks:
        fully_shard(block, offload_policy=policy)
    fully_shard(model, offload_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train(model, optimizer, device, rank)
    where = sorted({str(p.device) for p in model.parameters()})
    return {"losses": losses, "params": full_params(model), "param_devices": where}


def fsdp2_state_dicts(device, rank, workdir):
    """The distributed checkpoint recipe: after 2 steps, the full model and optimizer state dicts
    (get_model_state_dict / get_optimizer_state_dict with full_state_dict=True, cpu_offload=True) and the sharded
    ones saved with DCP; a fresh sharded model loads the DCP checkpoint, a third loads the full state dict
    broadcast from rank 0; all three take one more step on the same batch."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict, set_model_state_dict,
                                                         set_optimizer_state_dict)
    torch.manual_seed(0)
    model = sharded_on_meta(device)
    model.init_weights()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = train(model, optimizer, device, rank, steps=2)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full_model = get_model_state_dict(model, options=full)
    full_optim = get_optimizer_state_dict(model, optimizer, options=full)
    path = os.path.join(workdir, "dcp")
    dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optimizer)},
             checkpoint_id=path)

    from_dcp = sharded_on_meta(device)
    dcp_optimizer = torch.optim.Adam(from_dcp.parameters(), lr=1e-2)
    state = {"model": get_model_state_dict(from_dcp), "optim": get_optimizer_state_dict(from_dcp, dcp_optimizer)}
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(from_dcp, state["model"])
    set_optimizer_state_dict(from_dcp, dcp_optimizer, state["optim"])

    from_full = sharded_on_meta(device)
    set_model_state_dict(from_full, dict(full_model) if rank == 0 else {},  # it replaces the dict's values
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    next_losses = {}
    for name, m, opt in (("trained", model, optimizer), ("from_dcp", from_dcp, dcp_optimizer),
                         ("from_full", from_full, torch.optim.SGD(from_full.parameters(), lr=0.1))):
        next_losses[name] = train(m, opt, device, rank, steps=1)[0]
    optim_state = {f"{k}.{key}": v for k, s in full_optim.get("state", {}).items() for key, v in s.items()}
    return {"losses": losses + [next_losses["trained"]], "params": full_params(model), "full_model": full_model,
            "full_optim": {k: torch.as_tensor(v).cpu() for k, v in optim_state.items()},
            "shards": local(get_model_state_dict(model)), "next_losses": next_losses,
            "from_dcp": full_params(from_dcp), "from_full": full_params(from_full)}


def tensor_sequence_parallel(device, rank):
    """Tensor and sequence parallelism as the TP tutorial plans a transformer: the embedding row-parallel with a
    sequence-sharded output, norms SequenceParallel, each MLP's input gathered (PrepareModuleInput), its first
    linear column-parallel and its second row-parallel back to the sequence shards, the head column-parallel
    with a replicated output. Every rank feeds the same batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    mesh = init_device_mesh(DEVICE_TYPE, (dist.get_world_size(),))
    torch.manual_seed(0)
    model = Model().to(device)
    for block in model.blocks:
        parallelize_module(block, mesh, {
            "norm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.0": ColwiseParallel(),
            "mlp.3": RowwiseParallel(output_layouts=Shard(1)),
        })
    parallelize_module(model, mesh, {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train(model, optimizer, device, rank=0)
    from torch.distributed.tensor import DTensor

    params = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu() for n, p in
              model.named_parameters()}
    return {"losses": losses, "params": params, "shards": local(model.state_dict())}


def pipelining(device, rank):
    """Pipeline parallelism as torch.distributed.pipelining's docs build it by hand: every rank builds the model,
    keeps its stage's layers (rank 0: the embedding and the first block; rank 1: the second block, the norm and
    the head), wraps them in a PipelineStage, and ScheduleGPipe runs 4 microbatches with the loss on the last
    stage."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    world = dist.get_world_size()
    torch.manual_seed(0)
    model = Model()
    if rank == 0:
        stage_module = nn.Sequential(model.embed, model.blocks[0])
    else:
        stage_module = nn.Sequential(model.blocks[1], model.norm, model.head)
    stage_module.to(device)
    stage = PipelineStage(stage_module, rank, world, device)
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=lm_loss)
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.5, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x = tokens(step, batch=8).to(device)
        if rank == 0:
            schedule.step(x)
        else:
            microbatch_losses = []
            schedule.step(target=x, losses=microbatch_losses)
            losses.append([loss.item() for loss in microbatch_losses])
        optimizer.step()
        optimizer.zero_grad()
    return {"losses": losses, "params": local(stage_module.state_dict())}


def compiled_fsdp(device, rank):
    """FSDP2 over compiled blocks, as torchtitan applies them: each block compiled, then fully_shard on each block
    and the root. The backend is aot_eager (Dynamo's graphs and AOTAutograd's forward and backward graphs, run by
    ATen's kernels): Inductor gave the same bits on the rack and the CPU when run by hand, but its cold C++ builds
    cost ~50 s a launch on 2 cores."""
    from torch._dynamo.utils import counters
    from torch.distributed.fsdp import fully_shard

    graphs, breaks = counters["stats"]["unique_graphs"], dict(counters["graph_break"])
    torch.manual_seed(0)
    model = Model().to(device)
    for block in model.blocks:
        block.compile(backend="aot_eager")
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train(model, optimizer, device, rank)
    return {"losses": losses, "params": full_params(model), "graphs": counters["stats"]["unique_graphs"] - graphs,
            "graph_breaks": {k: n - breaks.get(k, 0) for k, n in counters["graph_break"].items()
                             if n != breaks.get(k, 0)}}


def activation_checkpointing(device, rank):
    """Activation checkpointing on one device: apply_activation_checkpointing wraps each block in
    checkpoint_wrapper (non-reentrant), the final norm and head are recomputed through torch.utils.checkpoint;
    the blocks have dropout, whose masks the recomputation must draw again (preserve_rng_state)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (apply_activation_checkpointing,
                                                                             checkpoint_wrapper)
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = Model(dropout=0.25).to(device)
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper,
                                   check_fn=lambda m: isinstance(m, Block))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(1 + rank)  # the dropout masks' stream, on the CPU and every device
    losses = []
    for step in range(STEPS):
        x = tokens(step, rank).to(device)
        h = model.embed(x)
        for block in model.blocks:
            h = block(h)
        logits = checkpoint(lambda t: model.head(model.norm(t)), h, use_reentrant=False)
        loss = lm_loss(logits, x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {"losses": losses, "params": local(model.state_dict())}


def data_parallel(device, rank):
    """nn.DataParallel as its tutorial uses it, on rank 0 only: the model on cuda:0 wrapped over every visible
    GPU, full batches split across the replicas. On the CPU, DataParallel has no devices and runs the module."""
    if rank != 0:
        return None
    torch.manual_seed(0)
    model = Model()
    if torch.cuda.is_available():
        model = nn.DataParallel(model.to("cuda:0"))
        device = torch.device("cuda:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = train(model, optimizer, device, rank=0)
    module = model.module if isinstance(model, nn.DataParallel) else model
    replicas = len(model.device_ids) if isinstance(model, nn.DataParallel) else 1
    return {"losses": losses, "params": local(module.state_dict()), "replicas": replicas}


RECIPES = {f.__name__: f for f in (ddp, fsdp2_meta_init, fsdp2_mixed_precision, fsdp2_cpu_offload, fsdp2_state_dicts,
                                   tensor_sequence_parallel, pipelining, compiled_fsdp, activation_checkpointing,
                                   data_parallel)}


def main():
    global DEVICE_TYPE
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--only", default=",".join(RECIPES))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    DEVICE_TYPE = args.device
    local_rank = int(os.environ["LOCAL_RANK"])
    if DEVICE_TYPE == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(BACKEND[DEVICE_TYPE], timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    os.makedirs(args.out, exist_ok=True)
    results = {"backend": dist.get_backend(), "device": str(device), "interop_loaded": "interop" in sys.modules,
               "device_name": torch.cuda.get_device_name(device) if DEVICE_TYPE == "cuda" else "cpu"}
    for name in args.only.split(","):
        start = time.perf_counter()
        extra = (args.out,) if name == "fsdp2_state_dicts" else ()
        try:
            results[name] = RECIPES[name](device, rank, *extra)
        except (Exception, CheckpointException):  # DCP's error is a BaseException
            results[name] = {"error": traceback.format_exc()}
            print(f"rank {rank}: {name} failed:\n{results[name]['error']}", flush=True)
        if DEVICE_TYPE == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        if results[name] is not None:
            results[name]["seconds"] = time.perf_counter() - start
    torch.save(results, os.path.join(args.out, f"rank{rank}.pt"))
    print(f"rank {rank} on {device} ({dist.get_backend()}): " + ", ".join(
        f"{n} {r['seconds']:.1f} s" for n, r in results.items() if isinstance(r, dict)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
