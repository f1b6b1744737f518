"""The serving model against published serving results (reference/inference.md, the given rows).

TensorRT-LLM's throughput tables (Llama 3.3 70B, H100 and H200, FP8, TP2), MLPerf Inference v4.1 Llama 2 70B on
8 H100 (Offline, Server), NVIDIA NIM's latency curve (2 H100, concurrency 1 and 25) and the Neuron documentation's
Trainium1 Llama 3 70B rows, each with the configuration it states; and the rows found since: TensorRT-LLM's
Blackwell NVFP4 columns (B200, GB200) and further H200 points, its Qwen3 mixtures of experts (30B A3B on one GPU;
235B A22B expert parallel), AWS's two Trn2 NxD Inference tutorials and the 70B one as first published. Each entry of
planner/serving/fitted.py (the GPU and Trainium families, the Blackwell and Trn2 generations) is fitted on the rows
golden.FIT_ROWS names, and every other row tests it. `python -m pytest -s tests/planner/test_serving_golden.py`
prints the table."""

from __future__ import annotations

import re
import statistics

import pytest

from planner.serving import fitted, golden, golden_nim, golden_rows, golden_trtllm_v1


@pytest.fixture(scope="module")
def outcomes():
    out = golden.evaluate()
    print("\n" + golden.table(out))
    return out


def test_every_dense_figure_within_20_percent_and_the_test_figures_median_within_5(outcomes):
    # The goals of issue 30 for the held-out rows, met here on the rows found since (role "test") of the dense models.
    # A published figure another publication contradicts (golden.CONTRADICTED: the Trn2 70B tutorial's first TTFT,
    # 575.7 ms, republished as 814.3 ms for the same configuration) is held to lie between the two instead.
    # Sections T and U (Trainium under engines its entries were not fitted on) are held to their own tests below.
    dense = [o for o in outcomes if not golden.is_moe(o.row) and o.row not in golden_rows.NEURON_ENGINE_ROWS
             and o.row not in golden_rows.TRAINIUM_HELD_OUT_ROWS and o.row not in golden_trtllm_v1.TRTLLM_V1_ROWS
             and o.row not in golden_nim.NIM_8B_ROWS and o.row not in golden_nim.NIM_70B_ROWS]
    errors = {(o.row.label, k): e for o in dense for k, e in o.errors().items()}
    assert len(errors) == 66
    bounded = {key: e for key, e in errors.items() if key[1] not in golden.CONTRADICTED.get(key[0], ())}
    assert len(bounded) == 65 and all(abs(e) <= 0.20 for e in bounded.values()), bounded
    tests = [abs(e) for o in dense if golden.role(o.row) == "test" for e in o.errors().values()]
    assert len(tests) == 35 and statistics.median(tests) <= 0.05, tests
    assert set(golden.CONTRADICTED) == {r.label for r in golden.ALL_ROWS if r.note}  # each says why
    first, later = (next(o for o in dense if o.row.label == label) for label in (
        "NxDI trn2 TP64 b1 10000/1500 (Dec 2024)", "NxDI trn2 TP64 b1 10000/1500"))
    assert first.row.published["ttft_p50"] < first.modelled["ttft_p50"] < later.row.published["ttft_p50"]
    assert first.modelled["ttft_p50"] == later.modelled["ttft_p50"]  # one configuration, one modelled figure


def test_trn2_under_other_neuron_engines_tests_the_trn2_entry_and_fits_nothing(outcomes):
    # Section T: vLLM Neuron's tutorial baselines (2026) and optimum-neuron's synchronous benchmark (October 2025) on
    # Trn2, held out. The bounds are the model as it stands (a regression check), not issue 30's goal: the trn2
    # entry's 10.5 ms per iteration, fitted under NxD Inference's 2025 vLLM loop, exceeds vLLM Neuron's whole TPOT
    # for GPT-OSS 120B (7.0 ms), so its TPOT is 45-91 % slow; optimum-neuron's prompts, encoded at the compiled 4,096
    # tokens on one chip, are 40-51 % slow in TTFT (its GEMMs faster than the 1.8x fitted at TP 64). The mixtures of
    # experts run NxD's ExpertMLPs (Engine.nxd_inference) over optimum-neuron's static 4,096-token decode graph
    # (Engine.static_decode): TPOT within 7 % for Qwen3 30B and Llama 4 Maverick (74 % and 15 % fast before), 24 % fast
    # for Scout, 39 % for Qwen3 235B at TP 64; their 4,096-token prompts, through the blockwise kernel's blocks, stay
    # 79-94 % fast in TTFT (docs/serving.md), GPT-OSS 120B's 512-token one 27 %.
    rows = [o for o in outcomes if o.row in golden_rows.NEURON_ENGINE_ROWS]
    assert len(rows) == 8 and all(golden.role(o.row) == "test" and o.row.rack.startswith("trn2:") for o in rows)
    assert all(o.row.engine.nxd_inference for o in rows)
    dense = {(o.row.label, k): e for o in rows if not golden.is_moe(o.row) for k, e in o.errors().items()}
    assert len(dense) == 9 and all(abs(e) <= 0.55 for e in dense.values()), dense
    assert all(e > 0.4 for (label, k), e in dense.items() if k == "ttft_p50" and label.startswith("optimum")), dense
    moe = {o.row.model: o.errors() for o in rows if golden.is_moe(o.row)}
    assert sorted(moe) == ["gpt-oss-120b", "llama4-maverick", "llama4-scout", "qwen3-235b-a22b", "qwen3-30b-a3b"]
    assert all(e["ttft_p50"] < -0.75 for m, e in moe.items() if m != "gpt-oss-120b"), moe
    assert -0.4 < moe["gpt-oss-120b"]["ttft_p50"] < -0.15 and moe["gpt-oss-120b"]["tpot_p50"] > 0.5, moe
    assert all(abs(moe[m]["tpot_p50"]) < 0.1 for m in ("qwen3-30b-a3b", "llama4-maverick")), moe
    assert -0.35 < moe["llama4-scout"]["tpot_p50"] < -0.15 and -0.5 < moe["qwen3-235b-a22b"]["tpot_p50"] < -0.3, moe


def test_trn1_under_optimum_neuron_tests_the_nxd_entry_and_fits_nothing(outcomes):
    # Section U: optimum-neuron's synchronous benchmark on a trn1.32xlarge (September 2025), held out, no Trn3 row (none
    # published with its configuration). The bounds are the model as it stands (a regression check), not issue 30's
    # goal. optimum-neuron runs NxD Inference's models, so Trainium1 takes the entry fitted under NxD Inference (trn2's,
    # inherited), not the trainium entry fitted on Transformers NeuronX, whose 12x attention factor made Llama 3.1 8B's
    # 4,096-token padded prefill 98 % slow (and, over the static graph's whole cache, its TPOT 228 % slow): now 14 % and
    # 0 %. Qwen3 30B A3B on 16 chips is 92 % fast in TTFT and 28 % in TPOT, as the Trn2 mixtures of experts are.
    rows = {o.row.model: o for o in outcomes if o.row in golden_rows.TRAINIUM_HELD_OUT_ROWS}
    assert sorted(rows) == ["llama3.1-8b", "qwen3-30b-a3b"]
    assert all(golden.role(o.row) == "test" and o.row.rack.startswith("trn1:") for o in rows.values())
    dense, moe = rows["llama3.1-8b"].errors(), rows["qwen3-30b-a3b"].errors()
    assert 0.05 <= dense["ttft_p50"] <= 0.25 and abs(dense["tpot_p50"]) <= 0.05, dense
    assert moe["ttft_p50"] < -0.85 and -0.4 <= moe["tpot_p50"] <= -0.15, moe
    # One request at a time reaches one of the four data-parallel servers: the row is modelled as that server.
    assert rows["llama3.1-8b"].row.rack == "trn1:4" and rows["llama3.1-8b"].row.parallel == {"tp": 4}


def _moe(outcomes, cut: str, family: str = "qwen3") -> dict:
    """The MoE rows of ``family`` cut as ``cut`` (TP1, DEP) -> their error."""
    return {o.row.label: o.errors()["tokens_per_s_per_chip"] for o in outcomes
            if golden.is_moe(o.row) and f" {cut}" in o.row.label and o.row.model.startswith(family)
            and o.row not in golden_rows.NEURON_ENGINE_ROWS and o.row not in golden_trtllm_v1.TRTLLM_V1_ROWS}


def test_a_mixture_of_experts_on_one_gpu_one_row_fits_the_experts_decode_weight_passes(outcomes):
    # Qwen3 30B A3B (128 experts, top-8) on one B200 or GB200, NVFP4. One row fits the experts' decode weight passes
    # (fitted.EXPERT_DECODE, Blackwell's entry: its 1000/1000 iterations are decode-heavy, ~800 sequences); the
    # other eleven test it, with the experts' grouped GEMM streaming every expert in one kernel and its FP4 compute at
    # the published MoE layer's rate (fitted.EXPERT_GEMM_FP4, derived from a kernel benchmark, not fitted). The nine
    # bounded rows are within 13 % (1024/32768 on GB200 12 % slow, the rest within 10 %); GB200's 1000/1000 and
    # 1024/1024 are 25-28 % fast (published below B200's, against every other length of the table:
    # golden.CONTRADICTED). The bounds below are the model as it stands (a regression check).
    moe = _moe(outcomes, "TP1")
    assert len(moe) == 12
    fit = [label for label in moe if golden.role(next(r for r in golden.ALL_ROWS if r.label == label)) != "test"]
    assert fit == ["TRT-LLM qwen3-30b-a3b B200 TP1 1000/1000"] and abs(moe[fit[0]]) <= 0.01
    bounded = {k: e for k, e in moe.items() if k not in golden.CONTRADICTED and k not in fit}
    assert len(bounded) == 9 and all(abs(e) <= 0.13 for e in bounded.values()), bounded
    assert statistics.median(abs(e) for e in bounded.values()) <= 0.08, bounded
    for label in ("1000/1000", "1024/1024"):  # the contradiction: published GB200 below B200, modelled above
        published = {kind: r.published["tokens_per_s_per_chip"] for r in golden.ALL_ROWS for kind in ("B200", "GB200")
                     if r.label == f"TRT-LLM qwen3-30b-a3b {kind} TP1 {label}"}
        assert published["GB200"] < published["B200"]


def test_the_experts_decode_weight_passes_fitted_on_30b_carry_to_235b_expert_parallel(outcomes):
    # Out of sample: the figure fitted on one Qwen3 30B row on one GPU, applied to Qwen3 235B A22B with attention data
    # parallel and expert parallel ranks (DEP4 on B200, GB200 and H200, DEP8 on H100; Hopper inherits Blackwell's
    # figure), with the experts' FP4 GEMMs at the published MoE layer's rate on Blackwell (fitted.EXPERT_GEMM_FP4).
    # Without the decode figure these rows were 13-95 % fast; before the MoE layer's rate the prefill-heavy rows
    # (8192/1024, 32768/1024) were 14-35 % fast on every kind. Now every Blackwell row is within 11 % and Hopper's
    # decode-heavy rows within 22 % (H200 DEP4 1000/1000 and 1024/1024 21.5 % slow since the rows run trtllm-bench's
    # engine and the figure was refitted under it: 0.0525 -> 0.0625); Hopper's prefill-heavy rows (H200 FP8) stay
    # 26-30 % fast: the published Hopper
    # figures (DeepGEMM's grouped GEMMs, vLLM's Triton MoE layer) bracket the dense FP8 rate the experts keep and give
    # no rate for TensorRT-LLM's layer, and no one Hopper row fits a decode figure of its own that the others keep
    # (docs/serving.md). Bounds: the model as it stands, not the goal.
    rows = _moe(outcomes, "DEP")
    assert len(rows) == 19
    blackwell = {k: e for k, e in rows.items() if " B200 " in k or " GB200 " in k}
    assert len(blackwell) == 11 and all(abs(e) <= 0.11 for e in blackwell.values()), blackwell
    hopper_prefill = {k: e for k, e in rows.items() if k not in blackwell and k.endswith(("8192/1024", "32768/1024"))}
    assert len(hopper_prefill) == 2 and all(0 < e <= 0.32 for e in hopper_prefill.values()), hopper_prefill
    rest = {k: e for k, e in rows.items() if k not in blackwell and k not in hopper_prefill}
    assert len(rest) == 6 and all(abs(e) <= 0.22 for e in rest.values()), rest
    assert statistics.median(abs(e) for e in rows.values()) <= 0.07


def test_expert_parallel_rows_keep_the_published_order_of_systems_and_lengths(outcomes):
    # Qwen3 235B A22B with attention data parallel and expert parallel ranks (DEP4/DEP8): no accuracy bound is claimed
    # (the test above). What a what-if compares holds: per length the published order of systems (GB200, B200, H200,
    # H100 per GPU), and per system the order of lengths (1024/1024 left out there: within 1 % of 1000/1000 as
    # published).
    rows = [o for o in outcomes if o.row.model == "qwen3-235b-a22b" and " DEP" in o.row.label]
    assert len(rows) == 19
    table = {(o.row.rack.split(":")[0], o.row.label.rsplit(" ", 1)[1]):
             (o.row.published["tokens_per_s_per_chip"], o.modelled["tokens_per_s_per_chip"]) for o in rows}
    for length in {k[1] for k in table}:
        present = [(kind, *table[kind, length]) for kind in ("gb200", "b200", "h200", "h100") if (kind, length) in table]
        assert [p[0] for p in sorted(present, key=lambda p: -p[1])] == [p[0] for p in sorted(present, key=lambda p: -p[2])]
    for kind in {k[0] for k in table}:
        present = [(length, *table[kind, length]) for length in {k[1] for k in table} - {"1024/1024"}
                   if (kind, length) in table]
        assert [p[0] for p in sorted(present, key=lambda p: -p[1])] == [p[0] for p in sorted(present, key=lambda p: -p[2])]


def test_gpt_oss_a_mixed_checkpoint_tests_every_factor_and_fits_none(outcomes):
    # GPT-OSS 120B and 20B (MXFP4 experts, BF16 attention, embedding and head; the KV cache BF16 on Hopper, FP8 on
    # Blackwell as the perf-overview's options set it) on every kind the table gives: 44 test rows of a family no
    # factor was fitted on. The bounds are the model as it stands (a regression check), not issue 30's goal, under
    # trtllm-bench's engine with TensorRT-LLM's cache (sliding layers allocated for the whole sequence, attention over
    # the window): Blackwell 120B 14 % slow to 46 % fast, 20B 16 % slow to 31 % fast (the prefill-heavy rows fast);
    # Hopper 120B H200 within 15 % and H100 DEP4 23-75 % fast; 20B on Hopper within 31 % (docs/serving.md). Priced with
    # every weight in the row's one precision and an FP8 KV cache (before mixed checkpoints), the H100 DEP4 rows were
    # 71-141 % fast and the Blackwell ones 16-40 % slow.
    rows = _moe(outcomes, "", "gpt-oss")
    assert len(rows) == 44 and all(golden.role(r) == "test" for r in golden.ALL_ROWS if r.label in rows)
    assert all(r.precision in (golden_rows.GPT_OSS_HOPPER, golden_rows.GPT_OSS_BLACKWELL)
               for r in golden.ALL_ROWS if r.label in rows)

    def within(part: str, low: float, high: float) -> None:
        chosen = {k: e for k, e in rows.items() if part in k}
        assert chosen and all(low <= e <= high for e in chosen.values()), (part, chosen)
    for kind in ("B200", "GB200"):
        within(f"gpt-oss-120b {kind} ", -0.15, 0.47)
        within(f"gpt-oss-20b {kind} ", -0.16, 0.32)
    within("gpt-oss-120b H200 ", -0.15, 0.12)
    within("gpt-oss-120b H100 ", 0.22, 0.76)
    within("gpt-oss-20b H", -0.13, 0.31)


def test_llama4_maverick_rows_test_the_interleaved_shape(outcomes):
    # Llama 4 Maverick (TensorRT-LLM perf-overview, DEP4 on B200 and GB200 in NVFP4, DEP8 on H200 in FP8): MoE layers
    # every second layer (a dense MLP of 16384 between), a shared expert, chunked attention on 3 of 4 layers. No
    # factor is fitted on them. Read as every layer sparse (the shape before), every row was 37-59 % slow (median
    # 50 %). With the interleaved shape and TensorRT-LLM's cache (chunked attention on context requests only: decode
    # attends to the whole cache, every layer allocated for the whole sequence) the Blackwell rows are 16-37 % slow
    # and H200's within 10 % but its long outputs: 1024/8192 +80 % (published 0.28x its 1024/1024, where every other
    # system and model of the table is 0.43-0.46x) and 1024/32768 +13 %. Bounds: the model as it stands, not the goal.
    rows = {o.row.label: o for o in outcomes if o.row.model == "llama4-maverick" and o.row.label.startswith("TRT-LLM")}
    assert len(rows) == 17 and all(golden.role(o.row) == "test" for o in rows.values())
    errors = {label: o.errors()["tokens_per_s_per_chip"] for label, o in rows.items()}
    assert all(-0.37 <= e <= -0.15 for label, e in errors.items() if "H200" not in label), errors
    assert all(abs(errors[f"TRT-LLM llama4-maverick H200 DEP8 {length}"]) <= 0.14
               for length in ("1000/1000", "1024/1024", "8192/1024", "1024/32768")), errors
    for length in {label.rsplit(" ", 1)[1] for label in rows}:
        present = [o for o in rows.values() if o.row.label.endswith(" " + length)]
        published = sorted(present, key=lambda o: -o.row.published["tokens_per_s_per_chip"])
        assert published == sorted(present, key=lambda o: -o.modelled["tokens_per_s_per_chip"]), length


def test_mlperf_rows_of_later_rounds_test_the_factors_fitted_on_v41_h100(outcomes):
    # MLPerf Inference v5.1 (NVIDIA's B200, GB200 and GB300 systems in NVFP4: Llama 2 70B, Llama 3.1 405B and 8B) and
    # v4.1 H200 (FP8) rows, and one partner's v5.1 H200 Mixtral 8x7B: 16 test rows, none fitted. The dense ones are
    # within 20 % (the test above); the bounds here are the model as it stands (a regression check): 8B Offline and
    # GB300 405B Offline 19-20 % fast, Mixtral 19-29 % slow (47 % before its decode's weight passes stopped at one
    # 128-row MMA tile an expert: fitted on Qwen3 30B's ~90 rows an expert, they were charged at Mixtral's 170-280 too;
    # docs/serving.md).
    rows = {o.row.label: o for o in outcomes if o.row.label.startswith("MLPerf") and golden.role(o.row) == "test"}
    assert len(rows) == 16
    for label, o in rows.items():
        # Each output length is the run's tokens per sample (the summary's two figures the source quotes) within the
        # engine's output limit (Llama 3.1 8B's summaries count 129 tokens a sample against max_output_len 128).
        source = o.row.source.replace(",", "")
        tokens, samples = map(float, re.search(r"\(([\d.]+) tokens/s ([\d.]+) samples/s", source).groups())
        most = int(re.search(r"up to (\d+) tokens", source).group(1))
        assert tokens == o.row.published["tokens_per_s"], label
        assert o.row.workload.lengths[0][1] == min(round(tokens / samples), most), label
        assert o.row.limits is None if o.row.workload.rate is None else set(o.row.limits) == {"ttft_p99", "tpot_p99"}
    errors = {label: o.errors()["tokens_per_s"] for label, o in rows.items()}
    mixtral = {k: e for k, e in errors.items() if "Mixtral" in k}
    assert len(mixtral) == 2 and all(-0.30 <= e <= -0.15 for e in mixtral.values()), mixtral
    dense = [abs(e) for k, e in errors.items() if k not in mixtral]
    assert len(dense) == 14 and max(dense) <= 0.20 and statistics.median(dense) <= 0.05, errors
    # Server rows: the modelled p99 latencies against the published run's limits (each run met them). Every dense
    # one is met but Llama 3.1 405B on 8 B200 (modelled TTFT p99 ~7.8 s against 6 s: its 9,429-token prompts cross
    # a TP4 replica in 2,048-token chunks).
    unmet = {k for k, o in rows.items() if not all(ok for _, _, ok in o.limits_met.values())}
    assert unmet == {"MLPerf v5.1 405B Server 8xB200", "MLPerf v5.1 Mixtral Server 8xH200 (ASUSTeK)"}, unmet


def test_tensorrt_llm_1_0_tables_test_every_factor_and_fit_none(outcomes):
    # Section V: TensorRT-LLM 1.0's throughput tables (the release before the one sections B, E, L and R read), ten
    # length pairs from 128/128 to 20000/2000 for Llama 3.1 8B (one H100 or H200, FP8), Llama 3.3 70B (one B200, GB200
    # or H200, two H100), Llama 3.1 405B (four B200 or GB200 in NVFP4, eight H200 or H100 in FP8) and Qwen3 30B A3B on
    # one B200 or GB200: 117 figures, each the run's total output tokens/s, none fitted, the three cells repeating a fit
    # row's configuration and lengths left out. The bounds are the model as it stands (a regression check), not issue
    # 30's goal: the dense figures' median 5.4 %, every one within 29 % (Llama 3.1 405B's long outputs on Blackwell
    # 15-29 % fast, on eight H100 up to 23 %; 8B and 70B within 14 %); Qwen3 30B A3B on B200 within 11 % but its
    # short-output lengths (128/128 52 %, 2048/128 42 %, 5000/500 23 % fast), and on GB200 11 % slow to 170 % fast: the
    # page has GB200 below B200 at seven of its ten lengths, the same GPU with more memory bandwidth, where the
    # model's order follows the chips (docs/serving.md).
    rows = {o.row.label: o for o in outcomes if o.row in golden_trtllm_v1.TRTLLM_V1_ROWS}
    assert len(rows) == 117 and all(golden.role(o.row) == "test" for o in rows.values())
    fit = {(r.model, r.rack, r.workload.lengths[0]) for rows_ in golden.FIT_ROWS.values() for r in rows_
           if r.label.startswith("TRT-LLM")}  # the fit rows trtllm-bench ran (NIM's 5000/500 is another client)
    assert not {(o.row.model, o.row.rack, o.row.workload.lengths[0]) for o in rows.values()} & fit
    for (model, kind, tp, precision), values in golden_trtllm_v1.V1_TABLES.items():
        for (isl, osl), value in zip(golden_trtllm_v1.V1_PAIRS, values):
            label = f"TRT-LLM 1.0 {model} {kind.upper()} TP{tp} {isl}/{osl}"
            assert (label in rows) == ((model, kind, isl, osl) not in golden_trtllm_v1.V1_LEFT_OUT), label
            if label in rows:
                row = rows[label].row
                assert row.published == {"tokens_per_s": value} and row.rack == f"{kind}:{tp}"
                assert row.workload.requests == golden_trtllm_v1.V1_REQUESTS[isl, osl]
                assert golden_trtllm_v1.V1_CHECKPOINTS[model, precision] in row.source
    errors = {label: o.errors()["tokens_per_s"] for label, o in rows.items()}
    dense = {k: e for k, e in errors.items() if not golden.is_moe(rows[k].row)}
    assert len(dense) == 98 and max(map(abs, dense.values())) <= 0.29, dense
    assert statistics.median(map(abs, dense.values())) <= 0.06, dense
    assert all(abs(e) <= 0.14 for k, e in dense.items() if "405b" not in k), dense
    moe = {k: e for k, e in errors.items() if k not in dense}
    b200 = {k: e for k, e in moe.items() if " B200 " in k}
    assert len(b200) == 9 and all(abs(e) <= 0.11 for k, e in b200.items()
                                  if not k.endswith(("128/128", "2048/128", "5000/500"))), b200
    assert all(-0.12 <= e <= 1.71 for e in moe.values()), moe
    gb200, b200_table = (golden_trtllm_v1.V1_TABLES["qwen3-30b-a3b", kind, 1, "fp4"] for kind in ("gb200", "b200"))
    assert sum(g < b for g, b in zip(gb200, b200_table)) == 7  # as published: GB200 below B200 at 7 of 10 lengths
    # What a what-if compares holds for the dense models: per model and lengths the published order of the kinds
    # (B200, GB200, H200, H100), but where two published figures lie within 2 % of each other.
    by_length: dict = {}
    for o in rows.values():
        if not golden.is_moe(o.row):
            by_length.setdefault((o.row.model, o.row.workload.lengths[0]), []).append(
                (o.row.published["tokens_per_s"], o.modelled["tokens_per_s"]))
    for key, pairs in by_length.items():
        for (p1, m1) in pairs:
            for (p2, m2) in pairs:
                if p1 > 1.02 * p2:
                    assert m1 > m2, key


def test_nim_8b_curves_fit_the_frontend_time_on_one_row_and_test_the_rest(outcomes):
    # Section W: NIM 1.8.0 serving Llama 3.1 8B on one H100 (FP8) under 1-250 clients at five length pairs, 120
    # figures. One row's output tokens/s (200/200, 250 clients) fits NIM's frontend time per streamed token
    # (fitted.NIM_HOST_PER_TOKEN, 67 us, overlapped with the GPU); before it the modelled throughput went on rising
    # past ~13,000 tokens/s, where the published one saturates at every decode-heavy length, 62 % fast at 200/200 with
    # 250 clients. The bounds are the model as it stands (a regression check), not issue 30's goal.
    rows = {o.row.label: o for o in outcomes if o.row in golden_nim.NIM_8B_ROWS}
    assert len(rows) == 40
    assert all(o.row.engine.host_per_token == fitted.NIM_HOST_PER_TOKEN.value for o in rows.values())
    assert {label for label, o in rows.items() if golden.role(o.row) != "test"} == {fitted.NIM_FIT_ROW}
    assert golden.fit_host_per_token() == fitted.NIM_HOST_PER_TOKEN.value  # the stored figure is the grid's optimum
    tests = {label: o.errors() for label, o in rows.items() if label != fitted.NIM_FIT_ROW}
    throughput = [abs(e["tokens_per_s"]) for e in tests.values()]
    itl = [abs(e["tpot_p50"]) for e in tests.values()]
    assert max(throughput) <= 0.19 and statistics.median(throughput) <= 0.05, tests
    assert max(itl) <= 0.21 and statistics.median(itl) <= 0.07, tests
    # TTFT in a closed loop is what Little's law leaves once the decode is paid: each request takes
    # c x osl / throughput, so TTFT ~ c x osl / throughput - (osl - 1) x ITL, published (within 10 % of the latency:
    # AIPerf's rounded ITL, and the saturated 20000/2000 runs' drain) and modelled alike. With long outputs it is the
    # small difference of two large terms, so its error is the ITL's times (osl - 1) x ITL / TTFT: 22x at 1000/1000
    # and 25 clients.
    for table in (golden_nim.NIM_8B_TABLE, golden_nim.NIM_70B_TABLE):
        for (isl, osl), points in table.items():
            for c, ttft, itl_ms, tps in points:
                latency = c * osl / tps
                assert abs(latency - (osl - 1) * itl_ms / 1e3 - ttft / 1e3) <= 0.1 * latency, (isl, osl, c)
    one = rows["NIM 1xH100 8B 1000/1000 c25"]
    amplification = 999 * one.row.published["tpot_p50"] / one.row.published["ttft_p50"]
    assert 21 < amplification < 23
    # At one client there is no queue: TTFT is one prompt's prefill, within 45 % (the 200- and 500-token prompts, a
    # few milliseconds, fast; 1,000 and more within 12 %).
    single = {label: e["ttft_p50"] for label, e in tests.items() if label.endswith(" c1")}
    assert len(single) == 5 and all(abs(e) <= 0.45 for e in single.values()), single
    assert all(abs(e) <= 0.12 for label, e in single.items()
               if not label.startswith(("NIM 1xH100 8B 200/", "NIM 1xH100 8B 500/"))), single
    # The rest of the 70B curve (two H100, TP2; four more lengths, and 5000/500 past 100 clients): 34 test rows, whose
    # iterations stream at most 250 tokens, under NIM's frontend time (no figure moves without it). Output tokens/s
    # median 3 %, all but one within 20 % (500/2000 at 150 clients 24 % fast), ITL within 20 %.
    big = {o.row.label: o.errors() for o in outcomes if o.row in golden_nim.NIM_70B_ROWS}
    assert len(big) == 34 and all(golden.role(r) == "test" for r in golden_nim.NIM_70B_ROWS)
    throughput = [abs(e["tokens_per_s"]) for e in big.values()]
    assert max(throughput) <= 0.25 and statistics.median(throughput) <= 0.04, big
    assert all(abs(e["tpot_p50"]) <= 0.2 for e in big.values()), big


def test_mlperf_server_meets_its_latency_constraints(outcomes):
    server = next(o for o in outcomes if o.row.limits)
    assert set(server.limits_met) == {"ttft_p99", "tpot_p99"}
    assert all(ok for _, _, ok in server.limits_met.values()), server.limits_met


def test_every_factor_names_its_fit_rows_and_no_row_that_tests_it():
    # NIM's frontend time is an engine figure fitted on its own row (test_nim_8b_curves_... below), not an entry
    assert set(fitted.FITTED) | {"nim"} == set(golden.FIT_ROWS) == {"gpu", "blackwell", "trainium", "trn2", "nim"}
    labels = {r.label for r in golden.ALL_ROWS}
    assert len(labels) == len(golden.ALL_ROWS)
    fit_rows = {r.label for rows in golden.FIT_ROWS.values() for r in rows}
    test_rows = labels - fit_rows
    assert {golden.role(r) for r in golden.ALL_ROWS if r.label in test_rows} == {"test"}
    nim = fitted.NIM_HOST_PER_TOKEN
    named = {label for label in labels if f"({label})" in nim.source}  # parenthesised: "c25" is a prefix of "c250"
    assert named == {r.label for r in golden.FIT_ROWS["nim"]} and nim.status == "calibrated"
    for entry, eff in fitted.FITTED.items():
        own = {r.label for r in golden.FIT_ROWS[entry]}
        for name in golden.FIT_GRID[entry]:
            fig = eff.figures()[name]
            assert fig.status == "calibrated" and "fitted" in fig.source, (entry, name)
            named = {label for label in labels if label in fig.source}
            assert named == own, (entry, name, named)
        # Whatever an entry does not fit is another entry's figure or a stated assumption, never a test row's fit.
        for name, fig in eff.figures().items():
            assert not any(label in fig.source for label in test_rows), (entry, name)
    assert fitted.TRN2.attention.status == "projected" and fitted.TRN2.attention.source.startswith("assumption")
    assert fitted.BLACKWELL.gemm is fitted.GPU.gemm and fitted.BLACKWELL.iteration is fitted.GPU.iteration


def test_the_same_factors_serve_every_row_of_an_entry_and_inheritors_say_so():
    # No row carries its own constant: a row holds only what its source states.
    import dataclasses

    assert [f.name for f in dataclasses.fields(golden.GoldenRow)] == [
        "label", "model", "rack", "parallel", "precision", "workload", "published", "source", "limits", "engine",
        "prompt_bucket", "note"]
    assert fitted.serving_efficiency("h100") is fitted.serving_efficiency("h200") is fitted.GPU
    assert fitted.serving_efficiency("b200") is fitted.serving_efficiency("gb300") is fitted.BLACKWELL
    assert fitted.serving_efficiency("trn2") is fitted.serving_efficiency("trn4") is fitted.TRN2
    assert fitted.serving_efficiency("trn1") is fitted.TRAINIUM
    assert fitted.BLACKWELL.label("gb300") == "inherited from the blackwell entry (fitted on b200 rows)"
    assert fitted.TRN2.label("trn2") == "trn2 entry, fitted on trn2 rows"
    assert fitted.TRN2.label("trn3") == "inherited from the trn2 entry (fitted on trn2 rows)"
    # FP4 GEMMs take the FP4 factor; FP8 and BF16 GEMMs on Blackwell keep the GPU family's.
    assert fitted.BLACKWELL.gemm_factor("fp4") is fitted.BLACKWELL.gemm_fp4
    assert fitted.BLACKWELL.gemm_factor("fp8") is fitted.GPU.gemm
    assert fitted.GPU.gemm_factor("fp4") is fitted.GPU.gemm


def test_a_neuron_prompt_is_padded_to_its_compiled_bucket():
    row = next(r for r in golden.FOUND_ROWS if r.prompt_bucket == 12288)
    assert row.workload.lengths == ((10000, 1500),) and row.modelled_workload().lengths == ((12288, 1500),)
    assert row.modelled_workload().requests == row.workload.requests
    given = golden.ROWS[0]
    assert given.prompt_bucket is None and given.modelled_workload() is given.workload


@pytest.mark.slow
@pytest.mark.parametrize("family", ["trainium", "trn2"])
def test_stored_factors_are_the_fit_optimum(family):
    # Each stored factor beats its grid neighbours on the entry's rows (a coordinate-wise optimum of fit()).
    # The Neuron entries only: their rows model in about a second; the GPU family's eight rows take about eight
    # and Blackwell's three about twenty, many times over; `golden.fit("gpu")` and `golden.fit("blackwell")`
    # re-derive those (they land on the stored ones).
    figures = fitted.FITTED[family].figures()
    stored = {name: figures[name].value for name in golden.FIT_GRID[family]}
    rows = golden.FIT_ROWS[family]
    best = golden.fit_loss(golden._efficiency(family, stored, rows), rows)
    for name, grid in golden.FIT_GRID[family].items():
        i = grid.index(stored[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(grid):
                trial = dict(stored, **{name: grid[j]})
                assert golden.fit_loss(golden._efficiency(family, trial, rows), rows) >= best - 1e-12, (name, grid[j])


@pytest.mark.parametrize("document", ["README.md", "docs/serving.md"])
def test_the_documents_show_this_table(outcomes, document):
    # The table the README and docs/serving.md print is the one these factors give (regenerate it with -s).
    from tests.support import ROOT

    with open(f"{ROOT}/{document}", encoding="utf-8") as f:
        assert golden.table(outcomes) in f.read()
