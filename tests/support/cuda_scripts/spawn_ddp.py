"""DDP launched with torch.multiprocessing.spawn, written as the DDP tutorials write it (no hybrid-interop in
it): one process per GPU from torch.cuda.device_count(), torch.cuda.set_device(rank),
init_process_group("nccl", rank=..., world_size=...), a DistributedSampler DataLoader with pinned memory,
DDP(device_ids=[rank]). Without CUDA it runs --world processes on Gloo, its own reference. Rank 0 saves the
trained parameters.

python spawn_ddp.py --world 2 --out params.pt
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def run(rank: int, world: int, port: str, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(device)
    ddp = DDP(model, device_ids=[rank] if cuda else None)
    data = torch.randn(64, 12, generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(2))
    loader = DataLoader(TensorDataset(data, labels), batch_size=8, pin_memory=cuda,
                        sampler=DistributedSampler(TensorDataset(data, labels), shuffle=False))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            optimizer.step()
    if rank == 0:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out)
        print(f"rank 0 of {world} on {device}: {torch.cuda.get_device_name(rank) if cuda else 'cpu'}")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2, help="processes without CUDA (with it: the GPU count)")
    parser.add_argument("--port", default="29517")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    world = torch.cuda.device_count() if torch.cuda.is_available() else args.world
    mp.spawn(run, args=(world, args.port, args.out), nprocs=world)


if __name__ == "__main__":
    main()
