"""How the modelled inference engine runs: batching limits, chunked prefill, the paged KV cache, its kernels.

:class:`Engine` is the engine configuration a serving what-if plays; its defaults are
those of the published rows' engines (continuous batching up to 2,048 sequences, as
TensorRT-LLM; a token budget of 2,048 per iteration shared by prefill chunks and decode
tokens, first come first served; a KV cache of 32-token blocks taking 90 % of the memory
left after weights and activations; guaranteed-no-evict admission, TensorRT-LLM's
default, which reserves each sequence's whole length). A static batch (Neuron's
Transformers NeuronX) is ``Engine(chunked_prefill=False, max_batch=B, max_num_tokens=1 << 30)``:
its prompts prefilled together, then decoded together. TensorRT-LLM's published
throughput runs (``trtllm-bench``) have an engine of their own, computed from the model
and the lengths: :func:`planner.serving.trtllm_bench.trtllm_bench_engine`. ``kernels="eager"`` is the engine
``interop.serve`` runs for real: transformers' own forward op by op, one request per
prefill, one copy per layer's keys and values (see :mod:`planner.serving.eager`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.kernels import KERNELS as _KERNELS, check_kernels

KERNELS = tuple(_KERNELS)
"""``fused``: a serving engine's kernels (fused projections, attention over the paged cache, one
launch per kernel); ``eager``: transformers' forward as it runs on the rack, every aten op (the one vocabulary of
:mod:`planner.kernels`)."""

DEFAULT_MAX_BATCH = 2048
"""TensorRT-LLM's default maximum batch size (and MLPerf's Blackwell setting); the KV cache usually
admits fewer (reference/inference.md)."""

DEFAULT_MAX_NUM_TOKENS = 2048
"""Token budget per iteration: within the range MLPerf v5.1's configs use (1,536-3,584) and vLLM's default for
chunked prefill; TensorRT-LLM's build default is 8,192 (reference/inference.md)."""

DEFAULT_KV_FRACTION = 0.90
"""Share of the memory left after weights and activations the KV cache takes (MLPerf v4.1 H100, and
TensorRT-LLM's perf-overview fallback)."""

DEFAULT_BLOCK = 32
"""Tokens per KV cache block (MLPerf v5.1 configs)."""

NXD_MOE_BLOCK = 512
"""Tokens of one block of NxD's blockwise MoE kernel (neuronx-distributed ``modules/moe/model_utils.py``
``DEFAULT_BLOCK_SIZE``; the block size of ``BlockwiseMatmulConfig.default()``), also the pairs below which its
context encoding runs every expert."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Engine:
    """The modelled engine (see the module doc)."""

    kernels: str = "fused"
    """One of :data:`KERNELS`."""
    max_batch: int | None = None
    """Most sequences in flight on one instance; None: :data:`DEFAULT_MAX_BATCH` (the KV cache sets
    the batch that actually runs)."""
    max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS
    """Token budget of one iteration: decode tokens plus prefill chunk tokens."""
    chunked_prefill: bool = True
    """Split prompts longer than the budget over iterations and mix prefill chunks with decode tokens
    (colocated serving); False: each prompt is prefilled whole, prompts entering in arrival order while they fit
    the iteration's budget (its first prompt always enters)."""
    prefill_requests: int | None = None
    """Most prompts in one prefill iteration (None: as many as the budget holds; the eager engine: 1)."""
    kv_fraction: float = DEFAULT_KV_FRACTION
    """Share of the memory left after weights and activations given to the KV cache."""
    block_size: int = DEFAULT_BLOCK
    """Tokens per KV cache block (a sequence reserves whole blocks)."""
    local_cache: bool = False
    """How the engine treats local-attention layers (sliding windows, Llama 4's chunks). False, TensorRT-LLM's way
    (its docs/source/features/long-sequence.md): every layer's KV cache is allocated for the whole sequence ("the memory
    allocation for the kv cache still relies on the buffer's maximum value"), a sliding window limits what attention
    reads, and chunked attention applies to context requests only (decode attends to the whole cache). True (vLLM's
    hybrid KV cache manager): a local layer's cache keeps only its span and every attention sees only the span."""

    head_padding: bool = False
    """Pad the attention heads tensor parallelism does not cut, as NxD Inference does (and the Neuron engines built on
    it: vLLM Neuron, optimum-neuron): :meth:`ModelShape.padded`. False (TensorRT-LLM, vLLM and SGLang on GPUs)
    refuses such a ``tp``."""

    static_decode: int | None = None
    """The sequence length NxD Inference's token-generation graph was compiled for (the Neuron engines built on it run
    static shapes: optimum-neuron without bucketing, NxD Inference's largest bucket): every decode step runs the whole
    compiled batch of ``max_batch`` lines, idle ones padded, and its attention reads each line's cache to this length
    (``modeling_base``'s KV cache is ``max_batch x`` this many tokens, read whole). None (TensorRT-LLM, vLLM and SGLang
    on GPUs): the running sequences only, each over its own cache."""

    host_per_token: float = 0.0
    """Seconds of host work for each token an iteration emits (the serving frontend streaming it to its client:
    detokenizing, the response event), overlapped with the GPU: an iteration takes at least this times the tokens it
    samples. 0 (the default; trtllm-bench and MLPerf's harnesses hand tokens over in process): the kernels' time only.
    NVIDIA NIM 1.8.0's frontend: :data:`planner.serving.fitted.NIM_HOST_PER_TOKEN`, fitted on one published NIM row;
    it is what caps its Llama 3.1 8B at about 13,000 streamed tokens/s on one H100 at any length where the GPU serves
    more (``trtllm-bench``: 15,000-28,000)."""

    nxd_inference: bool | None = None
    """The engine runs NxD Inference's models (NxD Inference itself, and the Neuron engines built on it: vLLM Neuron,
    optimum-neuron). None (the default): on Trainium pools, whose serving stacks all run them, and nowhere else
    (:meth:`nxd_for`); True or False: on every pool (False on Trainium: Transformers NeuronX, or a what-if's GPU-style
    engine). Its routed experts run NxD's ``ExpertMLPs`` (neuronx-distributed ``modules/moe/
    expert_mlps_v2.py``, the same dispatch in every release since 2.21) instead of a grouped GEMM over the experts the
    tokens reach: at token generation, below one routed pair an expert (``tokens x top_k < experts``) each pair loads
    its expert's weights (selective loading), otherwise every expert runs every token; at context encoding, selective
    loading below one pair an expert, every expert below one block of pairs, otherwise the blockwise kernel over
    ``ceil((pairs - (experts - 1)) / block) + experts - 1`` blocks of :data:`NXD_MOE_BLOCK` tokens, each one expert's
    GEMMs over its weights. On Trainium it takes the serving efficiencies fitted under NxD Inference
    (:func:`planner.serving.fitted.serving_efficiency`: the ``trn2`` entry, inherited on Trainium1, whose own entry
    describes Transformers NeuronX)."""

    def __post_init__(self) -> None:
        check_kernels(self.kernels)
        for name in ("max_batch", "prefill_requests"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}: expected a positive integer or None, got {value!r}")
        for name in ("max_num_tokens", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        for name in ("local_cache", "head_padding"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        if self.nxd_inference is not None and not isinstance(self.nxd_inference, bool):
            raise ValueError(f"nxd_inference: expected True, False or None (on Trainium), got {self.nxd_inference!r}")
        if self.head_padding and self.kernels == "eager":
            raise ValueError("head_padding: the eager engine runs the model's own modules, whose heads are not padded; "
                             "pad heads with kernels='fused'")
        if self.static_decode is not None:
            if isinstance(self.static_decode, bool) or not isinstance(self.static_decode, int) or self.static_decode < 1:
                raise ValueError(f"static_decode: expected a positive compiled sequence length or None, "
                                 f"got {self.static_decode!r}")
            if self.max_batch is None:
                raise ValueError("static_decode: a compiled graph has a batch; give max_batch (its compiled batch)")
        if self.kernels == "eager" and (self.static_decode is not None or self.nxd_inference):
            raise ValueError("static_decode, nxd_inference: the eager engine runs transformers' own modules; "
                             "model NxD Inference's graphs with kernels='fused'")
        if self.kernels == "eager" and (self.chunked_prefill or self.prefill_requests != 1):
            raise ValueError("kernels: the eager engine (interop.serve's) prefills one whole prompt per iteration; "
                             "give chunked_prefill=False and prefill_requests=1, or use Engine.eager(max_batch)")
        if (isinstance(self.host_per_token, bool) or not isinstance(self.host_per_token, (int, float))
                or not math.isfinite(self.host_per_token) or self.host_per_token < 0):
            raise ValueError(f"host_per_token: expected seconds >= 0, got {self.host_per_token!r}")
        if self.kernels == "eager" and self.host_per_token:
            raise ValueError("host_per_token: the eager engine's iterations are priced from its traced kernels alone; "
                             "model a serving frontend with kernels='fused'")
        if not isinstance(self.kv_fraction, (int, float)) or not 0 < self.kv_fraction <= 1:
            raise ValueError(f"kv_fraction: expected a share in (0, 1], got {self.kv_fraction!r}")

    def nxd_for(self, kind: str) -> bool:
        """Whether a pool of ``kind`` runs NxD Inference's models (:attr:`nxd_inference`; never the eager engine)."""
        if self.kernels == "eager":
            return False
        if self.nxd_inference is not None:
            return self.nxd_inference
        import devices

        return devices.chip(kind).family == "trainium"

    @property
    def batch_limit(self) -> int:
        """The configured most sequences in flight."""
        return self.max_batch or DEFAULT_MAX_BATCH

    @classmethod
    def of(cls, kernels: str, max_batch: int | None = None) -> "Engine":
        """The engine of a ``kernels=`` choice: :meth:`fitted` for ``fused``, :meth:`eager` for ``eager``."""
        return cls.eager(max_batch) if check_kernels(kernels) == "eager" else cls.fitted(max_batch)

    @classmethod
    def fitted(cls, max_batch: int | None = None) -> "Engine":
        """The production engine (the default): fused kernels, the limits of the published rows' engines, and
        the serving efficiencies fitted to their rows (:mod:`planner.serving.fitted`)."""
        return cls(max_batch=max_batch)

    @classmethod
    def eager(cls, max_batch: int | None = None) -> "Engine":
        """The engine ``interop.serve`` runs: eager kernels, whole prompts one at a time."""
        return cls(kernels="eager", max_batch=max_batch, chunked_prefill=False, prefill_requests=1,
                   max_num_tokens=1 << 30)


__all__ = ["DEFAULT_BLOCK", "DEFAULT_KV_FRACTION", "DEFAULT_MAX_BATCH", "DEFAULT_MAX_NUM_TOKENS", "KERNELS",
           "NXD_MOE_BLOCK", "Engine"]
