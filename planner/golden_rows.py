"""The published GPU training rows the step model is checked against (:mod:`planner.golden` models and fits them).

NVIDIA Megatron-Bridge's performance summaries (25.09 to 26.06 containers), NeMo Framework's (25.02, 25.04) and
NeMo's (24.07), NeMo's long-sequence table (24.03.01) and torchtitan's H200 benchmark: each row with its
configuration as its source states it, and the document (:data:`SOURCES`) it is read from.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = ("NVIDIA Megatron-Bridge, docs/performance-summary.md, 25.11 container, pre-training, FP8 current "
          "scaling, sequence length 8192 (https://github.com/NVIDIA-NeMo/Megatron-Bridge); parallel settings "
          "and recompute from scripts/performance/configs/llama/llama3*_workload_base_configs.py")

_SUMMARY = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
SOURCES = {
    "25.11": f"{_SUMMARY} @97ad8cc6f (2025-12-04), 25.11 NeMo container",
    "25.11.1": f"{_SUMMARY} @5776a6d90 (2025-12-10), 25.11 NeMo container after its corrections",
    "25.09": f"{_SUMMARY} @5776a6d90 (2025-12-10), section '25.09 NeMo Container'",
    "26.02": f"{_SUMMARY} @c0b9a0003 (2026-02-26), 26.02 NeMo container",
    "24.07": "NVIDIA/NeMo docs/source/performance/performance_summary.md @070a0bb1, NeMo 24.07 container, DGX-H100, FP8",
    **{c: f"NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987df (2026-08-22), section '{c} NeMo "
          f"Container', precision FP8 (current scaling)" for c in ("26.02.01", "26.04", "26.04.01", "26.06")},
    "24.03.01": "NVIDIA/NeMo docs/source/performance/performance_long_sequence.md @19fadb67b (2025-05-08), section "
                "'LLAMA2-7B (FP8) - H100', NeMo 24.03.01 container, DGX-H100: published TFLOP/s/GPU only",
    "25.02": "NVIDIA NeMo Framework User Guide, Performance Summary (docs.nvidia.com/nemo-framework/user-guide/latest/"
             "performance/performance_summary.html, stored copy), NeMo 25.02 container, DGX-B200, FP8",
    "25.04": "NVIDIA NeMo Framework User Guide, Performance Summary (docs.nvidia.com/nemo-framework/user-guide/latest/"
             "performance/archive/25.04-performance-summary.html, stored copy), NeMo 25.04 container, DGX-GB200, FP8 "
             "(per-tensor current scaling)",
    "torchtitan": "pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md @bcdeaa37c (Trainy, June 2025): "
                  "torchtitan @e7c0cae, torch 2.8.0a0 (NGC 25.05), torch.compile, float8 (tensorwise) with float8 FSDP "
                  "all-gathers, llama3_8b.toml (sequence 8192, per-op selective activation checkpointing)",
}
"""Each container's table: the repository, file and commit read (https://github.com/NVIDIA-NeMo/Megatron-Bridge);
every row is FP8 (current scaling), pre-training, sequence length 8192 unless the row says (NeMo 24.07: Llama 2 at
4096)."""


@dataclass(frozen=True, slots=True)
class GoldenRow:
    """One published row and how it was run."""

    model: str
    gpus: int
    system: str
    rack: str
    """Our rack spec for the system: DGX-H100 nodes (8 GPUs, NVLink 4, InfiniBand NDR); DGX-GB200
    NVL72 racks (64-GPU jobs in one NVLink domain; 128 GPUs as two racks of 64)."""
    global_batch: int
    microbatch: int
    tp: int
    pp: int
    cp: int
    vp: int
    fsdp: bool
    tokens_per_gpu: float
    """Published tokens/s/GPU."""
    tflops_per_gpu: float
    """Published model TFLOP/s/GPU."""
    recompute: str = "none"
    """As the recipe: ``full:5`` is Megatron's recompute_num_layers=5."""
    note: str = ""
    container: str = "25.11"
    """The NeMo container whose table the row is in (a key of :data:`SOURCES`)."""
    seq_len: int = 8192

    @property
    def stack(self) -> str:
        """The software stack that ran the row (a key of :data:`planner.golden.STACK_ATTENTION`): ``torchtitan``,
        ``nemo-2024`` (NeMo's 24.x containers) or ``megatron-core`` (NeMo 2.0 and Megatron-Bridge, 2025 on)."""
        return "torchtitan" if self.container == "torchtitan" else (
            "nemo-2024" if self.container.startswith("24.") else "megatron-core")

    @property
    def label(self) -> str:
        tail = "" if self.container == "25.11" else f" ({self.container})"
        return f"{self.model} {self.gpus} {self.system}{tail}"


ROWS: tuple[GoldenRow, ...] = (
    GoldenRow("llama3-8b", 8, "DGX-H100", "h100-node", 128, 1, 1, 1, 1, 1, True, 14451, 744, "full:5",
              "recipe: recompute_num_layers=5"),
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 128, 1, 4, 8, 1, 5, False, 1602, 719),
    GoldenRow("llama3.1-405b", 1024, "DGX-H100", "h100-node*128", 512, 1, 8, 8, 2, 8, False, 292, 737),
    GoldenRow("llama3-8b", 8, "DGX-GB200", "gb200-nvl72", 128, 2, 1, 1, 1, 1, False, 31508, 1622),
    GoldenRow("llama3-70b", 64, "DGX-GB200", "gb200-nvl72", 128, 2, 1, 1, 1, 1, True, 4312, 1937, "none",
              "recipe: activations of 40 layers offloaded to host memory (not modelled: memory is over capacity)"),
    GoldenRow("llama3.1-405b", 128, "DGX-GB200", "gb200:64*2", 64, 1, 2, 1, 1, 1, True, 706, 1782, "none",
              "recipe: activations of 92 layers offloaded to host memory (not modelled: memory is over capacity)"),
)
"""The six rows of issue 11 (reference/planning.md)."""


def _blackwell_fp8(container: str, gb300_70b, gb200_70b, gb300_405b, gb200_405b,
                   gb300_405b_par: tuple[int, int, int, int] = (4, 8, 1, 4)) -> tuple[GoldenRow, ...]:
    """One container's DGX-GB300 and DGX-GB200 FP8 Llama rows, (tokens/s/GPU, TFLOP/s/GPU) each (None: not in the
    table), with the recipes every 26.x container lists: Llama3 70B on 64 GPUs, FSDP, MBS 2, GBS 256; Llama3.1 405B
    on 256 GPUs, GBS 1,536, GB300 at TP4 PP8 VP4 (``gb300_405b_par``: TP, PP, CP, VP) and GB200 at TP4 PP16 VP4."""
    tp, pp, cp, vp = gb300_405b_par
    rows = []
    for system, rack, fig in (("DGX-GB300", "gb300-nvl72", gb300_70b), ("DGX-GB200", "gb200-nvl72", gb200_70b)):
        if fig is not None:
            rows.append(GoldenRow("llama3-70b", 64, system, rack, 256, 2, 1, 1, 1, 1, True, *fig, container=container))
    for system, rack, fig, (t, p, c, v) in (("DGX-GB300", "gb300:64*4", gb300_405b, (tp, pp, cp, vp)),
                                            ("DGX-GB200", "gb200:64*4", gb200_405b, (4, 16, 1, 4))):
        rows.append(GoldenRow("llama3.1-405b", 256, system, rack, 1536, 1, t, p, c, v, False, *fig, container=container))
    return tuple(rows)


FOUND_ROWS: tuple[GoldenRow, ...] = (
    # 25.11: the other systems' Llama rows of the same table.
    GoldenRow("llama3-8b", 8, "DGX-B200", "b200-node", 128, 2, 1, 1, 1, 1, False, 30624, 1576),
    GoldenRow("llama3.1-405b", 128, "DGX-B200", "b200-node*16", 64, 1, 4, 8, 2, 8, False, 661, 1667),
    GoldenRow("llama3-8b", 8, "DGX-GB300", "gb300-nvl72", 128, 2, 1, 1, 1, 1, False, 37556, 1933),
    GoldenRow("llama3-70b", 64, "DGX-GB300", "gb300-nvl72", 128, 2, 1, 1, 1, 1, True, 4440, 1995, "none",
              "recipe: activations offloaded to host memory (not modelled)"),
    GoldenRow("llama3.1-405b", 128, "DGX-GB300", "gb300:64*2", 64, 1, 2, 1, 1, 1, True, 850, 2145, "none",
              "recipe: activations offloaded to host memory (not modelled)"),
    # 25.11 after its corrections (GBS 1,536 recipes on 256 GPUs).
    GoldenRow("llama3.1-405b", 256, "DGX-GB200", "gb200:64*4", 1536, 1, 4, 16, 1, 4, False, 813, 2053,
              container="25.11.1"),
    GoldenRow("llama3.1-405b", 256, "DGX-GB300", "gb300:64*4", 1536, 1, 2, 8, 2, 4, False, 999, 2522,
              container="25.11.1"),
    # 25.09: the same recipes one container earlier.
    GoldenRow("llama3-8b", 8, "DGX-H100", "h100-node", 128, 1, 1, 1, 1, 1, True, 14079, 725, "full:5",
              container="25.09"),
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 128, 1, 4, 8, 1, 5, False, 1619, 727, container="25.09"),
    GoldenRow("llama3.1-405b", 1024, "DGX-H100", "h100-node*128", 512, 1, 8, 8, 2, 8, False, 302, 763,
              container="25.09"),
    GoldenRow("llama3-8b", 8, "DGX-GB200", "gb200-nvl72", 128, 2, 1, 1, 1, 1, False, 31357, 1614, container="25.09"),
    GoldenRow("llama3-70b", 64, "DGX-GB200", "gb200-nvl72", 128, 2, 1, 1, 1, 1, True, 3986, 1791, container="25.09"),
    GoldenRow("llama3.1-405b", 128, "DGX-GB200", "gb200:64*2", 64, 1, 2, 1, 1, 1, True, 729, 1840,
              container="25.09"),
    GoldenRow("llama3-8b", 8, "DGX-B200", "b200-node", 128, 2, 1, 1, 1, 1, False, 29994, 1544, container="25.09"),
    GoldenRow("llama3.1-405b", 128, "DGX-B200", "b200-node*16", 64, 1, 4, 8, 2, 8, False, 664, 1676,
              container="25.09"),
    # 26.02: the H100 recipes at GBS 256 / 1,536.
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 256, 1, 4, 8, 1, 5, False, 1621, 728, container="26.02"),
    GoldenRow("llama3.1-405b", 1024, "DGX-H100", "h100-node*128", 1536, 1, 8, 8, 2, 8, False, 311, 784,
              container="26.02"),
    # 25.11 after its corrections: GB300's Llama3 70B at GBS 256 (2 microbatches of 2 per GPU).
    GoldenRow("llama3-70b", 64, "DGX-GB300", "gb300-nvl72", 256, 2, 1, 1, 1, 1, True, 4520, 2030, container="25.11.1"),
    # 26.02: the Blackwell FP8 rows of the same table (FSDP 70B recipes at GBS 256; 405B on 256 GPUs at GBS 1,536).
    *_blackwell_fp8("26.02", (5003, 2248), (4040, 1815), (988, 2495), (793, 2004)),
    # 26.02.01 .. 26.06: the later containers' FP8 rows of the archive (GB300's 405B at TP2 CP2 in 26.02.01).
    *_blackwell_fp8("26.02.01", (5243, 2353), (4357, 1956), (1024, 2585), (818, 2063), gb300_405b_par=(2, 8, 2, 4)),
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 256, 1, 4, 8, 1, 5, False, 1639, 736, container="26.02.01"),
    *_blackwell_fp8("26.04", (5243, 2355), (4143, 1861), (1036, 2615), (842, 2126)),
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 256, 1, 4, 8, 1, 5, False, 1633, 734, container="26.04"),
    *_blackwell_fp8("26.04.01", (5248, 2348), (4224, 1892), (1024, 2617), (864, 2144)),
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 256, 1, 4, 8, 1, 5, False, 1664, 731, container="26.04.01",
              note="published TFLOP/s/GPU (731) disagrees with its tokens/s/GPU (1,664 x 449 GFLOP per token = 747; "
                   "the 26.04 and 26.02.01 rows of the same recipe agree): one of the two is misprinted; tokens/s kept"),
    GoldenRow("llama3.1-405b", 1024, "DGX-H100", "h100-node*128", 1536, 1, 8, 8, 2, 8, False, 328, 827,
              container="26.04.01"),
    *_blackwell_fp8("26.06", None, None, (1048, 2646), (843, 2129)),
    GoldenRow("llama3.1-405b", 1024, "DGX-H100", "h100-node*128", 1536, 1, 8, 8, 2, 8, False, 326, 822,
              container="26.06"),
    # 24.07 (NeMo, before Megatron-Bridge): the DGX-H100 Llama rows, Llama 2 at sequence 4,096.
    GoldenRow("llama2-7b", 8, "DGX-H100", "h100-node", 128, 1, 1, 1, 1, 1, False, 16847, 776, container="24.07",
              seq_len=4096),
    GoldenRow("llama2-13b", 16, "DGX-H100", "h100-node*2", 128, 1, 1, 4, 1, 10, False, 8646, 754, container="24.07",
              seq_len=4096),
    GoldenRow("llama2-70b", 64, "DGX-H100", "h100-node*8", 128, 1, 4, 4, 1, 20, False, 1707, 759, container="24.07",
              seq_len=4096),
    GoldenRow("llama3-8b", 8, "DGX-H100", "h100-node", 128, 1, 1, 1, 2, 1, False, 12036, 697, container="24.07"),
    GoldenRow("llama3-70b", 64, "DGX-H100", "h100-node*8", 128, 1, 4, 4, 2, 5, False, 1533, 738, container="24.07"),
)
"""Rows found since issue 11 in the same summary's history and its archive (each container's commit:
:data:`SOURCES`): every dense Llama FP8 (current scaling) pre-training row of DGX-H100, DGX-B200, DGX-GB200 and
DGX-GB300 from 25.09 to 26.06; and NeMo 24.07's DGX-H100 Llama rows (FP8, the summary before Megatron-Bridge)."""

def nemo_llama2_flops_per_token(seq_len: int, hidden: int = 4096, layers: int = 32, vocab: int = 32000) -> float:
    """Model FLOPs per token by NeMo's Llama 2 formula before NVIDIA/NeMo#14424 (2025-08, "Discount FLOPs in
    dot-product att"): ``(24 h^2 + 4 s h) x 3 L + 6 h V``, attention counted without the causal half (NeMo 24.07's
    table publishes both figures of its Llama 2 7B row: 776 TFLOP/s = 16,847 tokens/s x 46.1 GFLOP, this formula
    46.0)."""
    return (24 * hidden * hidden + 4 * seq_len * hidden) * 3 * layers + 6 * hidden * vocab


def _long_context(k: int, gpus: int, gbs: int, tflops: float, tp: int, pp: int, cp: int) -> GoldenRow:
    seq = k * 1024
    rack = f"h100:{gpus}" if gpus < 8 else "h100-node" if gpus == 8 else f"h100-node*{gpus // 8}"
    return GoldenRow("llama2-7b", gpus, "DGX-H100", rack, gbs, 1, tp, pp, cp, 1, False,
                     round(tflops * 1e12 / nemo_llama2_flops_per_token(seq)), tflops, container="24.03.01",
                     seq_len=seq, note="tokens/s/GPU derived from the published TFLOP/s/GPU by NeMo's formula "
                                       "(nemo_llama2_flops_per_token), which counts attention without the causal "
                                       "half (the modelled TFLOP/s count it with, as Megatron-Bridge's do: 2x at "
                                       "1M tokens); microbatch 1 and no recompute assumed (not stated)"
                     if k == 4 else "")


LONG_CONTEXT_ROWS: tuple[GoldenRow, ...] = tuple(_long_context(*r) for r in (
    (4, 4, 1024, 768, 1, 1, 1), (8, 8, 512, 730, 1, 2, 1), (16, 16, 256, 660, 2, 1, 1), (32, 32, 128, 610, 2, 1, 2),
    (64, 64, 64, 574, 4, 1, 2), (128, 128, 32, 555, 4, 1, 4), (256, 256, 16, 549, 4, 1, 8),
    (512, 512, 8, 549, 8, 1, 16), (1024, 1024, 4, 536, 8, 1, 32)))
"""NeMo's long-sequence table on DGX-H100 (Llama 2 7B, FP8, sequence 4K to 1M, the configuration of each "with
CP" column; :data:`SOURCES` ``24.03.01``): context parallelism 2 to 32 at 32K and longer. The same document's
DGX-B200 table is left out: its TP x PP x DP x CP disagree with its GPU counts (8K: 1 x 1 x 2 x 1 on 8 GPUs)."""

TORCHTITAN_ROWS: tuple[GoldenRow, ...] = tuple(
    GoldenRow("llama3.1-8b", 8 * nodes, "HGX-H200", f"h200-node*{nodes}", 2 * 8 * nodes, 2, 1, 1, 1, 1, True, tps, 0.0,
              "selective", container="torchtitan",
              note="" if nodes == 8 else "per-op selective checkpointing also recomputes every second matmul of a "
                                         "layer (torchtitan's policy); modelled as selective (non-GEMM ops only)")
    for nodes, tps in ((4, 10938), (8, 10753)))
"""torchtitan's Llama 3.1 8B FSDP rows on 32 and 64 H200 (:data:`SOURCES` ``torchtitan``; no TFLOP/s published)."""

NEMO_FRAMEWORK_ROWS: tuple[GoldenRow, ...] = (
    # 25.04, DGX-GB200: the Llama rows (the same recipes as Megatron-Bridge's, at GBS 128 / 64).
    GoldenRow("llama3-8b", 8, "DGX-GB200", "gb200-nvl72", 128, 2, 1, 1, 1, 1, False, 33099, 1917, container="25.04"),
    GoldenRow("llama3-70b", 64, "DGX-GB200", "gb200-nvl72", 128, 1, 1, 1, 1, 1, True, 4035, 1943, container="25.04"),
    GoldenRow("llama3.1-405b", 128, "DGX-GB200", "gb200:64*2", 64, 1, 4, 8, 2, 8, False, 665, 1763,
              container="25.04"),
    # 25.02, DGX-B200.
    GoldenRow("llama3-8b", 8, "DGX-B200", "b200-node", 128, 2, 1, 1, 1, 1, False, 26006, 1506, container="25.02",
              note="the same recipe publishes 30,624 tokens/s/GPU in 25.11 (the row B200's factor is fitted on): "
                   "15 % of stack progress the factors, which describe 25.11, do not model"),
    GoldenRow("llama3-70b", 64, "DGX-B200", "b200-node*8", 128, 1, 2, 4, 2, 5, False, 3062, 1474, container="25.02"),
    GoldenRow("llama3.1-405b", 128, "DGX-B200", "b200-node*16", 64, 1, 4, 8, 2, 8, False, 625, 1658,
              container="25.02"),
)
"""NeMo Framework's (NeMo 2.0) performance summaries before Megatron-Bridge's: the Llama rows of the 25.04 DGX-GB200
and 25.02 DGX-B200 tables (:data:`SOURCES`; their TFLOP/s count attention without the causal half, as NeMo did
until 2025-08)."""

ALL_ROWS: tuple[GoldenRow, ...] = ROWS + FOUND_ROWS + LONG_CONTEXT_ROWS + TORCHTITAN_ROWS + NEMO_FRAMEWORK_ROWS
"""Every published row the step model is checked against."""

TFLOPS_MISPRINTED = frozenset({"llama3-70b 64 DGX-H100 (26.04.01)"})
"""Rows whose published TFLOP/s/GPU contradicts their own tokens/s/GPU (each row's note says how); kept as published,
left out of the FLOPs-per-token convention check."""
