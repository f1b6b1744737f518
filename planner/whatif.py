"""``interop.whatif``: a training step of a model on a rack that may exist only on paper, modelled.

The model is cut into blocks on the meta device
(:func:`~planner.model_presets.model_blocks`), laid on the rack by a
homogeneous parallel configuration (:mod:`planner.parallel`) or by
per-kind stages, and priced by the step model (:func:`~planner.step.step_model`):
the same computation the planner's prediction for a live rack uses. Nothing
runs and nothing is allocated; every figure is modelled.
"""

from __future__ import annotations

import devices
from devices.chip_set import DEFAULT_BASIS, check_basis
from planner.comm import pricer_for
from planner.estimate import StepEstimate, _attach, _check, estimate_from_result, reprice, run_config
from planner.model_presets import model_blocks
from planner.parallel import Parallel
from planner.search import advice, default_parallel, search


def whatif(model, rack, *, parallel=None, global_batch: int, seq_len: int, dtype: str = "bfloat16",
           recompute: str = "auto", optimizer: str = "adamw", price_basis: str = DEFAULT_BASIS) -> StepEstimate:
    """Model one training step of ``model`` on ``rack`` (shape-only: nothing runs, nothing is allocated).

    ``model``: an ``nn.Module`` built on the meta device, a transformers config,
    a preset name (:func:`planner.model_presets`) or a transformers
    causal-LM model type. ``rack``: a preset, a spec string
    (``"h100:1024"``, ``"trn3-ultraserver*64"``) or a :class:`devices.RackSpec`.
    ``parallel``: a dict with keys ``tp``, ``pp``, ``cp``, ``ep``, ``vp``,
    ``dp`` (default: the chips left over), ``fsdp``, ``zero``, ``microbatch``,
    ``order``; ``"search"`` for the fastest configuration that fits; None for
    the least model parallelism whose weights and optimizer state fit with room
    for activations (:func:`planner.search.default_parallel`). ``global_batch``: samples per step; ``seq_len``:
    tokens per sample; ``dtype``: ``"bfloat16"`` or ``"fp8"``; ``recompute``:
    ``"none"``, ``"selective"``, ``"full"`` or ``"auto"``; ``optimizer``:
    ``"adamw"``, ``"adam"`` or ``"sgd"``; ``price_basis``: the basis of the step's cost
    (:data:`devices.PRICE_BASES`: ``"on-demand"``, ``"capacity-block"``, ``"reserved-effective"``), one for
    every chip of the rack (no cost when a kind has no price on it; ``est.economics`` says why).
    """
    _check(global_batch, seq_len, dtype, recompute, optimizer)
    check_basis(price_basis)
    blocks = model_blocks(model)
    spec = rack if hasattr(rack, "domains") else devices.parse_rack(rack)
    pricer = pricer_for(spec)
    if isinstance(parallel, str):
        if parallel != "search":
            raise ValueError(f"parallel: expected a dict or 'search', got {parallel!r}")
        found = search(blocks, spec, global_batch=global_batch, seq_len=seq_len, dtype=dtype, recompute=recompute,
                       optimizer=optimizer, pricer=pricer)
        if found.best is None:
            raise ValueError(found.message())
        return reprice(found.best, price_basis)
    if parallel is None and len(spec.counts()) > 1:
        par = Parallel()
    elif parallel is None:
        par = default_parallel(blocks, spec, global_batch=global_batch, seq_len=seq_len, optimizer=optimizer)
    else:
        par = Parallel.from_mapping(parallel)
    result, used = run_config(blocks, spec, par, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                              recompute=recompute, optimizer=optimizer, pricer=pricer)
    est = estimate_from_result(result, spec, used, dtype=dtype, model=blocks.name, price_basis=price_basis)
    _attach(est, blocks=blocks, spec=spec, parallel_obj=par, recompute=recompute)
    if not est.fits:
        _attach(est, advice=advice(blocks, spec, est, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                                   optimizer=optimizer, pricer=pricer))
    return est


__all__ = ["whatif"]
