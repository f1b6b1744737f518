"""Predicted vs measured, per op, on a real GPU: how good is the cost model?

Runs the GPT-style model's forward (bf16) on ``cuda:0`` and times every aten
op with CUDA events (a TorchDispatchMode brackets each op), then costs the
same op with ``devices.estimate`` for the chip kind the GPU is (H100, H200,
B200 and GB300 are recognised by name). Writes a per-op table (CSV and a
markdown summary) and prints the median absolute error (target <= 20 %).

One prepared script, meant for the lent GPU machine, within its time budget:

    python benchmarks/calibrate_gpu.py --out "$OUT"

``--dry-run`` runs the same code on the CPU with wall-clock timing so the
script stays tested where there is no GPU; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import devices  # noqa: E402
from devices.dtypes import dtype_name  # noqa: E402
from interop.models import GPT, GPTConfig, token_batch  # noqa: E402

# GB200 before B200: "NVIDIA GB200" contains "B200".
KINDS_BY_NAME = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("GB200", "gb200"), ("B200", "b200"),
                 ("GB300", "gb300"))
SKIP = {"aten::detach", "aten::view", "aten::_unsafe_view", "aten::t", "aten::transpose.int", "aten::expand",
        "aten::split.Tensor", "aten::slice.Tensor", "aten::unsqueeze", "aten::select.int", "aten::as_strided",
        "aten::permute", "aten::_reshape_alias", "aten::alias", "aten::lift_fresh"}


def kind_of_gpu() -> str:
    name = torch.cuda.get_device_name(0)
    for needle, kind in KINDS_BY_NAME:
        if needle in name:
            return kind
    raise SystemExit(f"unrecognised GPU {name!r}; known: {[n for n, _ in KINDS_BY_NAME]}")


class OpTimer(TorchDispatchMode):
    """Times each op: CUDA events on a GPU, perf_counter in --dry-run."""

    def __init__(self, cuda: bool):
        super().__init__()
        self.cuda = cuda
        self.rows: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = f"aten::{func._schema.name.split('::')[-1]}" + (
            f".{func._schema.overload_name}" if func._schema.overload_name else "")
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = func(*args, **kwargs)
            end.record()
            timing = (start, end)
        else:
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            timing = time.perf_counter() - t0
        ins = [tuple(a.shape) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [tuple(o.shape) for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        tensors = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
        dtype = dtype_name(tensors[0].dtype) if tensors else "float32"
        causal = bool(kwargs.get("is_causal", False)) or (
            "scaled_dot_product" in name and any(a is True for a in args[3:6] if isinstance(a, bool)))
        self.rows.append({"op": name, "in": ins, "out": outs, "dtype": dtype, "timing": timing, "causal": causal})
        return out


def measure(cfg: GPTConfig, batch: int, device: str, repeats: int) -> list[dict]:
    torch.manual_seed(0)
    model = GPT(cfg).to(device=device, dtype=torch.bfloat16)
    idx, _ = token_batch(cfg, batch)
    idx = idx.to(device)
    cuda = device.startswith("cuda")
    with torch.no_grad():
        for _ in range(3):  # warm-up: cuBLAS heuristics, allocator
            model(idx)
        runs = []
        for _ in range(repeats):
            timer = OpTimer(cuda)
            with timer:
                model(idx)
            if cuda:
                torch.cuda.synchronize()
                for r in timer.rows:
                    r["seconds"] = r["timing"][0].elapsed_time(r["timing"][1]) / 1e3
            else:
                for r in timer.rows:
                    r["seconds"] = r["timing"]
            runs.append(timer.rows)
    rows = []
    for i, first in enumerate(runs[0]):
        row = dict(first)
        row["measured_s"] = statistics.median(run[i]["seconds"] for run in runs)
        rows.append(row)
    return rows


def compare(rows: list[dict], kind: str) -> list[dict]:
    out = []
    for r in rows:
        if r["op"] in SKIP:
            continue
        est = devices.estimate(kind, r["op"], r["in"], r["dtype"], out_shapes=r["out"],
                               args={"is_causal": True} if r["causal"] else None)
        err = (est.seconds - r["measured_s"]) / r["measured_s"] if r["measured_s"] > 0 else float("nan")
        out.append({"op": r["op"], "in_shapes": r["in"], "dtype": r["dtype"], "measured_us": r["measured_s"] * 1e6,
                    "predicted_us": est.seconds * 1e6, "rel_error": err, "bound": est.bound,
                    "estimated_by_default": est.estimated_by_default})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=".", help="folder for calibration.csv and calibration.md")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dry-run", action="store_true", help="CPU, wall clock: exercises the script only")
    args = parser.parse_args()
    cfg = GPTConfig(vocab_size=32768, seq_len=2048, dim=2048, heads=16, layers=4)
    if args.dry_run:
        cfg = GPTConfig(vocab_size=256, seq_len=32, dim=64, heads=4, layers=1)
        device, kind = "cpu", "h100"
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --dry-run to exercise the script on the CPU")
        device, kind = "cuda:0", kind_of_gpu()
    rows = compare(measure(cfg, args.batch, device, args.repeats), kind)
    errors = [abs(r["rel_error"]) for r in rows if r["rel_error"] == r["rel_error"]]
    med = statistics.median(errors) if errors else float("nan")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "calibration.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    gpu = "cpu (dry run)" if args.dry_run else torch.cuda.get_device_name(0)
    summary = (f"# Cost model vs measured ({gpu}, kind {kind})\n\n"
               f"- model: GPT-style forward, bf16, {cfg}, batch {args.batch}, median of {args.repeats}\n"
               f"- ops compared: {len(rows)}; median |predicted - measured| / measured: {100 * med:.1f} % "
               f"(target <= 20 %)\n")
    with open(os.path.join(args.out, "calibration.md"), "w") as f:
        f.write(summary)
    print(summary)
    for r in sorted(rows, key=lambda r: -r["measured_us"])[:25]:
        print(f"  {r['op']:<48} {str(r['in_shapes'])[:40]:<40} measured {r['measured_us']:9.1f} us  "
              f"predicted {r['predicted_us']:9.1f} us  {100 * r['rel_error']:+7.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
