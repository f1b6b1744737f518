"""FSDP2 training written the way current recipes write it (no hybrid-interop in it): the device from
torch.accelerator, the backend from get_default_backend_for_device, init_process_group(backend,
device_id=device), a model built on the meta device, fully_shard on each block and the root, to_empty and
reset_parameters (DTensor's random initialisation), Adam with clip_grad_norm_, and the full state dict saved
by rank 0. Without an accelerator it runs on Gloo on the CPU, its own reference.

With --graphs, the forward and backward after one eager step are captured in a CUDA graph and replayed, as
torchtitan's trainer does on NVIDIA GPUs: the capture holds FSDP's all-gathers, reduce-scatters and the storage
it frees and allocates again between them. Without CUDA the same steps run eagerly.

torchrun --nproc_per_node=2 fsdp2_train.py --out params.pt [--graphs]
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

DIM, VOCAB, SEQ, LAYERS = 16, 32, 8, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.attn = nn.Linear(DIM, 3 * DIM, bias=False)
        self.out = nn.Linear(DIM, DIM, bias=False)
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))

    def forward(self, x):
        q, k, v = self.attn(self.norm(x)).view(x.shape[0], SEQ, 3, 2, DIM // 2).unbind(2)
        a = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                       is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(x.shape))
        return x + self.mlp(x)

    def reset_parameters(self):
        for m in (self.norm, self.attn, self.out, self.mlp[0], self.mlp[2]):
            m.reset_parameters()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def reset_parameters(self):
        nn.init.normal_(self.embed.weight)
        self.head.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", required=True)
    parser.add_argument("--graphs", action="store_true", help="capture forward+backward after one eager step")
    args = parser.parse_args()
    rank = int(os.environ["LOCAL_RANK"])
    if torch.accelerator.is_available():
        device = torch.device(f"{torch.accelerator.current_accelerator()}:{rank}")
    else:
        device = torch.device("cpu")
    backend = dist.get_default_backend_for_device(device)
    dist.init_process_group(backend=backend, device_id=device if device.type != "cpu" else None)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Model()
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    model.to_empty(device=device)
    model.reset_parameters()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    static_tokens = torch.zeros(4, SEQ, dtype=torch.long, device=device)
    graph = static_loss = None

    def forward_backward():
        loss = nn.functional.cross_entropy(model(static_tokens).flatten(0, 1), static_tokens.flatten())
        loss.backward()
        return loss

    for step in range(args.steps):
        tokens = torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(100 * step + rank))
        static_tokens.copy_(tokens)
        if args.graphs and device.type == "cuda" and step > 0:
            if graph is None:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_loss = forward_backward()
            graph.replay()
            loss = static_loss
        else:
            loss = forward_backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=not args.graphs)  # a graph's gradients are static tensors
        losses.append(loss.item())
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        torch.save({"state": state, "losses": losses}, args.out)
        print(f"rank 0 on {device} ({backend}): losses {' '.join(f'{v:.5f}' for v in losses)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
