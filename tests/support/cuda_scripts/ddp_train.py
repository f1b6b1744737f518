"""A two-process DDP script written for CUDA (init_process_group("nccl"), set_device(local_rank),
DDP(device_ids=[local_rank])); without CUDA it falls back to Gloo on the CPU, its own reference.

torchrun --nproc_per_node=2 ddp_train.py --out params.pt
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == ("nccl" if use_cuda else "gloo"), dist.get_backend()
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    for step in range(args.steps):
        g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own batch
        x = torch.randn(8, 16, generator=g).to(device)
        y = torch.randn(8, 4, generator=g).to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    dist.barrier()
    if rank == 0:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, args.out)
        print(f"rank 0 of {world}: final loss {loss.item():.6f} on {device} ({dist.get_backend()})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
