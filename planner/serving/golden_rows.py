"""The published serving rows the serving model is checked against: their sources, configurations and figures.

Each :class:`~planner.serving.golden_models.GoldenRow` is a published configuration as its source states it (model as
a transformers config from :data:`~planner.serving.golden_models.MODELS`, rack, parallelism, precision, workload, the
engine's limits) and the figures it reports (output tokens/s, TTFT, TPOT). :data:`ROWS` are the given rows of
``reference/inference.md`` (A-D); :data:`FOUND_ROWS` the rows found since (E-K, T, U, and M, MLPerf Inference's, built in
:mod:`planner.serving.golden_mlperf`); :data:`LLAMA4_ROWS` section L; :data:`DEEPSEEK_ROWS` section R, DeepSeek R1
(multi-head latent attention); :data:`TRTLLM_V1_ROWS` section V, TensorRT-LLM 1.0's tables
(:mod:`planner.serving.golden_trtllm_v1`); :data:`NIM_8B_ROWS` and :data:`NIM_70B_ROWS` section W, NIM's Llama 3.1 8B
and Llama 3.3 70B curves (:mod:`planner.serving.golden_nim`);
:data:`CONTRADICTED` the published figures another publication contradicts. :mod:`planner.serving.golden` models
them and fits the serving efficiencies on the rows it names.
"""

from __future__ import annotations

from dataclasses import replace

from planner.serving.engine import Engine
from planner.serving.golden_models import MODELS, GoldenRow
from planner.serving.golden_mlperf import MLPERF_ROWS
from planner.serving.golden_nim import NIM_70B_ROWS, NIM_8B_ROWS, nim_engine
from planner.serving.golden_trtllm_v1 import TRTLLM_V1_ROWS
from planner.serving.model_shape import model_shape
from planner.serving.precision import resolve
from planner.serving.trtllm_bench import trtllm_bench_engine
from planner.serving.workload import Workload



TRTLLM = ("NVIDIA TensorRT-LLM docs/source/developer-guide/perf-overview.md @ 03e27c7d (trtllm-bench throughput, "
          "PyTorch backend, Llama-3.3-70B-Instruct-FP8, every request queued at once)")
MLPERF = ("MLCommons inference_results_v4.1 @ a2f5d66d, closed/NVIDIA DGX-H100_H100-SXM-80GBx8_TRT llama2-70b-99 "
          "(TensorRT 10.2, FP8, TP2 x 4; batch limits 896 Offline, 1024 Server); every request asks for up to 1,024 "
          "new tokens (mlcommons/inference language/llama2-70b/SUT.py gen_kwargs max_new_tokens=1024), which a "
          "guaranteed-no-evict engine reserves")
NIM = "NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, Performance (NIM 1.8.0, AIPerf, 5000 in / 500 out)"
TRTLLM_FP4 = ("NVIDIA TensorRT-LLM docs/source/developer-guide/perf-overview.md @ 03e27c7d (trtllm-bench throughput, "
              "PyTorch backend, nvidia/Llama-3.3-70B-Instruct-FP4: NVFP4 weights and activations, FP8 KV cache; DGX "
              "B200 and GB200 NVL72, TP1; every request queued at once; "
              "https://github.com/NVIDIA/TensorRT-LLM/blob/03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d/docs/source/"
              "developer-guide/perf-overview.md)")
NIM_COPY = ("points other than 1 and 25 read from a public copy of the page's table: zivbeker42/llm-guesstimator "
            "tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv (https://github.com/zivbeker42/llm-guesstimator)")
NXDI = ("AWS Neuron docs, NxD Inference tutorials on trn2.48xlarge (aws-neuron/aws-neuron-sdk @ 81ce03ae, "
        "libraries/nxd-inference/tutorials/trn2-llama3.3-70b-tutorial.rst and "
        "trn2-llama3.1-405b-speculative-tutorial.rst, scenario 1 without speculation; "
        "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/nxd-inference/tutorials/): NxD Inference "
        "+ vLLM, BF16, TP 64 NeuronCores at LNC=2 = 16 Trainium2, batch 1, NKI QKV/attention/MLP kernels, sequence "
        "parallelism; LLMPerf, 10,000 input tokens, 50 requests one at a time; published p50 TTFT and inter-token "
        "latency")
NXDI_FIRST = ("AWS Neuron docs, NxD Inference tutorial 'Deploying Llama3.3 70B on Trn2' as first published "
              "(aws-neuron/aws-neuron-sdk @ 06f33784, 2024-12-18, libraries/nxd-inference/tutorials/"
              "trn2-llama3.3-70b-tutorial.rst and llama70b_perf_comparison.csv, scenario 1 without speculation: TTFT p50 "
              "0.5757 s, inter-token latency p50 0.019832 s, 47.5 tokens/s): NxD Inference + vLLM, BF16, TP 64 "
              "NeuronCores at LNC=2 = 16 Trainium2, batch 1, --max-context-length 12288, --seq-len 12800, "
              "--enable-bucketing (default buckets), NKI QKV/attention/MLP kernels, sequence parallelism; LLMPerf, "
              "10,000 input and 1,500 output tokens, 50 requests one at a time")
NEURON = ("AWS Neuron docs, Trn1 inference performance, throughput_data_decoder.csv / latency_data_decoder.csv "
          "(Transformers NeuronX, Neuron 2.18.1, TP 32 NeuronCores, BF16)")


def STATIC(batch: int) -> Engine:
    """A static batch (Transformers NeuronX, not NxD Inference): ``batch`` prompts prefilled together, then decoded
    together."""
    return Engine(chunked_prefill=False, max_batch=batch, max_num_tokens=1 << 30, nxd_inference=False)


def NXDI_STATIC(batch: int) -> Engine:
    """NxD Inference's static batch (its tutorials' runs): :func:`STATIC` under NxD Inference
    (:attr:`Engine.nxd_inference`)."""
    return Engine(chunked_prefill=False, max_batch=batch, max_num_tokens=1 << 30, nxd_inference=True)




_CHECKPOINTS = {("qwen3-30b-a3b", "fp4"): "nvidia/Qwen3-30B-A3B-FP4", ("qwen3-235b-a22b", "fp4"): "nvidia/Qwen3-235B-A22B-FP4",
                ("qwen3-235b-a22b", "fp8"): "nvidia/Qwen3-235B-A22B-FP8",
                ("llama4-maverick", "fp4"): "nvidia/Llama-4-Maverick-17B-128E-Instruct-NVFP4",
                ("llama4-maverick", "fp8"): "nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8"}
_DEP = ("; DEP: attention data parallel over the ranks and the experts divided over them (llm_options "
        "enable_attention_dp: true; trtllm-bench --tp N --ep N)")
_BENCH = ("; the engine trtllm-bench computes when its llm_options set no limits: its heuristic's max_batch_size "
          "and max_num_tokens, no chunked prefill (planner.serving.trtllm_bench)")


def _trtllm(kind: str, tp: int, precision: str, isl: int, osl: int, value: float,
            model: str = "llama3.3-70b", ep: int = 1, note: str = "") -> GoldenRow:
    # perf-overview's requests per length pair ("Preparing a Dataset"): 3000 at 1k/1k, 1500 at 8k/1k and 1k/8k,
    # 1000 at 32k/1k and 1k/32k (1000/1000 is not listed: 1024/1024's 3000, as the given rows).
    requests = {(1000, 1000): 3000, (1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500,
                (32768, 1024): 1000, (1024, 32768): 1000}[isl, osl]
    name = "" if model == "llama3.3-70b" else f"{model} "
    source = TRTLLM if precision == "fp8" else TRTLLM_FP4
    if model != "llama3.3-70b":
        checkpoint = _CHECKPOINTS[model, precision]
        source = (source.replace("nvidia/Llama-3.3-70B-Instruct-FP4", checkpoint) if precision == "fp4" else
                  source.replace("Llama-3.3-70B-Instruct-FP8", checkpoint))
    parallel, cut = ({"tp": tp}, f"TP{tp}") if ep == 1 else ({"ep": ep}, f"DEP{ep}")
    # trtllm-bench is given --tp N --ep N for a DEP row: its heuristic counts the N GPUs as tensor-parallel ones.
    engine = trtllm_bench_engine(model_shape(MODELS[model]), kind, resolve(precision, kind), tp=tp * ep,
                                 isl=isl, osl=osl)
    return GoldenRow(f"TRT-LLM {name}{kind.upper()} {cut} {isl}/{osl}", model, f"{kind}:{tp * ep}", parallel,
                     precision, Workload(isl, osl, requests=requests), {"tokens_per_s_per_chip": value},
                     source + (_DEP if ep > 1 else "") + _BENCH, engine=engine, note=note)


ROWS: tuple[GoldenRow, ...] = (
    _trtllm("h100", 2, "fp8", 1000, 1000, 2209),
    _trtllm("h200", 2, "fp8", 1000, 1000, 2587),
    _trtllm("h100", 2, "fp8", 8192, 1024, 398),
    _trtllm("h200", 2, "fp8", 8192, 1024, 537),
    GoldenRow("MLPerf v4.1 Offline 8xH100", "llama2-70b", "h100:8", {"tp": 2, "replicas": 4}, "fp8",
              Workload(222, 290, requests=24576, max_output_tokens=1024), {"tokens_per_s": 24524.9}, MLPERF,
              engine=Engine(max_batch=896)),
    GoldenRow("MLPerf v4.1 Server 8xH100", "llama2-70b", "h100:8", {"tp": 2, "replicas": 4}, "fp8",
              Workload(222, 290, requests=24576, rate=75, max_output_tokens=1024), {"tokens_per_s": 21605.79},
              MLPERF, limits={"ttft_p99": 2.0, "tpot_p99": 0.2}, engine=Engine(max_batch=1024)),
    GoldenRow("NIM 2xH100 TP2 c1", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
              Workload(5000, 500, concurrency=1, requests=8),
              {"ttft_p50": 0.40677, "tpot_p50": 0.01858, "tokens_per_s": 51.67}, NIM, engine=nim_engine()),
    GoldenRow("NIM 2xH100 TP2 c25", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
              Workload(5000, 500, concurrency=25, requests=250),
              {"ttft_p50": 0.68869, "tpot_p50": 0.03875, "tokens_per_s": 623.4}, NIM, engine=nim_engine()),
    GoldenRow("Neuron trn1 TP16 b4 128/1024", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(128, 1024, concurrency=4, requests=4),
              {"tokens_per_s": 140.51, "ttft_p50": 0.12986, "tpot_p50": 0.02838}, NEURON, engine=STATIC(4)),
    GoldenRow("Neuron trn1 TP16 b4 2048/2048", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(2048, 2048, concurrency=4, requests=4),
              {"tokens_per_s": 120.36, "ttft_p50": 1.66112, "tpot_p50": 0.03233}, NEURON, engine=STATIC(4)),
    GoldenRow("Neuron trn1 TP16 b1 128/1024", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(128, 1024, concurrency=1, requests=1),
              {"tokens_per_s": 40.64, "ttft_p50": 0.0532, "tpot_p50": 0.02448}, NEURON, engine=STATIC(1)),
    GoldenRow("Neuron trn1 TP16 b1 2048/2048", "llama3-70b", "trn1:16", {"tp": 16}, "bfloat16",
              Workload(2048, 2048, concurrency=1, requests=1),
              {"tokens_per_s": 37.70, "ttft_p50": 0.547, "tpot_p50": 0.0262}, NEURON, engine=STATIC(1)),
)
"""The given rows of reference/inference.md (A: TensorRT-LLM, B: MLPerf, C: NIM, D: Neuron)."""


GPT_OSS_HOPPER = "bfloat16,experts=mxfp4/bfloat16"
"""GPT-OSS's checkpoint as TensorRT-LLM runs it on Hopper: MXFP4 experts with BF16 activations (moe_config backend
TRITON), everything else and the KV cache (kv_cache_config dtype auto) BF16 (:mod:`planner.serving.precision`)."""
GPT_OSS_BLACKWELL = "bfloat16,experts=mxfp4/fp8,kv=fp8"
"""GPT-OSS's checkpoint as TensorRT-LLM runs it on Blackwell: MXFP4 experts with MXFP8 activations (moe_config
backend CUTLASS), an FP8 KV cache (kv_cache_config dtype fp8), everything else BF16."""
_CHECKPOINTS.update({(m, p): f"openai/{m}" for m in ("gpt-oss-120b", "gpt-oss-20b")
                     for p in (GPT_OSS_HOPPER, GPT_OSS_BLACKWELL)})
GPT_OSS = ("NVIDIA TensorRT-LLM docs/source/developer-guide/perf-overview.md @ 03e27c7d (trtllm-bench throughput, "
           "PyTorch backend, every request queued at once), GPT-OSS 120B and 20B tables: the checkpoint {checkpoint} "
           "(MXFP4 experts, everything else BF16; GPT-OSS is in neither of the page's FP4 and FP8 model lists, so its "
           "'(FP4)' and '(FP8)' column labels name how the experts run, not another checkpoint), with the page's "
           "GPT-OSS llm_options: CUDA graphs with padding, enable_attention_dp: true, kv_cache_config dtype fp8 "
           "('Hopper: use auto'), moe_config backend CUTLASS ('Hopper: use TRITON'); modelled as {precision} "
           "(TensorRT-LLM examples/models/core/gpt_oss/README.md @ d513eeaf: MoE activations BF16 on Hopper, MXFP8 "
           "on Blackwell; no FP8 KV cache for GPT-OSS on Hopper) "
           "(https://github.com/NVIDIA/TensorRT-LLM/blob/03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d/docs/source/"
           "developer-guide/perf-overview.md)")


def _gpt_oss(kind: str, ep: int, isl: int, osl: int, value: float, model: str) -> GoldenRow:
    """A GPT-OSS row of the perf-overview, through :func:`_trtllm` (the engine every TensorRT-LLM row gets), with
    its checkpoint's precision on the kind's generation and its source."""
    precision = GPT_OSS_BLACKWELL if kind in ("b200", "gb200") else GPT_OSS_HOPPER
    row = _trtllm(kind, 1, precision, isl, osl, value, model, ep=ep)
    return replace(row, source=GPT_OSS.format(checkpoint=f"openai/{model}", precision=f"'{precision}'")
                   + (_DEP if ep > 1 else "") + _BENCH)


VLLM_NEURON = ("AWS Neuron docs, vLLM Neuron EAGLE3 tutorials, the non-speculative baseline "
               "(aws-neuron/aws-neuron-sdk @ 81ce03ae, vllm-neuron/docs/tutorials/{file}, {sdk}; 'representative "
               "numbers' on trn2.48xlarge): the vLLM Neuron plugin (vLLM V1, chunked prefill), BF16, {tp} NeuronCores "
               "at LNC=2 = {chips} Trainium2 (GPT-OSS 120B in BF16 does not fit TP8 and fits TP16: four cores a "
               "chip), {limits}; vllm bench serve, sonnet dataset, --sonnet-input-len 512 --sonnet-output-len 128, "
               "{prompts} prompts at --max-concurrency {concurrency}; its median TTFT, median TPOT and output "
               "throughput")
OPTIMUM_NEURON = ("Hugging Face optimum-neuron vLLM benchmark on {instance} (huggingface/optimum-neuron @ {commit}, "
                  "benchmark/vllm/{files}, {date}): vLLM serving "
                  "optimum-neuron's NxD-derived models (optimum-cli neuron serve), BF16, {cores}, "
                  "batch {batch} (continuous batching, one prompt encoded at a time), "
                  "sequence length 4096 without bucketing (NxDNeuronConfig enable_bucketing False: every prompt is "
                  "encoded padded to 4,096 tokens), on-device sampling; guidellm emulated data, 1,500 +- 150 prompt "
                  "and 250 +- 20 output tokens (benchmark/vllm/benchmark.sh), its 'synchronous' profile (one request "
                  "at a time): TTFT, inter-token latency and output tokens/s")


_NEURON_CORES = {"trn1": ("Trn1", "TP {tp} NeuronCores = {chips} Trainium1 (two NeuronCore-v2 a chip; trn1.32xlarge)"),
                 "trn2": ("Trn2", "TP {tp} NeuronCores at LNC=2 = {chips} Trainium2")}
"""How a Neuron row's tensor-parallel degree counts chips: Trainium1 has two NeuronCores; Trainium2 eight physical
ones, four logical at LNC=2 (devices.neuron)."""


def _optimum_neuron(model: str, folder: str, date: str, tp: int, batch: int, ttft: float, itl: float,
                    tokens_per_s: float, kind: str = "trn2", replicas: int = 1, commit: str = "213224e6",
                    files: str | None = None) -> GoldenRow:
    """An optimum-neuron row's 'synchronous' figures on ``kind`` (Trn1 or Trn2), ``folder``'s single instance or
    ``replicas`` of it behind a load balancer: five requests one at a time model its p50 (each runs alone), every
    prompt encoded at the compiled 4,096 tokens, its contexts one at a time into a batch of ``batch``. One request at
    a time reaches one server, the others idle: a data-parallel row is modelled as that one server."""
    chips = tp // (2 if kind == "trn1" else 4)
    instance, cores = _NEURON_CORES[kind]
    if replicas == 1:
        label, stated = "", f"single-instance/{folder}/.env and vllm-results.csv"
    else:
        label = f" DP{replicas}"
        stated = (f"data-parallel/{folder}/.env, docker-compose-dp{replicas}.yaml (DP {replicas}: {replicas} servers "
                  f"behind nginx, modelled as the one a request reaches) and vllm-results-dp{replicas}.csv")
    files = files or stated
    return GoldenRow(f"optimum-neuron {kind}{label} TP{tp} b{batch} {model} 1500/250", model, f"{kind}:{chips}",
                     {"tp": chips}, "bfloat16", Workload(1500, 250, concurrency=1, requests=5),
                     {"ttft_p50": ttft, "tpot_p50": itl, "tokens_per_s": tokens_per_s},
                     OPTIMUM_NEURON.format(instance=instance, files=files, date=date, batch=batch, commit=commit,
                                           cores=cores.format(tp=tp, chips=chips)),
                     engine=Engine(chunked_prefill=False, max_batch=batch, max_num_tokens=1 << 30, prefill_requests=1,
                                   head_padding=True, static_decode=4096, nxd_inference=True),
                     prompt_bucket=4096)


NEURON_ENGINE_ROWS: tuple[GoldenRow, ...] = (
    # T. Trn2 under the Neuron engines the trn2 entry was not fitted on (it was fitted on NxD Inference under vLLM's
    # V0 loop, 2025): the vLLM Neuron plugin's tutorials (2026) and Hugging Face's optimum-neuron (October 2025).
    # Every row tests; none fits. TTFT and TPOT as the tools report them (TPOT excludes the first token).
    GoldenRow("vLLM Neuron trn2 TP8 c2 llama3.1-8b 512/128", "llama3.1-8b", "trn2:2", {"tp": 2}, "bfloat16",
              Workload(512, 128, concurrency=2, requests=10),
              {"ttft_p50": 0.05107, "tpot_p50": 0.01052, "tokens_per_s": 184.44},
              VLLM_NEURON.format(file="tutorial-eagle3-speculative-decoding-llama-3-1.md", sdk="Neuron SDK 2.32",
                                 tp="TP 8", chips=2, prompts=50, concurrency=2,
                                 limits="--max-num-seqs 2, --max-model-len 2048 (prefill buckets up to 2,048 tokens)"),
              engine=Engine(max_batch=2, max_num_tokens=2048, head_padding=True, nxd_inference=True)),
    GoldenRow("vLLM Neuron trn2 TP16 c1 gpt-oss-120b 512/128", "gpt-oss-120b", "trn2:4", {"tp": 4}, "bfloat16",
              Workload(512, 128, concurrency=1, requests=5),
              {"ttft_p50": 0.25233, "tpot_p50": 0.0070, "tokens_per_s": 112.13},
              VLLM_NEURON.format(file="tutorial-eagle3-speculative-decoding-gpt-oss.md", sdk="Neuron SDK 2.31",
                                 tp="TP 16", chips=4, prompts=30, concurrency=1,
                                 limits="the MXFP4 experts dequantized to BF16 at load (Trn2 has no MXFP4 path), "
                                        "--max-num-seqs 1, --max-model-len 768, --max-num-batched-tokens 512 (one "
                                        "512-token prefill bucket)"),
              engine=Engine(max_batch=1, max_num_tokens=512, head_padding=True, nxd_inference=True)),
    _optimum_neuron("llama3.1-8b", "llama-3.1-8b-trn2", "2025-10-16", 4, 32, 0.19725, 0.022136, 43.53),
    _optimum_neuron("qwen3-32b", "qwen3-32B-trn2", "2025-10-17", 4, 2, 0.77086, 0.032084, 28.44),
    # Qwen3-30B-A3B-Instruct-2507 and Qwen3-235B-A22B-Instruct-2507: the architectures of the rows I and J (only the
    # context length differs).
    _optimum_neuron("qwen3-30b-a3b", "qwen3-30B-A3B-trn2", "2025-10-16", 4, 16, 1.54675, 0.056360, 15.90),
    _optimum_neuron("qwen3-235b-a22b", "qwen3-235B-A22B-trn2", "2025-10-09", 64, 4, 4.58715, 0.032183, 18.70),
    # Llama 4's 40 heads at TP 64: NxD pads them to 64 (ModelShape.padded), replicating the 8 key/value heads
    _optimum_neuron("llama4-maverick", "llama4-Maverick-trn2", "2025-10-09", 64, 8, 1.71382, 0.016941, 41.44,
                    commit="7092ed57", files="llama4-Maverick-trn2/serve-dp1-tp64.env (BATCH_SIZE 8, SEQUENCE_LENGTH "
                    "4096, TENSOR_PARALLEL_SIZE 64, as single-instance/llama4-Maverick-trn2/.env @ e88f553a) and "
                    "vllm-results.csv"),
    _optimum_neuron("llama4-scout", "llama4-Scout-trn2", "2025-10-08", 64, 32, 0.57503, 0.032764, 27.95,
                    commit="c632d675", files="llama4-Scout-trn2/vllm-results.csv (BATCH_SIZE 32, SEQUENCE_LENGTH 4096, "
                    "TENSOR_PARALLEL_SIZE 64: single-instance/llama4-Scout-trn2/.env @ 5996de0f)"),
)
"""T: published Trn2 rows of the Neuron engines the ``trn2`` entry was not fitted on (vLLM Neuron's tutorials,
optimum-neuron's benchmark), each with its configuration: test rows only."""


TRAINIUM_HELD_OUT_ROWS: tuple[GoldenRow, ...] = (
    # U. Trainium rows found for the per-generation check ("fit per-generation factors only where a generation has its
    # own rows ... keep your own held-out rows"), every one a test row. No Trn3 row: no published Trn3 serving figure
    # with its configuration was found (docs/serving.md), so Trn3 stays inherited from the trn2 entry; the Trn2 rows
    # found (optimum-neuron's Llama 4 Maverick and Scout at TP 64) cut 40 attention heads 16 ways, which the model
    # refuses (NxD pads the heads), so none is here. Both rows are optimum-neuron's guidellm benchmark (the T rows' run)
    # on a trn1.32xlarge (huggingface/optimum-neuron @ 213224e6, benchmark/vllm/, files added in commit baad1f96):
    # Trainium1 under an NxD-derived engine where its entry was fitted on Transformers NeuronX.
    # Qwen3-30B-A3B-Instruct-2507 (row I's architecture), one server at TP 32 NeuronCores = 16 Trainium1, batch 8.
    _optimum_neuron("qwen3-30b-a3b", "qwen3-30B-A3B", "2025-09-24", 32, 8, 2.40455, 0.023909, 29.71, kind="trn1"),
    # Llama 3.1 8B Instruct, four servers of TP 8 NeuronCores = 4 Trainium1 each, batch 32 (huggingface/optimum-neuron
    # pull request 970, "a trn1.32xlarge host ... in a TP8 DP4 configuration"): of the file's three synchronous runs
    # (2025-09-22 07:53, 08:51, 10:19: TTFT 477.7, 242.5, 241.8 ms; ITL 26.07, 26.57, 26.65 ms), the middle one.
    _optimum_neuron("llama3.1-8b", "llama3.1-8b", "2025-09-22 08:51", 8, 32, 0.24250, 0.026572, 36.19, kind="trn1",
                    replicas=4),
)
"""U: Trainium1 rows of optimum-neuron's benchmark (a mixture of experts and a data-parallel dense model), each with
its configuration: test rows only."""


_GB200_BELOW_B200 = ("published GB200 figure below B200's (every other length of the table has GB200 above B200, as "
                     "its chip figures do); kept as published")


FOUND_ROWS: tuple[GoldenRow, ...] = (
    # E. TensorRT-LLM perf-overview, Llama 3.3 70B, the Blackwell NVFP4 columns (B200 and GB200, TP1).
    *(_trtllm(kind, 1, "fp4", isl, osl, v) for kind, values in (("b200", (6920, 6842, 3242, 1362, 274)),
                                                                 ("gb200", (7769, 7751, 3805, 1491, 302)))
      for (isl, osl), v in zip(((1000, 1000), (1024, 1024), (1024, 8192), (8192, 1024), (32768, 1024)), values)),
    # I. The same table's Qwen3 30B A3B (a mixture of experts: 128 experts, top-8) NVFP4 columns, TP1: a model family
    # no factor was fitted on (all six lengths).
    *(_trtllm(kind, 1, "fp4", isl, osl, v, "qwen3-30b-a3b",
              note=_GB200_BELOW_B200 if kind == "gb200" and osl == isl else "")
      for kind, values in (("b200", (26971, 26611, 13497, 4494, 5735, 1265)),
                           ("gb200", (22856, 22201, 14272, 4925, 6201, 1380)))
      for (isl, osl), v in zip(((1000, 1000), (1024, 1024), (1024, 8192), (1024, 32768), (8192, 1024), (32768, 1024)),
                               values)),
    # J. The same table's Qwen3 235B A22B columns: expert parallelism with attention data parallelism (DEP4 on B200
    # and GB200 in NVFP4, on H200 in FP8; DEP8 on H100 in FP8).
    *(_trtllm(kind, 1, precision, isl, osl, v, "qwen3-235b-a22b", ep=ep)
      for kind, ep, precision, values in (
          ("b200", 4, "fp4", {(1000, 1000): 5764, (1024, 1024): 5756, (1024, 8192): 3389, (1024, 32768): 1255,
                              (8192, 1024): 1410, (32768, 1024): 319}),
          ("gb200", 4, "fp4", {(1000, 1000): 6172, (1024, 1024): 5862, (1024, 8192): 3423, (8192, 1024): 1464,
                               (32768, 1024): 333}),
          ("h200", 4, "fp8", {(1000, 1000): 3288, (1024, 1024): 3268, (1024, 8192): 1417, (8192, 1024): 627,
                              (32768, 1024): 134}),
          ("h100", 8, "fp8", {(1000, 1000): 1932, (1024, 1024): 1935, (1024, 8192): 873}))
      for (isl, osl), v in values.items()),
    # K. The same table's GPT-OSS 120B (128 experts, top-4; DEP2 on B200, TP1 on GB200 and H200, DEP4 on H100) and
    # 20B (32 experts, top-4; TP1 on every kind) columns: a mixed checkpoint (MXFP4 experts, BF16 attention, KV cache
    # as the options set it), a model family no factor was fitted on.
    *(_gpt_oss(kind, ep, isl, osl, v, model)
      for model, columns in (
          ("gpt-oss-120b", (("b200", 2, (25943, 25870, 17289, 6279, 6111, 1392)),
                            ("gb200", 1, (27198, 26609, 14800, 5556, 6835, 1645)),
                            ("h200", 1, (6868, 6798, 3543, None, 1828, 519)),
                            ("h100", 4, (4685, 4715, None, 1177, 1169, 333)))),
          ("gpt-oss-20b", (("b200", 1, (53812, 53491, 34702, 14589, 11904, 2645)),
                           ("gb200", 1, (55823, 56528, 38100, 16463, 12941, 2905)),
                           ("h200", 1, (13858, 13890, 12743, None, 4015, 915)),
                           ("h100", 1, (11557, 11403, 8617, None, 3366, 785)))))
      for kind, ep, values in columns
      for (isl, osl), v in zip(((1000, 1000), (1024, 1024), (1024, 8192), (1024, 32768), (8192, 1024), (32768, 1024)),
                               values) if v is not None),
    *MLPERF_ROWS,
    # F. The same table's other H200 TP2 FP8 points.
    _trtllm("h200", 2, "fp8", 1024, 1024, 2582),
    _trtllm("h200", 2, "fp8", 1024, 8192, 2009),
    _trtllm("h200", 2, "fp8", 32768, 1024, 120),
    # H. NIM's curve at its other concurrencies (the page of the given rows C; read through a public copy of its table:
    # zivbeker42/llm-guesstimator tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv).
    *(GoldenRow(f"NIM 2xH100 TP2 c{c}", "llama3.3-70b", "h100:2", {"tp": 2}, "fp8",
                Workload(5000, 500, concurrency=c, requests=10 * c),
                {"ttft_p50": ttft, "tpot_p50": itl, "tokens_per_s": tps}, NIM + "; " + NIM_COPY, engine=nim_engine())
      for c, ttft, itl, tps in ((5, 0.5467, 0.02183, 218.48), (50, 0.83451, 0.05973, 814.37),
                                (100, 7.99625, 0.09291, 917.26))),
    # G. AWS's Trn2 tutorials (LLMPerf inter-token latency p50 as TPOT: the Neuron guide's patch excludes the TTFT).
    # LLMPerf sent 50 identical requests one at a time; five model the same p50 (each runs alone) at a tenth the cost.
    GoldenRow("NxDI trn2 TP64 b1 10000/1500", "llama3.3-70b", "trn2:16", {"tp": 16}, "bfloat16",
              Workload(10000, 1500, concurrency=1, requests=5), {"ttft_p50": 0.81428, "tpot_p50": 0.01966},
              NXDI + "; Llama-3.3-70B-Instruct, context-encoding buckets 2048/4096/8192/12288", engine=NXDI_STATIC(1),
              prompt_bucket=12288),
    # The Llama 3.3 70B tutorial as first published (December 2024: the same compile and LLMPerf commands; its default
    # buckets, powers of two from 128 to --max-context-length 12288, pad the prompt to 12288 as well).
    GoldenRow("NxDI trn2 TP64 b1 10000/1500 (Dec 2024)", "llama3.3-70b", "trn2:16", {"tp": 16}, "bfloat16",
              Workload(10000, 1500, concurrency=1, requests=5), {"ttft_p50": 0.57568, "tpot_p50": 0.019832},
              NXDI_FIRST, engine=NXDI_STATIC(1), prompt_bucket=12288,
              note="TTFT p50 575.7 ms; the same configuration republished seven weeks later (the fit row above) "
                   "reports 814.3 ms, and the model lies between the two; its TPOT agrees with the later run"),
    GoldenRow("NxDI trn2 TP64 b1 405B 10000/1785", "llama3.1-405b", "trn2:16", {"tp": 16}, "bfloat16",
              Workload(10000, 1785, concurrency=1, requests=5), {"ttft_p50": 2.44196, "tpot_p50": 0.03793},
              NXDI + "; Llama-3.1-405B-Instruct, context-encoding buckets 2048/4096/10240/12288, p50 output 1,785 "
                     "tokens", engine=NXDI_STATIC(1), prompt_bucket=10240),
    *NEURON_ENGINE_ROWS,
    *TRAINIUM_HELD_OUT_ROWS,
)
"""Published rows found since the given ones, each with its configuration and source: E TensorRT-LLM's
Blackwell NVFP4 columns, I its Qwen3 30B A3B (MoE) NVFP4 columns, J its Qwen3 235B A22B columns (expert parallel,
attention data parallel), K its GPT-OSS 120B and 20B columns (a mixed checkpoint: MXFP4 experts, BF16 attention), F its
other H200 points, H NIM's other concurrencies (requests per point: ten times the
concurrency, as the given rows), G AWS's Trn2 tutorials (and the 70B tutorial as first published), M MLPerf Inference
closed-division systems (v5.1 B200, GB200 and GB300 in NVFP4; v4.1 H200; a partner's v5.1 H200 Mixtral 8x7B), T Trn2
under other Neuron engines (:data:`NEURON_ENGINE_ROWS`), U further Trainium rows (:data:`TRAINIUM_HELD_OUT_ROWS`).
:data:`FIT_ROWS` says which fit an entry, the others test."""

LLAMA4_ROWS: tuple[GoldenRow, ...] = tuple(
    # L. The same table's Llama 4 Maverick columns (perf-overview "LLaMA v4 Maverick"; its llm_options.yml for "Qwen3
    # MoE, Llama4 Maverick": enable_attention_dp: true, CUDA graphs with padding): DEP4 on B200 and GB200 in NVFP4, DEP8
    # on H200 in FP8. A family no factor was fitted on: every row tests.
    _trtllm(kind, 1, precision, isl, osl, v, "llama4-maverick", ep=ep)
    for kind, ep, precision, values in (
        ("b200", 4, "fp4", {(1000, 1000): 11337, (1024, 1024): 11227, (1024, 8192): 5174, (1024, 32768): 2204,
                            (8192, 1024): 3279, (32768, 1024): 859}),
        ("gb200", 4, "fp4", {(1000, 1000): 11828, (1024, 1024): 11905, (1024, 8192): 5508, (1024, 32768): 2300,
                             (8192, 1024): 3444, (32768, 1024): 963}),
        ("h200", 8, "fp8", {(1000, 1000): 4146, (1024, 1024): 4180, (1024, 8192): 1157, (1024, 32768): 679,
                            (8192, 1024): 1276}))
    for (isl, osl), v in values.items())
"""L: TensorRT-LLM's Llama 4 Maverick columns (interleaved dense and MoE layers, a shared expert, chunked attention),
test rows only."""

_CHECKPOINTS.update({("deepseek-r1", "fp4"): "nvidia/DeepSeek-R1-0528-NVFP4-v2",
                     ("deepseek-r1", "fp8"): "deepseek-ai/DeepSeek-R1-0528"})
DEEPSEEK = ("; the page's DeepSeek R1 llm_options: enable_attention_dp with attention_dp_config enable_balance "
            "(batching_wait_iters 0, timeout_iters 60), CUDA graphs with padding, moe_config backend CUTLASS, "
            "kv_cache_config dtype fp8. The FP4 checkpoint quantizes the MoE layers' GEMMs and the attention's output "
            "projection to NVFP4 and keeps the latent projections in BF16 (its model card): modelled as fp4 "
            "throughout, as trtllm-bench's heuristic reads it (quant_algo NVFP4); the FP8 checkpoint is DeepSeek's own "
            "(128x128 block scales), modelled as per-tensor FP8. No multi-token prediction (no speculative_config): "
            "its module is in the checkpoint, counted by the heuristic's engine size only")
DEEPSEEK_ROWS: tuple[GoldenRow, ...] = tuple(
    # R. The same table's DeepSeek R1 0528 columns: multi-head latent attention (a 576-element latent cached a token
    # and layer), 256 routed experts top-8 and a shared one, three dense layers; DEP4 on B200 and GB200 in NVFP4, DEP8
    # on H200 in FP8. A family no factor was fitted on: every row tests.
    replace(row, source=row.source.replace(_DEP + _BENCH, DEEPSEEK + _DEP + _BENCH))
    for row in (_trtllm(kind, 1, precision, isl, osl, v, "deepseek-r1", ep=ep)
                for kind, ep, precision, values in (
                    ("b200", 4, "fp4", {(1000, 1000): 6463, (1024, 1024): 6430, (1024, 8192): 3862,
                                        (1024, 32768): 1451, (8192, 1024): 1168}),
                    ("gb200", 4, "fp4", {(1000, 1000): 6939, (1024, 1024): 6924, (1024, 8192): 4379,
                                         (1024, 32768): 1465, (8192, 1024): 1192}),
                    ("h200", 8, "fp8", {(1000, 1000): 1627, (1024, 1024): 1620, (1024, 8192): 1218,
                                        (1024, 32768): 438}))
                for (isl, osl), v in values.items()))
"""DeepSeek R1 0528's columns of TensorRT-LLM's perf-overview (multi-head latent attention, expert parallel with
attention data parallel), test rows only."""

ALL_ROWS: tuple[GoldenRow, ...] = (ROWS + FOUND_ROWS + LLAMA4_ROWS + DEEPSEEK_ROWS + TRTLLM_V1_ROWS + NIM_8B_ROWS
                                   + NIM_70B_ROWS)
"""Every published row the serving model is checked against."""

CONTRADICTED: dict[str, tuple[str, ...]] = {
    "NxDI trn2 TP64 b1 10000/1500 (Dec 2024)": ("ttft_p50",),
    "TRT-LLM qwen3-30b-a3b GB200 TP1 1000/1000": ("tokens_per_s_per_chip",),
    "TRT-LLM qwen3-30b-a3b GB200 TP1 1024/1024": ("tokens_per_s_per_chip",),
}
"""Row label -> the metrics whose published figure another publication of the same configuration or the same table
contradicts (each row's :attr:`GoldenRow.note` says which): kept as published and shown, held to that contradiction
rather than to a bound."""


def is_moe(row: GoldenRow) -> bool:
    """The row's model is a mixture of experts (a family no serving factor was fitted on)."""
    arch = MODELS[row.model].arch
    return any(arch.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts"))


__all__ = ["ALL_ROWS", "CONTRADICTED", "DEEPSEEK_ROWS", "FOUND_ROWS", "LLAMA4_ROWS", "MODELS", "NEURON_ENGINE_ROWS",
           "ROWS", "STATIC", "TRAINIUM_HELD_OUT_ROWS", "GoldenRow", "is_moe"]
