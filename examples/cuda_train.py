"""A small CUDA training script, written as CUDA users write them (nothing in it knows about hybrid-interop).

    python examples/cuda_train.py                  # on a GPU, or on the CPU where there is none
    hybrid run examples/cuda_train.py              # on the rack: cuda:0 is its first GPU-kind slot
    hybrid run --map trn examples/cuda_train.py    # the same code on a Trainium slot
"""

import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randn(64, 256).pin_memory() if device == "cuda" else torch.randn(64, 256)

if device == "cuda":
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
for step in range(5):
    x = data.to(device, non_blocking=True)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), x)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
print(f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}: final loss {loss.item():.6f}")
if device == "cuda":
    end.record()
    torch.cuda.synchronize()
    print(f"5 steps: {start.elapsed_time(end):.3f} ms, peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
