"""How much of a layer's tensor-parallel communication its GEMMs hide: Transformer Engine's userbuffers overlaps.

With ``tp_comm_overlap`` (Megatron-Core's option, on in NVIDIA's published recipes) Transformer Engine overlaps
each TP collective of a sequence-parallel layer with a GEMM, by one of three methods named per GEMM in the
recipes' configurations (NVIDIA NeMo nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py and
Megatron-Bridge megatron/bridge/training/comm_overlap.py: e.g. ``userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192``,
``userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192``):

* ``ring_exchange`` for the all-gathers before the column-parallel GEMMs of the forward (``qkv_fprop``,
  ``fc1_fprop``): the GEMM runs in ``tp`` chunks, the first on the chip's own shard while the next shard arrives
  from a peer, so ``tp - 1`` exchanges each run beside one chunk; nothing is exposed while an exchange is
  shorter than a chunk;
* ``pipeline`` (``num_splits=4``) for the reduce-scatters after the row-parallel GEMMs of the forward
  (``proj_fprop``, ``fc2_fprop``): the GEMM runs in 4 splits and each split's reduce-scatter runs beside the next
  split; the last split's is exposed;
* ``bulk`` (and ``ring_exchange``) in the backward: the all-gather of the input for the weight gradient runs
  beside the data-gradient GEMM, the reduce-scatter of the data gradient beside the weight-gradient GEMM
  (``qkv_dgrad``/``qkv_wgrad``, ``fc1_dgrad``/``fc1_wgrad``), the gathers of output gradients beside the
  chunks of their GEMM: hidden up to the GEMM's length.

Each collective is set beside the GEMM time of its phase in proportion to its own time. Of the hidden part,
``share`` costs no compute time (the overlapping kernels take SMs: the fitted
:attr:`~planner.fitted_efficiency.StepEfficiency.overlap`).
"""

from __future__ import annotations

from typing import Iterable

PIPELINE_SPLITS = 4
"""``num_splits`` of the pipelined reduce-scatters in every published userbuffers configuration."""


def exposed_raw(method: str, seconds: float, gemm: float, tp: int) -> float:
    """Seconds of one collective that its GEMM (``gemm`` seconds) cannot hide under ``method``
    (``ring_exchange``, ``pipeline`` or ``bulk``; see the module doc)."""
    if seconds <= 0:
        return 0.0
    if method == "ring_exchange":
        return max(0.0, seconds - gemm * (tp - 1) / max(tp, 1))
    if method == "pipeline":
        last = seconds / PIPELINE_SPLITS
        return last + max(0.0, seconds - last - gemm * (PIPELINE_SPLITS - 1) / PIPELINE_SPLITS)
    if method == "bulk":
        return max(0.0, seconds - gemm)
    raise ValueError(f"method: unknown overlap {method!r}; accepted: ring_exchange, pipeline, bulk")


def method(phase: str, overlap: str) -> str:
    """The userbuffers method of a TP collective of ``phase`` tagged ``overlap`` (``column_gemm``: beside the
    column-parallel GEMM it feeds; ``row_gemm``: after the row-parallel GEMM that produced it)."""
    if phase == "forward":
        return "pipeline" if overlap == "row_gemm" else "ring_exchange"
    return "bulk"


def exposed(collectives: Iterable[tuple[str, float]], gemm: float, tp: int, share: float, enabled: bool) -> float:
    """Exposed seconds of one phase's TP collectives ``(method, seconds)`` beside ``gemm`` seconds of GEMMs:
    each hides behind its share of the GEMMs (in proportion to its time) as its method allows, and ``1 - share``
    of what is hidden still costs compute time. ``enabled`` False (no ``tp_comm_overlap``): all exposed."""
    colls = [(m, s) for m, s in collectives if s > 0]
    total = sum(s for _, s in colls)
    if not colls:
        return 0.0
    if not enabled or gemm <= 0:
        return total
    out = 0.0
    for m, s in colls:
        raw = exposed_raw(m, s, gemm * s / total, tp)
        out += raw + (1.0 - share) * (s - raw)
    return out


__all__ = ["PIPELINE_SPLITS", "exposed", "exposed_raw", "method"]
