"""A small CUDA training script written the way people write them (no hybrid-interop in it).

Runs on the CPU when CUDA is not available, so the same file is its own CPU
reference: `python train_lm.py` here, `hybrid run train_lm.py` on the rack.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

VOCAB, DIM, SEQ = 64, 32, 16


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied embeddings

    def forward(self, idx):
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        h = self.norm1(x)
        mask = torch.triu(torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool, device=idx.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", help="write the final loss and parameters' checksum here (JSON)")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    torch.manual_seed(0)
    if use_cuda:
        torch.cuda.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        print(f"training on {torch.cuda.get_device_name(0)} (capability {torch.cuda.get_device_capability()})")

    tokens = torch.randint(0, VOCAB, (8 * args.steps, SEQ + 1))
    loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=8, shuffle=False,
                        pin_memory=use_cuda)

    model = TinyLM().to(device)
    assert model.head.weight is model.embed.weight
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=False)

    if use_cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.reset_peak_memory_stats()
        start.record()
    wall = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device_type="cuda" if use_cuda else "cpu", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    if use_cuda:
        end.record()
        torch.cuda.synchronize()
        print(f"{step + 1} steps in {start.elapsed_time(end):.3f} ms (CUDA events), "
              f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.2f} MiB")
        torch.cuda.empty_cache()
    print(f"wall {time.perf_counter() - wall:.3f} s; final loss {loss.item():.6f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"loss": loss.item(), "checksum": sum(p.detach().cpu().double().sum().item() for p in model.parameters()),
                       "tied": model.head.weight is model.embed.weight}, f)


if __name__ == "__main__":
    main()
