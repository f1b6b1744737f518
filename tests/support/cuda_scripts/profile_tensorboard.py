"""The profiler's own recipe (no hybrid-interop in it): torch.profiler.profile with a schedule, the CPU and CUDA
activities, profile_memory and record_shapes, tensorboard_trace_handler writing one trace per active window
(gzipped with --gzip), prof.step() every iteration. Without CUDA it profiles the CPU run, its own reference.

python profile_tensorboard.py --logdir traces --out out.json
"""

import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    losses = []
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(args.logdir, worker_name="worker", use_gzip=args.gzip),
                 profile_memory=True, record_shapes=True) as prof:
        for step in range(5):
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step)).to(device)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            prof.step()
    with open(args.out, "w") as f:
        json.dump({"losses": losses, "device": device}, f)


if __name__ == "__main__":
    main()
