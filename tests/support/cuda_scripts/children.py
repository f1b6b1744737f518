"""Children a CUDA script starts itself (no hybrid-interop in it): a DataLoader worker of the spawn context and
ProcessPoolExecutor workers of the spawn and forkserver contexts, each reporting what torch.cuda shows it and
computing on cuda:0 when CUDA is available.

python children.py --out children.json
"""

import argparse
import json
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

import torch
from torch.utils.data import DataLoader, Dataset


def probe(_=None) -> dict:
    available = torch.cuda.is_available()
    device = "cuda:0" if available else "cpu"
    x = torch.arange(6, dtype=torch.float32, device=device)
    return {"pid": os.getpid(), "available": available, "count": torch.cuda.device_count() if available else 0,
            "name": torch.cuda.get_device_name(0) if available else "cpu", "sum": (x * x).sum().item(),
            "is_cuda": x.is_cuda}


class Probes(Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, index):
        return json.dumps(probe())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    loader = DataLoader(Probes(), batch_size=None, num_workers=1, multiprocessing_context="spawn")
    found = {"parent": probe(), "dataloader_spawn": json.loads(next(iter(loader)))}
    for context in ("spawn", "forkserver"):
        with ProcessPoolExecutor(1, mp_context=mp.get_context(context)) as pool:
            found[f"pool_{context}"] = pool.submit(probe).result()
    with open(args.out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
