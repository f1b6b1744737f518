"""Serving efficiencies: what a production inference engine adds to the per-op cost model, fitted.

The per-op cost model (``devices.cost``) prices each kernel from the catalogue's peaks
and bandwidths and efficiency curves calibrated on measured matmuls and copies. A
serving engine's kernels and its host loop are not those: FP8 GEMMs reach another
share of the peak, attention over a paged cache another, and every iteration pays
the scheduler, sampling and the host's synchronisation; and a compute-bound GEMM and a
weight-streaming one are not the same share of their roofs. These factors capture that
per chip family (the same for every model, precision and configuration), each a
:class:`devices.Figure` whose note says which published rows it was fitted to
(:mod:`planner.serving.golden`); the rows that test them were not used.

A chip generation with published rows of its own has its own entry (Blackwell's NVFP4 rows, Trainium2's
NeuronX Distributed Inference rows); the kinds without rows take their generation's or family's entry and
say so (:meth:`ServingEfficiency.label`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

import devices
from devices.figure import Figure


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingEfficiency:
    """Factors on the fused engine's modelled time for one chip family (None: the cost model as is)."""

    family: str
    """The entry's name: a chip family (``gpu``, ``trainium``), a generation (``blackwell``) or a kind."""
    fitted_on: tuple[str, ...] = ()
    """The chip kinds whose published rows the entry was fitted to; other kinds using it inherit it."""
    gemm: Figure | None = None
    """Factor on GEMMs' compute time (every precision unless :attr:`gemm_fp4` is set): what a compute-bound
    prefill reaches."""
    gemm_fp4: Figure | None = None
    """Factor on FP4 (NVFP4 / MXFP4) GEMMs' compute time; None: :attr:`gemm`."""
    memory: Figure | None = None
    """Factor on every kernel's memory time but attention's: streaming the weights in decode, pointwise ops."""
    attention: Figure | None = None
    """Factor on attention time (prefill and decode, over the paged cache)."""
    iteration: Figure | None = None
    """Seconds every engine iteration pays outside the kernels (scheduling, sampling, host synchronisation)."""
    expert_gemm_fp4: Figure | None = None
    """Factor on the routed experts' FP4 grouped-GEMM compute time, on top of :attr:`gemm_fp4` (mixtures of experts
    only): the fused MoE layer (activation quantization, permutation, two grouped GEMMs, activation, finalize) runs at
    a smaller share of the FP4 peak than dense GEMMs of its shapes; None: the dense GEMMs' rate."""
    expert_decode: Figure | None = None
    """Share of an expert's weights streamed again from HBM per decode token routed to it (mixtures of experts
    only): the experts' grouped GEMM at decode runs small token tiles, each streaming its expert's weights, so the
    weight traffic grows with the routed decode tokens (1 / the effective tile); None: the weights once a layer."""

    def figures(self) -> dict[str, Figure]:
        """The fitted figures by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), Figure)}

    def expert_gemm_factor(self, precision: str) -> Figure | None:
        """The factor on the routed experts' grouped-GEMM compute time in the serving ``precision``, on top of
        :meth:`gemm_factor` (None: the dense GEMMs' rate)."""
        return self.expert_gemm_fp4 if precision == "fp4" else None

    def gemm_factor(self, precision: str) -> Figure | None:
        """The factor on GEMM compute time in the serving ``precision``."""
        if precision == "fp4" and self.gemm_fp4 is not None:
            return self.gemm_fp4
        return self.gemm

    def inherited(self, kind: str) -> bool:
        """True when ``kind`` uses this entry without published rows of its own."""
        return devices.chip(kind).kind not in self.fitted_on

    def label(self, kind: str) -> str:
        """How ``kind``'s serving efficiencies were obtained, for reports: ``trn2 entry, fitted on trn2 rows`` or
        ``inherited from the trn2 entry (fitted on trn2 rows)``."""
        on = "/".join(self.fitted_on) or "published"
        if self.inherited(kind):
            return f"inherited from the {self.family} entry (fitted on {on} rows)"
        return f"{self.family} entry, fitted on {on} rows"


_GPU_ROWS = ("TRT-LLM H100 TP2 1000/1000; TRT-LLM H200 TP2 1000/1000; TRT-LLM H100 TP2 8192/1024; "
             "TRT-LLM H200 TP2 8192/1024; MLPerf v4.1 Offline 8xH100; MLPerf v4.1 Server 8xH100; "
             "NIM 2xH100 TP2 c1; NIM 2xH100 TP2 c25")
_TRN_ROWS = ("Neuron trn1 TP16 b4 128/1024; Neuron trn1 TP16 b4 2048/2048; Neuron trn1 TP16 b1 128/1024; "
             "Neuron trn1 TP16 b1 2048/2048")
_SOURCES = ("TensorRT-LLM perf-overview @ 03e27c7d, MLPerf Inference v4.1 (mlcommons/inference_results_v4.1 "
            "@ a2f5d66d), NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, AWS Neuron Trn1 inference performance "
            "(aws-neuron-sdk @ 78169c6c)")
_HOW = ("coordinate descent on planner.serving.golden.FIT_GRID from FIT_START, least squares on "
        "log(modelled/published) over every published figure of those rows (planner.serving.golden.fit); other "
        "published rows test it")


_B200_ROWS = ("TRT-LLM B200 TP1 1000/1000; TRT-LLM B200 TP1 1024/8192; TRT-LLM B200 TP1 8192/1024; "
              "TRT-LLM qwen3-30b-a3b B200 TP1 1000/1000")
_B200_SOURCE = ("TensorRT-LLM perf-overview @ 03e27c7d, Llama 3.3 70B and Qwen3 30B A3B NVFP4 on DGX B200, TP1 "
                "(https://github.com/NVIDIA/TensorRT-LLM/blob/03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d/docs/source/"
                "developer-guide/perf-overview.md)")


def _blackwell(value: float, what: str) -> Figure:
    return Figure(value, "", f"fitted to published serving rows ({_B200_ROWS}); {_B200_SOURCE}", "calibrated",
                  f"{what}; {_HOW}")


EXPERT_DECODE = _blackwell(0.0625, "each decode token routed to an expert streams 0.0625 of the expert's weights "
                                   "again at the HBM bandwidth: one weight pass per 16 routed decode tokens, as the "
                                   "grouped GEMM's small token tiles (TensorRT-LLM's SM100 MoE kernels run 8- to "
                                   "64-token tiles with the weights as the 128-row MMA operand) each stream their "
                                   "expert's weights; fitted on the one Qwen3 30B row (the Llama rows have no experts)")
"""The experts' decode weight passes (up to one 128-row MMA tile of decode rows an expert:
:data:`planner.serving.experts.EXPERT_TILE_ROWS`; the fit row's ~90 rows are under it), fitted on B200's Qwen3 30B
A3B row as trtllm-bench runs it
(:mod:`planner.serving.trtllm_bench`; under the earlier engine of 2,048 sequences and a chunked 2,048-token budget it
was 0.0525); Hopper (the GPU family) inherits it:
fitted on any one Hopper row it moves the other Hopper rows apart (docs/serving.md)."""

MOE_LAYER_SOURCE = ("Hugging Face blog, 'TFLOPS Gap: Why FP4 MoE Kernel Engineering Matters on Blackwell' (2026): an "
                    "NVFP4 MoE layer of hidden 2880, expert width 7680, 32 experts, top-4 on one B200, batch 4096 "
                    "tokens (512 rows an expert): 1117 TFLOPS in vLLM, 1225 with FlashInfer's CuTe DSL kernels, "
                    "1262 in SGLang (https://huggingface.co/blog/apsys/blackwell-nvfp4-comparison, read through "
                    "its public copy at https://api.energit.ir/blog/apsys/blackwell-nvfp4-comparison)")
MOE_LAYER_TFLOPS = 1117e12
"""The published fused MoE layer's effective rate at 512 rows an expert (vLLM's, the lowest of the three backends'
figures); :data:`EXPERT_GEMM_FP4` is the cost model's time for that layer's GEMMs against it."""
MOE_LAYER_SHAPE = {"tokens": 4096, "hidden": 2880, "expert_width": 7680, "experts": 32, "topk": 4}

EXPERT_GEMM_FP4 = Figure(3.33, "", MOE_LAYER_SOURCE, "secondary",
                         "the routed experts' FP4 grouped GEMMs take 3.33x the time of dense FP4 GEMMs of their shapes "
                         "(gemm_fp4 included): the published layer's 1117 TFLOPS (12.4 % of B200's 9 PFLOPS dense FP4 "
                         "peak; its quantization, permutation, activation and finalize passes included, not priced "
                         "apart) against the 3,723 TFLOPS the cost model with gemm_fp4 gives its two GEMMs (gate_up "
                         "512 x 2880 x 15360 and down 512 x 7680 x 2880 an expert). Not fitted on any serving row; "
                         "the other two backends' 1225 and 1262 TFLOPS would give 3.04 and 2.95")
"""The fused MoE layer's measured FP4 rate on B200 against the dense-GEMM model (derived, not fitted: see
:data:`MOE_LAYER_SOURCE`), a factor at every shape as :attr:`ServingEfficiency.gemm_fp4` is; Blackwell only:
Hopper's FP8 experts keep the dense FP8 rate, which the published Hopper figures (DeepGEMM's grouped GEMMs alone,
vLLM's Triton MoE layer) bracket without describing TensorRT-LLM's layer (docs/serving.md)."""


NIM_FIT_ROW = "NIM 1xH100 8B 200/200 c250"
"""The one published row :data:`NIM_HOST_PER_TOKEN` is fitted on (its output tokens/s)."""
NIM_HOST_PER_TOKEN = Figure(
    67e-6, "s",
    f"fitted to the published serving row ({NIM_FIT_ROW}): NVIDIA NIM for LLMs Benchmarking Guide v1.0.0, Performance, "
    "Llama-3.1-8b-instruct, NIM 1.8.0 on one H100 80G, fp8 TP1, 200 in / 200 out tokens, 250 clients "
    "(https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance)", "calibrated",
    "NIM's frontend spends 67 us of host time per token it streams, overlapped with the GPU "
    "(planner.serving.engine.Engine.host_per_token): the published row's 12,965 tokens/s where the kernels alone serve "
    "about 21,000; fitted on that row's output tokens/s alone (grid of whole microseconds, least squares on "
    "log(modelled/published): planner.serving.golden.fit_host_per_token); its TTFT and ITL and every other NIM row "
    "test it")
"""NIM 1.8.0's host time per streamed token (an engine figure, not a chip family's: every NIM row's engine takes it;
trtllm-bench's and MLPerf's harnesses have no streaming frontend)."""


def _fitted(value: float, unit: str, rows: str, what: str) -> Figure:
    return Figure(value, unit, f"fitted to published serving rows ({rows}); {_SOURCES}", "calibrated",
                  f"{what}; {_HOW}")


GPU = ServingEfficiency(
    family="gpu", fitted_on=("h100", "h200"),
    gemm=_fitted(1.35, "", _GPU_ROWS, "GEMMs' compute takes 1.35x the cost model's time (FP8 GEMMs of "
                                     "TensorRT-LLM at about 59 % of the FP8 peak where the model assumes 80 %)"),
    memory=_fitted(1.1, "", _GPU_ROWS, "kernels' memory traffic (weight streaming in decode, pointwise ops) takes "
                                       "1.1x the cost model's time"),
    attention=_fitted(1.0, "", _GPU_ROWS, "attention over the paged KV cache as the cost model prices it (its "
                                          "curve is FlashAttention-2's)"),
    iteration=_fitted(0.0005, "s", _GPU_ROWS, "0.5 ms per engine iteration outside the kernels (scheduling and "
                                              "sampling, mostly hidden by CUDA graphs and overlap)"),
    expert_decode=EXPERT_DECODE,
)
"""The NVIDIA family's serving efficiencies (Hopper-fitted; every NVIDIA kind without a generation entry, and
Blackwell's GEMMs outside FP4, its memory and its time per iteration); its experts' decode weight passes are
inherited from Blackwell's (:data:`EXPERT_DECODE`: no Hopper MoE row is a fit row; a fit on any one moves the others
apart) and its FP8 experts keep the dense rate."""

TRAINIUM = ServingEfficiency(
    family="trainium", fitted_on=("trn1",),
    gemm=_fitted(2.0, "", _TRN_ROWS, "GEMMs' compute under Transformers NeuronX on Trainium1 takes 2x the cost "
                                     "model's time (which assumes 70 % of the dense peak): about 35 % of it"),
    memory=_fitted(1.1, "", _TRN_ROWS, "kernels' memory traffic (weight streaming in decode) takes 1.1x the "
                                        "cost model's time"),
    attention=_fitted(12.0, "", _TRN_ROWS, "attention takes 12x the cost model's time: Neuron's decode TPOT "
                                           "grows with the context far faster than its KV reads (28.4 -> 32.3 ms "
                                           "from 128/1024 to 2048/2048 at batch 4)"),
    iteration=_fitted(0.007, "s", _TRN_ROWS, "7 ms per iteration outside the kernels: the near-constant gap "
                                             "between Neuron's published TPOT and its kernels' time, at batch 1 "
                                             "and 4 alike"),
)
"""The Trainium family's serving efficiencies (fitted on Trainium1 rows, Transformers NeuronX static batches):
Trainium1's, and what a Trainium kind without its own or its generation's entry takes."""

BLACKWELL = replace(
    GPU, family="blackwell", fitted_on=("b200",),
    gemm_fp4=_blackwell(1.7, "NVFP4 GEMMs' compute takes 1.7x the cost model's time, which prices them at the "
                             "BF16-calibrated share (81 %) of the FP4 peak: about 48 % of B200's dense FP4 peak "
                             "where Hopper's FP8 GEMMs reach 60 % of theirs (block-scale handling and the "
                             "activations' quantization to FP4 before every GEMM, which the model does not price "
                             "separately)"),
    expert_gemm_fp4=EXPERT_GEMM_FP4,
    attention=_blackwell(1.3, "attention over the FP8 paged KV cache takes 1.3x the cost model's time (its curve is "
                              "FlashAttention-2's on Hopper): the long-output rows (1024/8192) read the cache "
                              "more slowly than Hopper's FP8 rows did"),
)
"""The Blackwell generation's serving efficiencies (B200, GB200, GB300): the GPU family's, with FP4 GEMMs,
attention and the experts' decode weight passes fitted on B200's NVFP4 rows (three Llama 3.3 70B rows and one Qwen3
30B A3B row; GB200's rows test them; GB300 has no published rows and inherits them).
FP8 and BF16 GEMMs keep the GPU family's factor (no Blackwell FP8 row is among the rows)."""

_TRN2_ROWS = "NxDI trn2 TP64 b1 10000/1500; NxDI trn2 TP64 b1 405B 10000/1785"
_TRN2_SOURCE = ("AWS Neuron NxD Inference tutorials on trn2.48xlarge, Llama 3.3 70B and Llama 3.1 405B, BF16, TP 64 "
                "NeuronCores (aws-neuron/aws-neuron-sdk @ 81ce03ae libraries/nxd-inference/tutorials/; "
                "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/nxd-inference/tutorials/)")


def _trn2(value: float, unit: str, what: str) -> Figure:
    return Figure(value, unit, f"fitted to published serving rows ({_TRN2_ROWS}); {_TRN2_SOURCE}", "calibrated",
                  f"{what}; {_HOW}")


TRN2 = ServingEfficiency(
    family="trn2", fitted_on=("trn2",),
    gemm=_trn2(1.8, "", "GEMMs' compute under NxD Inference on Trainium2 takes 1.8x the cost model's time (which "
                        "assumes 70 % of the dense peak): about 39 % of it on a 10,000-token prefill"),
    memory=TRAINIUM.memory,
    attention=Figure(1.0, "", "assumption (hybrid-interop serving model): NxD Inference runs its NKI flash-attention "
                              "kernel (--attn-kernel-enabled in both Trn2 tutorials)", "projected",
                     "attention as the cost model prices it (FlashAttention-2's curve), not Transformers NeuronX's "
                     "(Trainium1's 12x, which made a 10,000-token prefill 20-66 % too slow); not fitted: two rows "
                     "fit two factors"),
    iteration=_trn2(0.0105, "s", "10.5 ms per iteration outside the kernels: the gap between the published "
                                "inter-token latency and the kernels' time at batch 1 (vLLM's host loop, NxD "
                                "Inference's on-device sampling and synchronisation)"),
)
"""Trainium2's serving efficiencies under NxD Inference (vLLM), fitted on the two published Trn2 rows; Trn3 and
Trn4 (whose tutorials run the same stack) inherit them."""

FITTED: dict[str, ServingEfficiency] = {"gpu": GPU, "blackwell": BLACKWELL, "trainium": TRAINIUM, "trn2": TRN2}
"""Fitted serving efficiencies by entry; each figure's note says what it was fitted to."""

ENTRY: dict[str, str] = {"b200": "blackwell", "gb200": "blackwell", "gb300": "blackwell",
                         "trn2": "trn2", "trn3": "trn2", "trn4": "trn2"}
"""Kinds that take a generation's entry rather than their family's: NVIDIA's Blackwell parts (fifth-generation
tensor cores with NVFP4) and the Trainium generations that serve under NxD Inference (Trn2 onwards)."""


NXD_ENTRY = "trn2"
"""The entry fitted under NxD Inference, which a Trainium kind served by an NxD Inference engine takes
(:attr:`planner.serving.engine.Engine.nxd_inference`): the ``trainium`` entry was fitted under Transformers NeuronX,
whose attention (12x the cost model's) is not NxD's NKI flash attention."""


@lru_cache(maxsize=None)
def serving_efficiency(kind: str, nxd_inference: bool = False) -> ServingEfficiency | None:
    """A kind's serving efficiencies: its own entry, else its generation's (:data:`ENTRY`), else its family's,
    else None; ``nxd_inference``: a Trainium kind takes :data:`NXD_ENTRY` (inherited where it has no rows of its
    own)."""
    chip = devices.chip(kind)
    if nxd_inference and chip.family == "trainium":
        return FITTED.get(NXD_ENTRY)
    return FITTED.get(chip.kind) or FITTED.get(ENTRY.get(chip.kind, "")) or FITTED.get(chip.family)


__all__ = ["BLACKWELL", "ENTRY", "EXPERT_DECODE", "EXPERT_GEMM_FP4", "FITTED", "GPU", "MOE_LAYER_SHAPE",
           "MOE_LAYER_SOURCE", "MOE_LAYER_TFLOPS", "NIM_FIT_ROW", "NIM_HOST_PER_TOKEN", "NXD_ENTRY",
           "TRAINIUM", "TRN2", "ServingEfficiency", "serving_efficiency"]
