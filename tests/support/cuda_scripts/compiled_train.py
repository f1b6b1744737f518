"""CUDA code that compiles its model and calls a Triton kernel, written the way CUDA users write it; its own
CPU reference without CUDA (torch.compile for the CPU, the Triton kernel replaced by the same sum in torch).

Triton itself decides how to run a kernel from `torch.cuda.is_available()`, so a layer that answers True must
not send Triton looking for a GPU driver that is not there.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model)
    x = torch.randn(8, 16).to(device)
    target = torch.randn(8, 4).to(device)
    losses = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(compiled(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    a, b = torch.randn(1000).to(device), torch.randn(1000).to(device)
    if device == "cuda":
        from tests.support.triton_kernels import add

        total = add(a, b)
    else:
        total = a + b
    from torch._dynamo.utils import counters

    with open(args.out, "w") as f:
        json.dump({"losses": losses, "triton_sum": total.sum().item(), "device": str(total.device),
                   "has_triton": torch.utils._triton.has_triton(), "graph_breaks": dict(counters["graph_break"]),
                   "graphs": counters["stats"]["unique_graphs"]}, f)


if __name__ == "__main__":
    main()
