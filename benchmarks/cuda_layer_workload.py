"""The benchmark's CUDA training script (as written for CUDA; bench_cuda_layer.py derives its hand port).

Prints one JSON line: the measured wall and CPU time of the timed steps (after warm-up steps).
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from interop.models import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=1024, seq_len=64, dim=128, heads=4, layers=2)


def train_step(model, optimizer, x, y, device, autocast_device):
    """One step as CUDA training loops write it (the benchmark's in-process A/B runs this same function)."""
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with torch.autocast(device_type=autocast_device, dtype=torch.bfloat16):
        logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    device = torch.device("cuda")
    model = GPT(CONFIG).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, CONFIG.vocab_size, (8 * (args.warmup + args.steps), CONFIG.seq_len + 1))
    loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=8, pin_memory=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wall = cpu = None
    for step, (x, y) in enumerate(loader):
        if step == args.warmup:
            torch.cuda.synchronize()
            start.record()
            wall, cpu = time.perf_counter(), time.process_time()
        loss = train_step(model, optimizer, x, y, device, "cuda")
    end.record()
    torch.cuda.synchronize()
    loop_s, loop_cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"loop_s": loop_s, "loop_cpu_s": loop_cpu_s, "steps": args.steps, "modelled_ms": start.elapsed_time(end),
                      "loss": loss.item(), "peak_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
