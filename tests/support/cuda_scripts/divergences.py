"""CUDA code that runs on the CPU but would not on every real target: a float64 matmul (no FP64 on
Trainium) and a plain float8 matmul (CUDA needs torch._scaled_mm). Used with `hybrid run --strict`."""

import sys

import torch

which = sys.argv[1] if len(sys.argv) > 1 else "both"
if which in ("float64", "both"):
    a = torch.randn(8, 8, device="cuda:0").double()
    print("float64", (a @ a).sum().item())
if which in ("float8", "both"):
    b = torch.randn(16, 16, device="cuda:1").to(torch.float8_e4m3fn)
    print("float8", (b @ b).float().sum().item())
