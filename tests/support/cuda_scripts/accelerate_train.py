"""An HF accelerate training loop (Accelerator() picks the device); the same file runs on the CPU."""

import argparse
import json

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True).sin()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(2):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    unwrapped = accelerator.unwrap_model(model)
    with open(args.out, "w") as f:
        json.dump({"loss": loss.item(), "device": str(accelerator.device),
                   "param_device": str(next(unwrapped.parameters()).device),
                   "params": [p.detach().cpu().double().flatten().tolist() for p in unwrapped.parameters()]}, f)


if __name__ == "__main__":
    main()
