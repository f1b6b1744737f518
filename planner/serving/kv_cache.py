"""Memory of one serving chip: weights, activations, and the paged KV cache in what is left.

The KV cache is not given: it takes :attr:`Engine.kv_fraction` of the chip's memory
left after its weights and the activations of one iteration, in blocks of
:attr:`Engine.block_size` tokens, and the batch that runs is what it admits
(:class:`KvCache`). Weights are counted on the most loaded pipeline stage; the
embedding and the LM head stay in 16-bit (quantized checkpoints keep them so), the
experts of an MoE layer are divided over ``ep``, everything else over ``tp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import devices
from planner.serving.engine import Engine
from planner.serving.model_shape import Gemm, ModelShape, ceil_div
from planner.serving.precision import Precision

LOGIT_BYTES = 4
"""Logits are kept in FP32 for sampling."""


@dataclass(frozen=True, slots=True)
class KvCache:
    """One chip's memory for serving (every figure modelled; bytes per chip)."""

    capacity: int
    """The chip's memory."""
    weights: int
    """Weights on the most loaded pipeline stage."""
    activations: int
    """One iteration's activations at the engine's token budget, and the logits of a full batch."""
    kv: int
    """Bytes given to the KV cache (0 when weights and activations leave nothing)."""
    layer_bytes: int
    """KV bytes per token per layer on this chip (keys and values of its key/value heads, or the whole latent of
    multi-head latent attention: :meth:`ModelShape.kv_layer_elements`)."""
    full_layers: int
    """Full-attention layers on the stage."""
    local_layers: int
    """Local-attention layers on the stage (sliding or chunked: they keep at most :attr:`span` tokens)."""
    span: int
    block: int
    """Tokens per block."""
    ranks: int = 1
    """Attention data-parallel ranks of an instance (``ep``): each holds its own sequences' cache."""

    @property
    def token_bytes(self) -> int:
        """KV bytes per token of one long sequence on this chip (every layer of the stage)."""
        return self.layer_bytes * (self.full_layers + self.local_layers)

    def sequence_bytes(self, length: int) -> int:
        """Bytes one sequence of ``length`` tokens reserves on a chip (whole blocks)."""
        blocks = self.full_layers * ceil_div(length, self.block)
        if self.local_layers:
            blocks += self.local_layers * ceil_div(min(length, self.span), self.block)
        return self.layer_bytes * self.block * blocks

    @property
    def fits(self) -> bool:
        """True when the weights and activations fit and leave a KV cache."""
        return self.kv > 0

    def sequences(self, length: int) -> int:
        """How many sequences of ``length`` tokens one instance holds at once."""
        need = self.sequence_bytes(length)
        return (self.kv // need) * self.ranks if need else 0


def gemm_weight_bytes(precision: Precision, gemm: Gemm) -> float:
    """Bytes per weight element of ``gemm`` (a routed expert's in :attr:`Precision.expert_gemms`)."""
    return (precision.expert_gemms if gemm.experts else precision).weight_bytes


def model_bytes(shape: ModelShape, precision: Precision) -> float:
    """Every weight of the model once, in ``precision`` (embedding, head and the rest in 16 bits)."""
    layers = sum(shape.holding(g) * g.k * g.n * max(1, g.experts) * gemm_weight_bytes(precision, g)
                 for g in shape.gemms)
    return layers + (shape.parameters - shape.gemm_params) * precision.activation_bytes


def memory(shape: ModelShape, kind: str, precision: Precision, *, tp: int, pp: int, ep: int, engine: Engine,
           longest_prompt: int, capacity: int | None = None) -> KvCache:
    """The memory of one chip of an instance cut ``tp x pp x ep`` (see the module doc)."""
    chip = devices.chip(kind)
    capacity = int(chip.hbm_capacity.value) if capacity is None else int(capacity)
    stage_layers = ceil_div(shape.layers, pp)
    eb = precision.activation_bytes  # embedding and head stay in the activations' 16-bit (or 32-bit) type
    per_layer = 0.0  # an average layer: a GEMM held by some layers only counts their share
    for g in shape.gemms:
        k, n = g.local(tp)
        per_layer += (k * n * (ceil_div(g.experts, ep) if g.experts else 1) * gemm_weight_bytes(precision, g)
                      * shape.share(g))
    layers_bytes = stage_layers * per_layer
    embed = (shape.vocab // tp + shape.position_embeddings) * shape.hidden * eb
    head = (shape.vocab // tp) * shape.hidden * eb
    extra = shape.extra_params / pp * eb
    if pp == 1:
        weights = layers_bytes + embed + (0 if shape.tied else head) + extra
    else:
        weights = layers_bytes + max(embed, head) + extra
    widest = max(g.local(tp)[1] for g in shape.gemms)
    tokens = min(engine.max_num_tokens, max(longest_prompt, engine.batch_limit)) if engine.kernels == "fused" \
        else longest_prompt
    activations = tokens * (shape.hidden + widest) * eb + engine.batch_limit * (shape.vocab // tp) * LOGIT_BYTES
    if engine.kernels == "eager":
        activations = tokens * (shape.hidden + widest) * eb + tokens * (shape.vocab // tp) * LOGIT_BYTES
    free = capacity - weights - activations
    kv = int(engine.kv_fraction * free) if free > 0 else 0
    # an engine that allocates every layer for the whole sequence (TensorRT-LLM) keeps no span on local layers
    local = min(stage_layers, ceil_div(shape.local_layers, pp)) if shape.local_layers and engine.local_cache else 0
    layer_bytes = shape.kv_layer_elements(tp) * precision.kv_bytes
    return KvCache(capacity=capacity, weights=int(math.ceil(weights)), activations=int(math.ceil(activations)),
                   kv=kv, layer_bytes=layer_bytes, full_layers=stage_layers - local, local_layers=local,
                   span=shape.span, block=engine.block_size, ranks=ep)


__all__ = ["LOGIT_BYTES", "KvCache", "gemm_weight_bytes", "memory", "model_bytes"]
