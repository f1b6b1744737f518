"""torch's distributed training recipes as its docs write them, each clean and with one bug of the kind that
trains silently wrong, for ``hybrid diverge`` (no hybrid-interop in the recipes).

* ``ddp``: DistributedDataParallel (its tutorial). Bug ``dropout``: dropout in the blocks (each rank draws its
  own rows' masks: randomness, not a bug, and must be reported as such).
* ``manual_dp``: gradients averaged by hand with ``all_reduce`` (the distributed tutorial's ``average_gradients``).
  Bug ``skip_allreduce``: the loop averages the blocks' and the embedding's gradients and forgets the head's.
* ``fsdp2``: ``fully_shard`` on each block and the root. Bug ``double_scale``: the gradients divided by the world
  size after backward, as a DDP-by-hand habit, though FSDP2's reduce-scatter already averaged them.
* ``tp``: ``parallelize_module`` with ColwiseParallel/RowwiseParallel on the MLP, the norm between them on the
  replicated hidden vector. Bug ``sharded_norm``: the norm built with the local (sharded) hidden size, as the
  sharded linear layers are, so it normalises over a rank's half of the features.
* ``sp``: sequence parallelism (SequenceParallel norms, PrepareModuleInput to gather the sequence for causal
  attention). Bug ``mask_dropped``: the sequence-parallel path calls the model without its attention mask.
* ``pp``: a two-stage GPipe pipeline written with send/recv, two microbatches. Bug ``wrong_microbatch``: the
  last stage consumes the received microbatches in the wrong order.
* ``pipelining``: the same stages with torch.distributed.pipelining (PipelineStage, ScheduleGPipe, four
  microbatches, the loss on the last stage). Bug ``wrong_targets``: the last stage's targets rolled by a
  microbatch.

Each rank's data comes from one seeded global batch: data parallelism takes its rank's rows, the others every
row, so the single-process reference (a world of one) sees the same batch. A bug lives on the distributed path
(with one rank it changes nothing), as such bugs do.

``python diverge_recipes.py --recipe NAME [--bug BUG] [--steps K]``: one recipe, as a training script
(``cuda`` when available, else the CPU). ``--all OUT``: every case in turn, each recorded by its own
:class:`interop.diverge.recorder.Recorder` into ``OUT/<case>/rank<r>.pt`` (one launch for all the cases).
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DIM, HIDDEN, VOCAB, SEQ, BATCH, HEAD_DIM = 16, 32, 32, 8, 8, 8
CASES = [("ddp", None), ("ddp", "dropout"), ("manual_dp", None), ("manual_dp", "skip_allreduce"),
         ("fsdp2", None), ("fsdp2", "double_scale"), ("tp", None), ("tp", "sharded_norm"), ("sp", None),
         ("sp", "mask_dropped"), ("pp", None), ("pp", "wrong_microbatch"), ("pipelining", None),
         ("pipelining", "wrong_targets"), ("ddp_loss", "per_rank_scale"), ("ddp_loss", "rank_seeds"),
         ("megatron", None), ("megatron", "no_backward_reduce"), ("megatron", "no_forward_reduce"),
         ("fsdp2_mp", None)]


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv = (nn.Linear(DIM, DIM, bias=False) for _ in range(3))
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, -1, HEAD_DIM).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, norm_size=HIDDEN, dropout=0.0):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.mid_norm = nn.LayerNorm(norm_size)
        self.drop = nn.Dropout(dropout)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.down(self.drop(F.gelu(self.mid_norm(self.up(x)))))


class Block(nn.Module):
    def __init__(self, attention=False, norm_size=HIDDEN, dropout=0.0):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.attn = Attention() if attention else None
        self.mlp = MLP(norm_size, dropout)

    def forward(self, x, mask=None):
        if self.attn is not None:
            x = x + self.attn(self.norm(x), mask)
            return x + self.mlp(x)
        return x + self.mlp(self.norm(x))


class Model(nn.Module):
    def __init__(self, attention=False, norm_size=HIDDEN, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleDict({str(i): Block(attention, norm_size, dropout) for i in range(2)})
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens, mask=None):
        x = self.embed(tokens) if self.embed is not None else tokens  # a later pipeline stage: activations
        for block in self.blocks.values():
            x = block(x, mask)
        return self.head(self.norm(x)) if self.head is not None else x


def batch(step):
    """The global batch of step ``step`` (every rank draws the same one)."""
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(100 + step))


def rows(x, rank, world):
    """A data-parallel rank's rows of the global batch."""
    n = x.shape[0] // world
    return x[rank * n:(rank + 1) * n]


def lm_loss(logits, tokens):
    return F.cross_entropy(logits.flatten(0, 1), tokens.flatten())


def causal_mask(device):
    return torch.ones(SEQ, SEQ, dtype=torch.bool, device=device).tril()


def _train(model, device, steps, data_parallel, before_step=None, mask=None, lr=0.1):
    rank, world = dist.get_rank(), dist.get_world_size()
    # foreach=False: a tensor-parallel model mixes DTensor and plain parameters, which foreach kernels refuse
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=False)
    for step in range(steps):
        x = batch(step).to(device)
        if data_parallel:
            x = rows(x, rank, world)
        loss = lm_loss(model(x, mask), x)
        loss.backward()
        if before_step is not None:
            before_step(model)
        optimizer.step()
        optimizer.zero_grad()


def ddp(device, steps, bug):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = Model(dropout=0.2 if bug == "dropout" else 0.0).to(device)
    wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    _train(wrapped, device, steps, data_parallel=True)


def manual_dp(device, steps, bug):
    torch.manual_seed(0)
    model = Model().to(device)
    world = dist.get_world_size()

    def average_gradients(m):
        params = list(m.embed.parameters()) + list(m.blocks.parameters()) + list(m.norm.parameters())
        if bug != "skip_allreduce" or world == 1:
            params += list(m.head.parameters())
        for p in params:
            dist.all_reduce(p.grad)
            p.grad /= world

    _train(model, device, steps, data_parallel=True, before_step=average_gradients)


def fsdp2(device, steps, bug):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Model().to(device)
    for block in model.blocks.values():
        fully_shard(block)
    fully_shard(model)
    world = dist.get_world_size()

    def rescale(m):
        for p in m.parameters():
            p.grad.div_(world)  # the bug: FSDP2's reduce-scatter has averaged already

    _train(model, device, steps, data_parallel=True, before_step=rescale if bug == "double_scale" else None)


def _mesh(device):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def tp(device, steps, bug):
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = _mesh(device)
    torch.manual_seed(0)
    sharded_norm = bug == "sharded_norm"
    model = Model(norm_size=HIDDEN // mesh.size() if sharded_norm else HIDDEN).to(device)
    for block in model.blocks.values():
        if sharded_norm:  # the norm sized as the sharded linear layers are, over a rank's features only
            plan = {"mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
        else:  # the hidden vector gathered for the norm, replicated, then sliced again for the row-wise layer
            plan = {"mlp.up": ColwiseParallel(output_layouts=Replicate()),
                    "mlp.down": RowwiseParallel(input_layouts=Replicate())}
        parallelize_module(block, mesh, plan)
    _train(model, device, steps, data_parallel=False)


def sp(device, steps, bug):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    mesh = _mesh(device)
    torch.manual_seed(0)
    model = Model(attention=True).to(device)
    parallelize_module(model, mesh, {"embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                                     "norm": SequenceParallel(),
                                     "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())})
    for block in model.blocks.values():
        parallelize_module(block, mesh, {
            "norm": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.up": ColwiseParallel(output_layouts=Replicate()),
            "mlp.down": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))})
    sequence_parallel = mesh.size() > 1
    mask = causal_mask(device)
    if bug == "mask_dropped" and sequence_parallel:
        mask = None  # the bug: the sequence-parallel path leaves the attention mask behind
    _train(model, device, steps, data_parallel=False, mask=mask)


def pp(device, steps, bug):
    """GPipe over two stages as torch's pipelining tutorial cuts them: every rank builds the whole model and
    deletes what is not its stage's (stage 0: the embedding and block 0; stage 1: block 1, the norm, the head;
    one rank keeps all), microbatches sent with send/recv, all forwards then all backwards."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = _stage_model(device)
    first, last = rank == 0, rank == world - 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    chunks = 2
    for step in range(steps):
        x = batch(step).to(device)
        micro = list(x.chunk(chunks))
        outs, inputs, losses = [], [], []
        for mb in micro:
            if first and world > 1:
                h = model(mb)
                dist.send(h.detach(), 1)
                outs.append(h)
            if last and world > 1:
                h_in = torch.empty(mb.shape[0], SEQ, DIM, device=device)
                dist.recv(h_in, 0)
                inputs.append(h_in.requires_grad_())
        if last:
            order = list(range(chunks))
            if bug == "wrong_microbatch" and world > 1:
                order.reverse()  # the bug: the received microbatches consumed in the wrong order
            for i in range(chunks):
                logits = model(inputs[order[i]] if world > 1 else micro[i])
                losses.append(lm_loss(logits, micro[i]) / chunks)
            for i in reversed(range(chunks)):
                losses[i].backward()
                if world > 1:
                    dist.send(inputs[order[i]].grad, 0)
        if first and world > 1:
            for i in reversed(range(chunks)):
                grad = torch.empty_like(outs[i])
                dist.recv(grad, 1)
                outs[i].backward(grad)
        optimizer.step()
        optimizer.zero_grad()


def _stage_model(device):
    """The whole model, less what is not this rank's stage (the pipelining tutorial's cut; one rank keeps all)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Model()
    if rank != 0:
        model.embed = None
        del model.blocks["0"]
    if rank != world - 1:
        del model.blocks["1"]
        model.norm = model.head = None
    return model.to(device)


def pipelining(device, steps, bug):
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    rank, world = dist.get_rank(), dist.get_world_size()
    model = _stage_model(device)
    schedule = ScheduleGPipe(PipelineStage(model, rank, world, device), n_microbatches=4, loss_fn=lm_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    for step in range(steps):
        x = batch(step).to(device)
        target = x.roll(2, 0) if bug == "wrong_targets" and world > 1 else x  # the bug: another microbatch's
        if world == 1:
            schedule.step(x, target=target)
        elif rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=target)
        optimizer.step()
        optimizer.zero_grad()


def ddp_loss(device, steps, bug):
    """DDP as its tutorial writes it, the loss and the seeds handled by the script. Bug ``per_rank_scale``: the loss
    divided by the world size before backward (a habit from averaging by hand; DDP averages already). Bug
    ``rank_seeds``: each rank reseeds with its rank after DDP broadcast the weights, and the model has dropout
    (each rank's masks are its own draw: randomness)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(Model(dropout=0.3 if bug == "rank_seeds" else 0.0).to(device),
                device_ids=[device.index] if device.type == "cuda" else None)
    if bug == "rank_seeds":
        torch.manual_seed(1234 + rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        x = rows(batch(step).to(device), rank, world)
        loss = lm_loss(model(x), x)
        if bug == "per_rank_scale":
            loss = loss / world
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


class _CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: the identity forward, the gradient all-reduced backward (each rank's columns see all)."""

    @staticmethod
    def forward(ctx, x, reduce_backward):
        ctx.reduce_backward = reduce_backward
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        if ctx.reduce_backward:
            dist.all_reduce(grad)
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: the partial sums all-reduced forward, the gradient passed through backward (it is the
    same on every rank; torch.distributed.nn.functional.all_reduce would sum it again)."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class MegatronMLP(nn.Module):
    """A tensor-parallel MLP written by hand as Megatron-LM writes it: ``up`` holds this rank's rows of the full
    weight (column parallel), ``down`` its columns (row parallel, no bias: its output is a partial sum), the sum
    all-reduced after ``down``, the input's gradient all-reduced by ``f``."""

    def __init__(self, full, bug):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        n = HIDDEN // world
        # skip_init: no draws (their count would depend on the world size), the weights copied from the full ones
        self.up = nn.utils.skip_init(nn.Linear, DIM, n)
        self.down = nn.utils.skip_init(nn.Linear, n, DIM, bias=False)
        with torch.no_grad():
            self.up.weight.copy_(full.up.weight[rank * n:(rank + 1) * n])
            self.up.bias.copy_(full.up.bias[rank * n:(rank + 1) * n])
            self.down.weight.copy_(full.down.weight[:, rank * n:(rank + 1) * n])
        self.bug, self.world = bug, world

    def forward(self, x):
        x = _CopyToParallel.apply(x, self.bug != "no_backward_reduce")
        partial = self.down(F.gelu(self.up(x)))
        if self.bug == "no_forward_reduce" and self.world > 1:
            return partial
        return _ReduceFromParallel.apply(partial)


def megatron(device, steps, bug):
    """Tensor parallelism by hand (no DTensor): each block's MLP replaced by a :class:`MegatronMLP` built from
    the full one. Bugs: ``no_backward_reduce`` (``f`` forgets its all-reduce: the input's gradient is this rank's
    part) and ``no_forward_reduce`` (the row-parallel sum left unreduced)."""
    torch.manual_seed(0)
    model = Model()
    for block in model.blocks.values():
        full = nn.Module()  # the full weights, drawn alike on every rank and in the reference
        full.up, full.down = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM, bias=False)
        block.mlp = MegatronMLP(full, bug)
    _train(model.to(device), device, steps, data_parallel=False)


def fsdp2_mp(device, steps, bug):
    """FSDP2 with mixed precision (bfloat16 parameters in compute, float32 gradients reduced), as its tutorial."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = Model().to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks.values():
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    _train(model, device, steps, data_parallel=True)


RECIPES = {"ddp": ddp, "manual_dp": manual_dp, "fsdp2": fsdp2, "tp": tp, "sp": sp, "pp": pp, "pipelining": pipelining,
           "ddp_loss": ddp_loss, "megatron": megatron, "fsdp2_mp": fsdp2_mp}


def _device():
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local), "nccl"
    return torch.device("cpu"), "gloo"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", choices=sorted(RECIPES))
    parser.add_argument("--bug")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--all", metavar="OUT")
    parser.add_argument("--only", help="with --all: only the cases whose names start with one of these (comma-separated)")
    args = parser.parse_args()
    device, backend = _device()
    dist.init_process_group(backend)
    if args.all:
        from interop.diverge.patches import watch_collectives
        from interop.diverge.recorder import Recorder

        if backend == "nccl":
            watch_collectives()
        for recipe, bug in CASES:
            if args.only and not f"{recipe}-{bug or 'clean'}".startswith(tuple(args.only.split(","))):
                continue
            recorder = Recorder(args.steps + 1, dist.get_rank(), dist.get_world_size())
            recorder.install()
            RECIPES[recipe](device, args.steps, bug)
            records = recorder.finish()
            out = os.path.join(args.all, f"{recipe}-{bug or 'clean'}")
            os.makedirs(out, exist_ok=True)
            torch.save(records, os.path.join(out, f"rank{dist.get_rank()}.pt"))
            dist.barrier()
    else:
        RECIPES[args.recipe](device, args.steps, args.bug)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
