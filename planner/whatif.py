"""``interop.whatif``: a training step of a model on a rack that may exist only on paper, modelled.

The model is cut into blocks on the meta device
(:func:`~planner.models.model_blocks`), laid on the rack by a
homogeneous parallel configuration (:mod:`planner.parallel`) or by
per-kind stages, and priced by the step model (:func:`~planner.step.step_model`):
the same computation the planner's prediction for a live rack uses. Nothing
runs and nothing is allocated; every figure is modelled.
"""

from __future__ import annotations

from dataclasses import replace

import devices
from devices.chip_set import DEFAULT_BASIS, check_basis
from planner.comm import pricer_for
from planner.estimate import StepEstimate, check_step, estimate_from_result, reprice, run_config
from planner.kernels import DEFAULT_KERNELS, check_kernels
from planner.models import model_blocks
from planner.parallel import Parallel
from planner.precision import precision_argument
from planner.search import advice, default_parallel, search


def whatif(model, rack, *, parallel=None, global_batch: int, seq_len: int, precision: str | None = None,
           recompute: str = "auto", optimizer: str = "adamw", dtype: str | None = None,
           price_basis: str = DEFAULT_BASIS, kernels: str = DEFAULT_KERNELS) -> StepEstimate:
    """Model one training step of ``model`` on ``rack`` (shape-only: nothing runs, nothing is allocated).

    ``model``: an ``nn.Module`` built on the meta device, a transformers config,
    a named model (:data:`planner.models.MODELS`) or a transformers
    causal-LM model type. ``rack``: a preset, a spec string
    (``"h100:1024"``, ``"trn3-ultraserver*64"``) or a :class:`devices.RackSpec`.
    ``parallel``: a dict with keys ``tp``, ``pp``, ``cp``, ``ep``, ``vp``,
    ``dp`` (default: the chips left over), ``fsdp``, ``zero``, ``microbatch``,
    ``order``; ``"search"`` for the fastest configuration that fits; None for
    a plain configuration as fast by its compute bound as any (pipeline fill
    and drain counted) on the fewest chips, its weights and optimizer state
    leaving room for activations (:func:`planner.search.default_parallel`). ``global_batch``: samples per step; ``seq_len``:
    tokens per sample; ``precision``: the training recipe, ``"bfloat16"`` (default), ``"fp8"`` (FP8
    matmuls) or ``"float32"`` (a float32 model, no master copy) (:data:`planner.precision.PRECISIONS`; ``dtype=``
    is its deprecated spelling); ``recompute``:
    ``"none"``, ``"selective"``, ``"full"`` or ``"auto"``; ``optimizer``:
    ``"adamw"``, ``"adam"`` or ``"sgd"``; ``price_basis``: the basis of the step's cost
    (:data:`devices.PRICE_BASES`: ``"on-demand"``, ``"capacity-block"``, ``"reserved-effective"``), one for
    every chip of the rack (no cost when a kind has no price on it; ``est.economics`` says why).
    ``kernels``: ``"fused"`` (default: a tuned production stack, fused RMSNorm and flash attention, the fitted step
    efficiencies) or ``"eager"`` (the model's ops as written, as a slot runs them, priced op by op as
    ``interop.plan`` predicts them) (:mod:`planner.kernels`; ``est.kernels`` says which).

    A plan's exact step: ``whatif(config, **plan.whatif_config())`` (its layout, precision and ``kernels="eager"``).
    """
    precision = precision_argument(precision, dtype)
    check_step(global_batch, seq_len, precision, recompute, optimizer)
    check_basis(price_basis)
    check_kernels(kernels)
    blocks = model_blocks(model, dtype="float32" if precision == "float32" else "bfloat16", kernels=kernels)
    if blocks.kernels != kernels:
        raise ValueError(f"kernels: {kernels!r}, but the blocks given as model were traced for {blocks.kernels!r}")
    spec = devices.parse_rack(rack)
    pricer = pricer_for(spec)
    if isinstance(parallel, str):
        if parallel != "search":
            raise ValueError(f"parallel: expected a dict or 'search', got {parallel!r}")
        found = search(blocks, spec, global_batch=global_batch, seq_len=seq_len, precision=precision,
                       recompute=recompute, optimizer=optimizer, pricer=pricer)
        if found.best is None:
            raise ValueError(found.message())
        return reprice(found.best, price_basis)
    if parallel is None and len(spec.counts()) > 1:
        par = Parallel()
    elif parallel is None:
        par = default_parallel(blocks, spec, global_batch=global_batch, seq_len=seq_len, optimizer=optimizer,
                               precision=precision)
    else:
        par = Parallel.from_mapping(parallel)
    result, used = run_config(blocks, spec, par, global_batch=global_batch, seq_len=seq_len, precision=precision,
                              recompute=recompute, optimizer=optimizer, pricer=pricer)
    est = estimate_from_result(result, spec, used, precision=precision, model=blocks.name, price_basis=price_basis,
                               kernels=blocks.kernels)
    if not est.fits:
        est = replace(est, advice=advice(blocks, spec, est, global_batch=global_batch, seq_len=seq_len,
                                         precision=precision, optimizer=optimizer, pricer=pricer))
    return est


__all__ = ["whatif"]
