"""Tensor-parallel attention written the way PyTorch's FSDP + TP example writes it (no hybrid-interop in it): a
1-D device mesh from torch.accelerator, q/k/v column-parallel with DTensor outputs (use_local_output=False), so
scaled_dot_product_attention runs on DTensors sharded by heads, the output projection and the MLP row-parallel.
Its reference is the same model unsharded on the CPU in the same process, with the same initial weights and
batches (torch's own DTensor has no sharding rule for the CPU's attention kernel, so a Gloo run of the
parallel model is not a reference). It needs an accelerator.

With --graphs the parallel model's forward and backward after one eager step are captured in a CUDA graph and
replayed (torchtitan's trainer): the graph holds DTensor's functional collectives.

torchrun --nproc_per_node=2 tp_attention_train.py --out result.json [--graphs]
"""

import argparse
import copy
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HEADS, VOCAB, SEQ = 16, 4, 32, 8


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv = (nn.Linear(DIM, DIM, bias=False) for _ in range(3))
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, HEADS, DIM // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(a.transpose(1, 2).reshape(b, s, DIM))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.attention = Attention()
        self.up, self.down = nn.Linear(DIM, 2 * DIM), nn.Linear(2 * DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x + self.attention(x)
        x = x + self.down(F.gelu(self.up(x)))
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", required=True)
    parser.add_argument("--graphs", action="store_true", help="capture the parallel forward+backward after step 1")
    args = parser.parse_args()
    if not torch.accelerator.is_available():
        raise SystemExit("tp_attention_train.py needs an accelerator")
    device_type = torch.accelerator.current_accelerator().type
    world = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh(device_type, (world,))
    torch.manual_seed(0)
    reference = Model()
    model = copy.deepcopy(reference).to(device_type)
    parallelize_module(model, mesh, {
        "attention.wq": ColwiseParallel(use_local_output=False),
        "attention.wk": ColwiseParallel(use_local_output=False),
        "attention.wv": ColwiseParallel(use_local_output=False),
        "attention.wo": RowwiseParallel(),
        "up": ColwiseParallel(),
        "down": RowwiseParallel(),
    })
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=False) for m in (model, reference)]
    losses = {"parallel": [], "reference": []}
    static_tokens = torch.zeros(4, SEQ, dtype=torch.long, device=device_type)
    graph = static_loss = None

    def forward_backward(m, t):
        loss = F.cross_entropy(m(t).flatten(0, 1), t.flatten())
        loss.backward()
        return loss

    for step in range(args.steps):
        tokens = torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(step))
        for name, m, opt, device in (("parallel", model, optimizers[0], device_type),
                                     ("reference", reference, optimizers[1], "cpu")):
            if name == "parallel" and args.graphs and step > 0:
                static_tokens.copy_(tokens)
                if graph is None:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_loss = forward_backward(m, static_tokens)
                graph.replay()
                loss = static_loss
            else:
                loss = forward_backward(m, tokens.to(device))
            opt.step()
            opt.zero_grad(set_to_none=not args.graphs)  # a graph's gradients are static tensors
            losses[name].append(loss.item())
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump({"device": device_type, "world": world, **losses}, f)
        print(f"rank 0 on {device_type}: losses {losses['parallel']}, unsharded on the CPU {losses['reference']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
