"""nn.DataParallel as libraries pick it when they see several GPUs (no hybrid-interop in it): the model on
cuda:0 wrapped in DataParallel over every visible GPU, a few SGD steps on full batches. Without CUDA the plain
module trains on the CPU, its own reference.

python data_parallel.py --out out.json
"""

import argparse
import json

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
    if cuda:
        model = torch.nn.DataParallel(model.cuda())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(12, 10, generator=g), torch.randn(12, 2, generator=g)
        if cuda:
            x, y = x.cuda(), y.cuda()
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    module = model.module if cuda else model
    with open(args.out, "w") as f:
        json.dump({"losses": losses, "replicas": len(model.device_ids) if cuda else 1,
                   "params": [p.detach().cpu().flatten().tolist() for p in module.parameters()],
                   "device": str(next(module.parameters()).device)}, f)


if __name__ == "__main__":
    main()
