"""``hybrid bench ops``: modelled throughput of op families on every chip kind.

Nothing runs: each point is ``devices.estimate`` on the kind's catalogue
figures, so the sweep covers chips this machine does not have. Figures are
modelled; Trn4 rows are projected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import devices
import devices.cost
from devices.output_files import atomic_path

DEFAULT_KINDS = ("trn2", "trn3", "trn4", "h100", "h200", "b200", "gb300")

# (label, M, K, N): square GEMMs and the GEMMs of a Llama-3-8B layer at 4k tokens.
MATMULS = [(f"square {n}", n, n, n) for n in (512, 1024, 2048, 4096, 8192, 16384)] + [
    ("llama8b qkv 4096x4096x6144", 4096, 4096, 6144),
    ("llama8b mlp-up 4096x4096x28672", 4096, 4096, 28672),
    ("llama8b mlp-down 4096x14336x4096", 4096, 14336, 4096),
    ("llama8b lm-head 4096x4096x128256", 4096, 4096, 128256),
]
ATTENTION_SEQS = (1024, 2048, 4096, 8192)
ELEMENTWISE = (1 << 16, 1 << 20, 1 << 24, 1 << 28)


@dataclass
class Point:
    family: str
    case: str
    kind: str
    dtype: str
    seconds: float
    tflops: float
    gbps: float
    bound: str
    projected: bool


@dataclass
class Sweep:
    points: list[Point] = field(default_factory=list)

    def table(self, family: str) -> str:
        from devices.text_table import table

        rows = [p for p in self.points if p.family == family]
        kinds = list(dict.fromkeys(p.kind for p in rows))
        cases = list(dict.fromkeys((p.case, p.dtype) for p in rows))
        metric = "GB/s" if family == "elementwise" else "TFLOP/s"
        body = []
        for case, dtype in cases:
            line: list[object] = [case, dtype]
            for k in kinds:
                p = next(p for p in rows if p.kind == k and p.case == case and p.dtype == dtype)
                line.append(f"{p.gbps:.0f}" if family == "elementwise" else f"{p.tflops:.1f}")
            body.append(line)
        headers = ["case", "dtype"] + [k + ("*" if devices.chip(k).projected else "") for k in kinds]
        return (f"{family}: modelled {metric} (* projected chip)\n"
                + table(headers, body, align="ll" + "r" * len(kinds)))


def _point(family, case, kind, op, shapes, dtype, args=None, out_shapes=None) -> Point:
    est = devices.estimate(kind, op, shapes, dtype, args=args, out_shapes=out_shapes)
    return Point(family, case, kind, dtype, est.seconds, est.flops / est.seconds / 1e12,
                 est.bytes / est.seconds / 1e9, est.bound, est.projected)


def sweep(kinds=DEFAULT_KINDS, dtypes=("bfloat16", "float8_e4m3fn", "float32")) -> Sweep:
    """Every family x case x kind x dtype, modelled."""
    out = Sweep()
    for kind in kinds:
        for dtype in dtypes:
            for label, m, k, n in MATMULS:
                out.points.append(_point("matmul", label, kind, "aten::mm", [(m, k), (k, n)], dtype))
        for seq in ATTENTION_SEQS:
            q = (1, 32, seq, 128)
            out.points.append(_point("attention", f"causal fwd b1 h32 s{seq} d128", kind,
                                     "aten::_scaled_dot_product_flash_attention", [q, q, q], "bfloat16",
                                     args={"is_causal": True}))
        for n in ELEMENTWISE:
            for dtype in ("bfloat16", "float32"):
                out.points.append(_point("elementwise", f"add {n:,} elements", kind, "aten::add.Tensor",
                                         [(n,), (n,)], dtype))
    return out


def plot(s: Sweep, path: str) -> str:
    """TFLOP/s of square bf16 matmuls vs size, one line per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for kind in dict.fromkeys(p.kind for p in s.points):
        pts = [p for p in s.points if p.family == "matmul" and p.kind == kind and p.dtype == "bfloat16"
               and p.case.startswith("square")]
        label = kind + (" (projected)" if devices.chip(kind).projected else "")
        ax.plot([int(p.case.split()[1]) for p in pts], [p.tflops for p in pts], marker="o",
                linestyle="--" if devices.chip(kind).projected else "-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("square matmul size n (n x n x n), bf16")
    ax.set_ylabel("modelled TFLOP/s")
    ax.set_title("Modelled matmul throughput per chip kind (devices.cost)")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    with atomic_path(path, "path") as tmp:  # a whole picture or none
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return path
