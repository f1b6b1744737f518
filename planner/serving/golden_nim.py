"""NVIDIA NIM's Llama 3.1 8B latency curves (section W of the golden rows): a closed loop of clients on one H100.

NVIDIA's NIM benchmarking guide publishes, beside the Llama 3.3 70B curve of sections C and E, NIM 1.8.0 serving
Llama 3.1 8B Instruct on one H100 80G in FP8 (TP1) at five length pairs (200/200, 500/2000, 1000/1000, 5000/500,
20000/2000), each under 1 to 250 concurrent clients (AIPerf): TTFT, inter-token latency and output tokens/s. Every
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


def nim_engine() -> Engine:
    """NIM's engine as the rows model it: the fused engine with NIM 1.8.0's host time per streamed token."""
    return Engine(host_per_token=NIM_HOST_PER_TOKEN.value)


NIM_8B_ROWS: tuple[GoldenRow, ...] = tuple(
    GoldenRow(f"NIM 1xH100 8B {isl}/{osl} c{c}", "llama3.1-8b", "h100:1", {"tp": 1}, "fp8",
              Workload(isl, osl, concurrency=c, requests=10 * c),
              {"ttft_p50": ttft / 1e3, "tpot_p50": itl / 1e3, "tokens_per_s": tps}, NIM_8B, engine=nim_engine())
    for (isl, osl), points in NIM_8B_TABLE.items() for c, ttft, itl, tps in points)
"""W: NIM 1.8.0's Llama 3.1 8B curves on one H100 (see the module doc); one row fits
:data:`~planner.serving.fitted.NIM_HOST_PER_TOKEN`, every other figure tests it."""


__all__ = ["NIM_8B", "NIM_8B_ROWS", "NIM_8B_TABLE", "nim_engine"]
