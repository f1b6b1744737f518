"""The routed experts of a mixture-of-experts layer as an engine runs them, priced for :class:`FusedCost
<planner.serving.iteration.FusedCost>` (which holds the shape, the placement, the GEMM pricing and the fitted figures).

Two engines' ways. The GPU engines (TensorRT-LLM's fused MoE op, vLLM's and SGLang's) run the routed experts' GEMMs as
one grouped-GEMM kernel over the experts the tokens reach: one launch, one stream of every local expert's weights,
each expert's rows the pairs routed to it; at decode each routed pair adds the fitted share of its expert's weights
(:meth:`ExpertPricing.expert_decode_seconds`). NxD Inference's engines run NxD's ``ExpertMLPs``
(:attr:`planner.serving.engine.Engine.nxd_inference`): selective loading, every expert over every token, or the
blockwise kernel's blocks, by its rules (:meth:`ExpertPricing._nxd_experts`). Under expert parallelism the ranks'
tokens are all-gathered before the experts and their outputs reduce-scattered after (:meth:`_expert_exchange`).
"""

from __future__ import annotations

import math

import devices
from planner.serving.engine import NXD_MOE_BLOCK
from planner.serving.parts import PARTS, add

EXPERT_TILE_ROWS = 128
"""Rows of one MMA tile of the experts' grouped GEMM (TensorRT-LLM's SM100 MoE kernels: the weights are the 128-row
MMA operand, the tokens 8- to 64-row tiles): an expert's decode rows past it run full tiles, and pay no further small-
tile weight passes (:meth:`ExpertPricing.expert_decode_seconds`)."""


class ExpertPricing:
    """The experts' pieces of :class:`planner.serving.iteration.FusedCost` (see the module doc)."""

    def _expert_parts(self, tokens: int, generation: bool = False) -> dict:
        """The experts of the model's average layer (the sparse layers' share) for ``tokens`` tokens of each rank
        (``generation``: decode tokens only, NxD's token-generation graph under :attr:`nxd_inference`)."""
        parts = dict.fromkeys(PARTS, 0.0)
        if self.shape.experts:
            piece = dict.fromkeys(PARTS, 0.0)
            if self.nxd_inference:
                self._nxd_experts(piece, tokens, generation)
            else:
                self._experts(piece, tokens)
            add(parts, piece, self.shape.moe_layers / self.shape.layers)
        return parts

    def _experts(self, parts: dict, tokens: int) -> None:
        s, tp, ep = self.shape, self.tp, self.ep
        self._gemm(parts, tokens, s.hidden, s.experts, quantized=False)  # the router
        pairs = tokens * ep * s.topk  # token-expert pairs of the instance's tokens in this layer
        active = s.experts * (1.0 - (1.0 - s.topk / s.experts) ** (tokens * ep))  # distinct experts hit
        local = max(1, math.ceil(active / ep))
        per_expert = max(1, math.ceil(pairs / max(active, 1.0)))
        for g in s.gemms:
            if g.experts:
                k, n = g.local(tp)
                self._gemm(parts, per_expert, k, n, times=local, grouped=True)
        self._expert_exchange(parts, tokens)

    def _nxd_experts(self, parts: dict, tokens: int, generation: bool) -> None:
        """The routed experts as NxD's ``ExpertMLPs`` runs them (:attr:`nxd_inference`) for
        ``tokens`` tokens of each rank: selective loading (every routed pair one GEMM row with its expert's weights),
        every local expert over every token, or the blockwise kernel's blocks, by its rules."""
        s, tp, ep = self.shape, self.tp, self.ep
        self._gemm(parts, tokens, s.hidden, s.experts, quantized=False)  # the router
        instance = max(1, math.ceil(tokens * ep))  # the tokens every expert-parallel rank routes
        pairs = instance * s.topk
        # selective loading (each pair its expert's weights); at token generation NxD has none under expert
        # parallelism ("not supported"): every expert there
        if pairs < s.experts and not (generation and ep > 1):
            rows, times = 1, math.ceil(pairs / ep)
        elif generation or pairs < NXD_MOE_BLOCK:  # every expert over every token
            rows, times = instance, s.experts // ep
        else:  # blockwise: the kernel's static blocks, each one expert's GEMMs over NXD_MOE_BLOCK rows
            blocks = math.ceil((pairs - (s.experts - 1)) / NXD_MOE_BLOCK) + s.experts - 1
            rows, times = NXD_MOE_BLOCK, math.ceil(blocks / ep)
        for g in s.gemms:
            if g.experts:
                k, n = g.local(tp)
                self._gemm(parts, rows, k, n, times=times, grouped=True)
        self._expert_exchange(parts, tokens)

    def _expert_exchange(self, parts: dict, tokens: int) -> None:
        s, ep = self.shape, self.ep
        if ep > 1:
            # Attention is data parallel, so every rank's tokens reach every rank holding their experts: the engines'
            # default exchange (TensorRT-LLM's AllGatherReduceScatter, vLLM's and SGLang's data-parallel attention)
            # all-gathers the ranks' hidden states, quantized to the GEMMs' input precision before the gather, with
            # each token's expert ids and weights (int32 and float32), and reduce-scatters the experts' BF16 outputs:
            # per rank S = the instance's tokens x hidden x bytes each way, not one copy per routed expert.
            group = self.placement.ep_group()
            gathered = tokens * ep * (s.hidden * self.precision.expert_gemms.input_bytes + s.topk * 8)
            parts["communication"] += self.pricer.seconds("all_gather", gathered, group)
            parts["communication"] += self.pricer.seconds(
                "reduce_scatter", tokens * ep * s.hidden * self.precision.activation_bytes, group)

    def _expert_weight_seconds(self) -> float:
        """Seconds to stream one expert's weights (every expert GEMM, this chip's share) at the HBM bandwidth."""
        elements = sum(k * n for k, n in (g.local(self.tp) for g in self.shape.gemms if g.experts))
        return elements * self.precision.expert_gemms.weight_bytes / devices.chip(self.kind).hbm_bandwidth.value

    def expert_decode_seconds(self, decode_tokens: float) -> float:
        """The experts' extra weight traffic in an average layer (the sparse layers' share) for ``decode_tokens`` decode tokens of a rank: each of
        their routed pairs (``topk`` a token, balanced over the ranks) streams the fitted share of its expert's
        weights (``expert_decode``: the grouped GEMM's small token tiles at decode each stream their expert's
        weights). Prefill tokens do not pay it: at prefill the GEMM's tiles are large and its compute bounds it."""
        s, ep = self.shape, self.ep
        pairs = decode_tokens * ep * s.topk  # the instance's routed decode pairs in a sparse layer
        if pairs <= 0:
            return 0.0
        hit = s.experts * (1.0 - (1.0 - s.topk / s.experts) ** (decode_tokens * ep))  # distinct experts reached
        # past one full MMA tile of rows an expert the grouped GEMM runs full tiles: no more small-tile passes
        per_expert = min(pairs / hit, EXPERT_TILE_ROWS)
        return hit * per_expert / ep * self._expert_decode


__all__ = ["EXPERT_TILE_ROWS", "ExpertPricing"]
