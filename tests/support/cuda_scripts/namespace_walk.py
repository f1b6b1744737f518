"""Under `hybrid run`: walk CUDA's namespace (interop.cuda_layer.namespace), call every refused name, and try the
answers a CUDA script reads most (versions, NCCL, TunableOp, the memory fraction, c10d's failure logging).

python -m interop.run namespace_walk.py --out walk.json
"""

import argparse
import importlib
import json
import os
import tempfile

import torch
import torch.distributed as dist

from interop.cuda_layer import UnsupportedCudaAPI, namespace


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = namespace.rows()
    refusals = {}
    for name, how, _ in rows:
        if how != "refused":
            continue
        module, attr = name.rsplit(".", 1)
        try:
            getattr(importlib.import_module(module), attr)()
            refusals[name] = ["returned", ""]
        except UnsupportedCudaAPI as e:
            refusals[name] = ["UnsupportedCudaAPI", str(e)]
        except Exception as e:  # noqa: BLE001
            refusals[name] = [type(e).__name__, str(e)]
    checks = {"version.cuda": torch.version.cuda, "cudnn.version": torch.backends.cudnn.version(),
              "cudnn.is_available": torch.backends.cudnn.is_available(),
              "nccl.version": list(torch.cuda.nccl.version()), "backends.cuda.is_built": torch.backends.cuda.is_built()}
    torch.cuda.tunable.enable(True)
    torch.cuda.tunable.set_max_tuning_iterations(7)
    checks["tunable"] = [torch.cuda.tunable.is_enabled(), torch.cuda.tunable.get_max_tuning_iterations(),
                         list(torch.cuda.tunable.get_results())]
    # The per-process fraction is enforced by the slot's allocator.
    capacity = torch.cuda.get_device_properties(0).total_memory
    held = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.set_per_process_memory_fraction(4.0 * (1 << 20) / capacity)
    checks["fraction"] = torch.cuda.get_per_process_memory_fraction()
    try:
        torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        checks["over_fraction"] = "allocated"
    except torch.OutOfMemoryError as e:
        checks["over_fraction"] = str(e)
    torch.empty(2 << 20, dtype=torch.uint8, device="cuda")  # within the limit
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.empty(8 << 20, dtype=torch.uint8, device="cuda")  # the limit is lifted
    del held
    # What c10d logs about a failed collective of an "nccl" group.
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    from torch.distributed.c10d_logger import _get_msg_dict

    checks["c10d_log"] = {k: str(v) for k, v in _get_msg_dict("all_reduce").items()}
    dist.destroy_process_group()
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "refusals": refusals, "checks": checks, "script": os.path.abspath(__file__),
                   "markdown": namespace.markdown()}, f)


if __name__ == "__main__":
    main()
