"""NVIDIA NIM's Llama 3.1 8B latency curves (section W of the golden rows): a closed loop of clients on one H100.

NVIDIA's NIM benchmarking guide publishes NIM 1.8.0 serving Llama 3.1 8B Instruct on one H100 80G in FP8 (TP1) at
five length pairs (200/200, 500/2000, 1000/1000, 5000/500, 20000/2000), each under 1 to 250 concurrent clients
(AIPerf): TTFT, inter-token latency and output tokens/s; and Llama 3.3 70B on two H100 (TP2) at the same lengths, of
which sections C and E hold 5000/500 up to 100 clients (:data:`NIM_70B_ROWS` the rest). Every
row runs NIM's engine (:func:`nim_engine`: the fused engine with NIM's frontend time per streamed token,
:data:`planner.serving.fitted.NIM_HOST_PER_TOKEN`, fitted on one of these rows' output tokens/s); every other figure
tests the model.

The published figures obey Little's law for a closed loop: each client's request takes ``c x osl / throughput``, so
``TTFT ~ c x osl / throughput - (osl - 1) x ITL``. Under long outputs TTFT is the small difference of those two large
terms: at 1000/1000 and 25 clients a 1 % error in the inter-token latency moves TTFT by 22 % of itself.
"""

from __future__ import annotations

from planner.serving.engine import Engine
from planner.serving.fitted import NIM_HOST_PER_TOKEN
from planner.serving.golden_models import GoldenRow
from planner.serving.workload import Workload

NIM_8B = ("NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, Performance, Llama-3.1-8b-instruct, NIM 1.8.0 on one H100 "
          "80G, fp8 TP1 (AIPerf; https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance); the page's tables "
          "per length pair read through a public copy: zivbeker42/llm-guesstimator tested_benchmarks/"
          "nim_llama3.1_8b_v1.8.0_1xH100_80GB.csv @ 9fa7c3b7 (its 200/200 table as on the page)")

NIM_8B_TABLE: dict[tuple[int, int], tuple[tuple[int, float, float, float], ...]] = {
    # (input, output tokens): (clients, TTFT ms, ITL ms, output tokens/s) as published
    (200, 200): ((1, 10.26, 4.63, 214.56), (5, 16.81, 4.58, 1076.88), (25, 36.34, 5.19, 4678.88),
                 (50, 67.41, 5.91, 8018.23), (100, 119.97, 7.57, 12214.97), (150, 346.53, 9.81, 12988.89),
                 (200, 465.18, 12.65, 13348.4), (250, 605.6, 16.14, 12964.72)),
    (500, 2000): ((1, 13.84, 4.56, 218.86), (5, 30.88, 4.81, 1035.85), (25, 97.07, 5.82, 4263.49),
                  (50, 135.26, 7.06, 7009.01), (100, 239.92, 9.51, 10379.22), (150, 376.95, 13.34, 11053.75),
                  (200, 1664.34, 14.96, 12549.74), (250, 6550.46, 16.97, 12268.82)),
    (1000, 1000): ((1, 19.03, 4.53, 220.1), (5, 55.87, 4.8, 1031.3), (25, 268.42, 5.84, 4098.01),
                   (50, 414.87, 7.26, 6514.66), (100, 615.16, 10.04, 9392.43), (150, 885.53, 14.14, 9982.74),
                   (200, 1258.79, 16.02, 11553.34), (250, 1885.04, 19.68, 11527.61)),
    (5000, 500): ((1, 77.45, 4.62, 209.96), (5, 279.92, 5.42, 838.03), (25, 724.14, 9.67, 2251.44),
                  (50, 817.73, 16.47, 2765.71), (100, 915.15, 29.67, 3180.16), (150, 1080.0, 43.35, 3301.68),
                  (200, 4361.35, 50.41, 3378.48), (250, 11717.42, 50.53, 3372.0)),
    (20000, 2000): ((1, 403.2, 5.06, 189.96), (5, 1141.22, 7.39, 627.76), (25, 2371.46, 19.35, 1217.04),
                    (50, 11071.41, 30.73, 1330.57), (100, 78187.07, 31.08, 1336.09),
                    (150, 145290.54, 31.31, 1337.0), (200, 211735.71, 31.46, 1338.24),
                    (250, 278580.85, 31.62, 1337.66)),
}


NIM_70B = ("NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, Performance, Llama-3.3-70b-instruct, NIM 1.8.0 on two H100 "
           "80G, fp8 TP2 (AIPerf; https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance); the lengths and "
           "clients sections C and E do not hold, read through the same public copy: zivbeker42/llm-guesstimator "
           "tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv @ cf11e664")

NIM_70B_TABLE: dict[tuple[int, int], tuple[tuple[int, float, float, float], ...]] = {
    # the 70B curve's points not already rows (5000/500 at 1, 5, 25, 50, 100 clients are sections C and E)
    (5000, 500): ((150, 34794.22, 92.86, 920.9), (200, 61680.22, 93.06, 920.54), (250, 88605.32, 93.2, 920.12)),
    (500, 2000): ((1, 47.77, 18.91, 52.85), (5, 126.53, 19.04, 261.83), (25, 147.63, 21.69, 1149.05),
                  (50, 181.64, 23.97, 2078.43), (100, 229.77, 29.98, 3322.87), (150, 296.74, 37.85, 3948.26),
                  (200, 4867.89, 40.72, 4624.14)),
    (200, 200): ((1, 31.22, 18.8, 53.0), (5, 88.7, 18.83, 260.67), (25, 138.98, 20.61, 1178.68),
                 (50, 156.28, 23.33, 2081.24), (100, 176.8, 29.87, 3263.31), (150, 195.51, 37.75, 3883.1),
                 (200, 253.36, 42.95, 4534.54), (250, 264.22, 48.16, 5067.05)),
    (1000, 1000): ((1, 82.46, 18.67, 53.37), (5, 145.62, 19.07, 260.48), (25, 250.49, 22.45, 1102.23),
                   (50, 278.62, 25.87, 1912.93), (100, 334.23, 34.21, 2895.49), (150, 428.54, 44.44, 3342.67),
                   (200, 558.23, 50.66, 3901.74), (250, 3499.83, 56.3, 4167.39)),
    (20000, 2000): ((1, 1833.01, 19.58, 48.8), (5, 2910.33, 25.24, 186.8), (25, 18781.26, 48.26, 415.33),
                    (50, 123969.71, 49.22, 418.65), (100, 333564.85, 49.81, 425.1),
                    (150, 543226.4, 50.01, 423.95), (200, 753417.03, 50.06, 425.74),
                    (250, 963222.96, 50.13, 427.06)),
}


def nim_engine() -> Engine:
    """NIM's engine as the rows model it: the fused engine with NIM 1.8.0's host time per streamed token."""
    return Engine(host_per_token=NIM_HOST_PER_TOKEN.value)


def _nim_rows(table: dict, model: str, label: str, rack: str, tp: int, source: str) -> tuple[GoldenRow, ...]:
    """One row per published point of a NIM curve (``table``: lengths -> (clients, TTFT ms, ITL ms, tokens/s)), each
    a closed loop of that many clients serving ten requests apiece, on NIM's engine."""
    return tuple(GoldenRow(f"{label} {isl}/{osl} c{c}", model, rack, {"tp": tp}, "fp8",
                           Workload(isl, osl, concurrency=c, requests=10 * c),
                           {"ttft_p50": ttft / 1e3, "tpot_p50": itl / 1e3, "tokens_per_s": tps}, source,
                           engine=nim_engine())
                 for (isl, osl), points in table.items() for c, ttft, itl, tps in points)


NIM_8B_ROWS: tuple[GoldenRow, ...] = _nim_rows(NIM_8B_TABLE, "llama3.1-8b", "NIM 1xH100 8B", "h100:1", 1, NIM_8B)
"""W: NIM 1.8.0's Llama 3.1 8B curves on one H100 (see the module doc); one row fits
:data:`~planner.serving.fitted.NIM_HOST_PER_TOKEN`, every other figure tests it."""

NIM_70B_ROWS: tuple[GoldenRow, ...] = _nim_rows(NIM_70B_TABLE, "llama3.3-70b", "NIM 2xH100 TP2", "h100:2", 2, NIM_70B)
"""W: the rest of NIM 1.8.0's Llama 3.3 70B curve on two H100 (four more length pairs, and 5000/500 past 100
clients), test rows only."""


__all__ = ["NIM_70B", "NIM_70B_ROWS", "NIM_70B_TABLE", "NIM_8B", "NIM_8B_ROWS", "NIM_8B_TABLE", "nim_engine"]
