"""trtllm-bench's engine limits against its heuristic worked by hand, and the rows that use them."""

from __future__ import annotations

import pytest

from planner.serving.golden_rows import ALL_ROWS, MODELS
from planner.serving.model_shape import model_shape
from planner.serving.precision import resolve
from planner.serving.trtllm_bench import UNTUNED_LIMITS, heuristic_limits, stored_elements, trtllm_bench_engine

LLAMA = model_shape(MODELS["llama3.3-70b"])


def test_llama_70b_fp8_on_two_h200_at_8k_1k_by_hand():
    # calc_engine_setting, worked out: 70,553,706,496 FP8 elements = 65.71 GiB; two H200 of 141e9 bytes = 262.64 GiB,
    # 196.93 GiB left; 0.9 of it over (2 x 80 layers x 8 heads x 128 x 1 byte = 160 KiB a token) x 9,216 tokens =
    # 126.0 requests -> batch 32 x ceil(126 / 32) = 128; 126 x (1 + 8) = 1,134 tokens -> the floor of 2,048.
    assert stored_elements(LLAMA, resolve("fp8", "h200")) == 70_553_706_496
    assert heuristic_limits(LLAMA, "h200", resolve("fp8", "h200"), tp=2, pp=1, isl=8192, osl=1024) == (128, 2048)
    engine = trtllm_bench_engine(LLAMA, "h200", resolve("fp8", "h200"), tp=2, isl=8192, osl=1024)
    # without chunked prefill the budget must hold the longest prompt beside a full batch (get_settings)
    assert (engine.max_batch, engine.max_num_tokens, engine.chunked_prefill) == (128, 8192 + 128, False)


def test_nvfp4_checkpoint_counts_half_an_element_a_weight_and_a_scale_per_16():
    fp4 = stored_elements(LLAMA, resolve("fp4", "b200"))
    gemm = LLAMA.gemm_params
    assert fp4 == pytest.approx(gemm * (0.5 + 1 / 16) + (LLAMA.parameters - gemm))


@pytest.mark.parametrize("isl,osl,batch,tokens", [
    # the fine-tune rules: batch >= 64 in steps of 32 below 256, of 128 below 1024, then 256; tokens >= 2048 in steps
    # of 256 below 4096, of 512 below 8192, then 1024, capped at 32,768 before rounding
    (1000, 1000, 640, 2048), (1024, 8192, 128, 2048), (32768, 1024, 64, 2048)])
def test_finetune_rounding_on_h200(isl, osl, batch, tokens):
    got = heuristic_limits(LLAMA, "h200", resolve("fp8", "h200"), tp=2, pp=1, isl=isl, osl=osl)
    assert got == (batch, tokens)
    assert batch >= 64 and tokens >= 2048


def test_a_format_the_heuristic_does_not_know_takes_the_build_defaults():
    assert heuristic_limits(LLAMA, "h200", resolve("float32", "h200"), tp=2, pp=1, isl=1, osl=1) == UNTUNED_LIMITS
    # a mixed checkpoint (GPT-OSS's MXFP4 experts) is no quant_algo the heuristic is tuned for
    mixed = resolve("bfloat16,experts=mxfp4/fp8,kv=fp8", "b200")
    oss = model_shape(MODELS["gpt-oss-120b"])
    assert heuristic_limits(oss, "b200", mixed, tp=2, pp=1, isl=1024, osl=1024) == UNTUNED_LIMITS == (2048, 8192)
    engine = trtllm_bench_engine(oss, "b200", mixed, tp=2, isl=1024, osl=1024)
    assert (engine.max_batch, engine.max_num_tokens) == (2048, 8192)  # max(8192, 1024 + 2048)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="isl, osl"):
        heuristic_limits(LLAMA, "h200", resolve("fp8", "h200"), tp=2, pp=1, isl=0, osl=1024)
    with pytest.raises(ValueError, match="tp: 1 h100 cannot hold"):
        heuristic_limits(LLAMA, "h100", resolve("bfloat16", "h100"), tp=1, pp=1, isl=1024, osl=1024)


def test_every_perf_overview_row_runs_trtllm_bench_s_engine():
    rows = [r for r in ALL_ROWS if r.label.startswith("TRT-LLM")]
    assert len(rows) >= 40
    for r in rows:
        (isl, osl), = set(r.workload.lengths)
        assert not r.engine.chunked_prefill and r.engine.max_num_tokens >= isl + r.engine.batch_limit, r.label


@pytest.mark.parametrize("raw, floor, expected", [
    # finetune_setting's batch rounding: 32s below 256, 128s below 1,024, then 256s, at least 64
    (10, 64, 64), (97, 64, 128), (255.5, 64, 256), (256, 64, 256), (257, 64, 384), (1023, 64, 1024),
    (1025, 64, 1280)])
def test_the_batch_rounding_at_each_range_boundary(raw, floor, expected):
    from planner.serving.trtllm_bench import _finetuned

    assert _finetuned(raw, floor, ((256, 32), (1024, 128), (float("inf"), 256))) == expected
