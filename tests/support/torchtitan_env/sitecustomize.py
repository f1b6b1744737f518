"""The test environment of the torchtitan recipe (tests/e2e/test_torchtitan.py), put first on PYTHONPATH of both runs.

torchtitan 0.3.0 and torchao 0.18 beside torch 2.13 need two fixes that are theirs, not the rack's; they are applied
to the run on the rack and to the CPU reference alike (docs/cuda.md, "torchtitan"):

- torchtitan calls ``torch.distributed.set_timeout``, which torch 2.13 has only as
  ``distributed_c10d._set_pg_timeout``;
- torchao 0.18 defines Triton kernels whose ``@triton.autotune(key=["num_elements"])`` names no argument of the
  kernel, which Triton 3.9 rejects at import; torchao only defines them where Triton can run (a GPU, or the
  rack's slots). The key names that are not arguments are dropped (what older Triton did silently).

With ``TORCHTITAN_REFERENCE=cpu`` the process is the reference: the same recipe on the CPU over Gloo, with no
interop in it. torchtitan always picks CUDA, so the reference also needs (in its process only) the device module
pointed at the CPU, FlexAttention computed by another route (torch has no CPU backward for it: a dense boolean mask
from the same mask_mod and scaled_dot_product_attention), FSDP's PREMUL_SUM(1.0) reduce-scatter sent as SUM
(Gloo has no PREMUL_SUM; the factor is 1.0, so the sums are the same numbers) and the block mask built eagerly.
"""

import importlib.abc
import importlib.machinery
import os
import sys


def _after_import(name, patch):
    """Run ``patch(module)`` right after ``name`` is first imported (now if it already is)."""
    if name in sys.modules:
        patch(sys.modules[name])
        return

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                patch(module)
            spec.loader.exec_module = exec_and_patch
            return spec
    sys.meta_path.insert(0, Finder())


def _set_timeout(c10d):
    import torch.distributed as dist

    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = c10d._set_pg_timeout


def _autotune_keys(triton):
    original = triton.autotune

    def autotune(*args, key=None, **kwargs):
        def keep_argument_keys(fn):
            names = getattr(fn, "arg_names", None)
            keys = key if names is None or key is None else [k for k in key if k in names]
            return original(*args, key=keys, **kwargs)(fn)
        return keep_argument_keys
    triton.autotune = autotune


def _cpu_device(utils):
    import types

    import torch

    def device_stat(*args, **kwargs):
        return 0

    cpu = types.SimpleNamespace(
        set_device=lambda device: None, current_device=lambda: 0, device_count=lambda: 1,
        synchronize=lambda *a: None, empty_cache=lambda: None, reset_peak_memory_stats=lambda *a: None,
        get_device_name=lambda *a: "cpu", memory_stats=lambda *a: {},
        get_device_properties=lambda *a: types.SimpleNamespace(total_memory=1 << 40, name="cpu"),
        max_memory_allocated=device_stat, max_memory_reserved=device_stat, memory_allocated=device_stat,
        is_available=lambda: True, manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
    )
    utils.device_type, utils.device_module = "cpu", cpu
    utils.get_local_device = lambda: torch.device("cpu")


def _dense_flex_attention(q, k, v, *, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                          return_aux=None, kernel_options=None):
    """Flex attention by another route: the mask_mod evaluated densely, then scaled_dot_product_attention."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import AuxOutput, create_mask

    if score_mod is not None:
        raise NotImplementedError("the CPU reference computes mask_mod attention only (the recipe has no score_mod)")
    mask = None
    if block_mask is not None:
        B, H, L, S = q.shape[0], q.shape[1], q.shape[-2], k.shape[-2]
        mask = create_mask(block_mask.mask_mod, B, H, L, S, device=q.device)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    if return_aux is not None and return_aux.lse:
        raise NotImplementedError("the CPU reference returns no logsumexp (the recipe asks none)")
    return out, AuxOutput(lse=None, max_scores=None)


def _reference_attention(attention):
    from torch.nn.attention.flex_attention import create_block_mask

    attention.FlexAttention._compiled_flex_attn = staticmethod(_dense_flex_attention)
    attention._compiled_create_block_mask = create_block_mask


def _sum_for_premul(collectives):
    original = collectives._get_gradient_divide_factors

    def factors(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type="", factor=None,
                force_sum_reduction_for_comms=False):
        return original(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type, factor, True)
    collectives._get_gradient_divide_factors = factors


_after_import("torch.distributed.distributed_c10d", _set_timeout)
_after_import("triton", _autotune_keys)
if os.environ.get("TORCHTITAN_REFERENCE") == "cpu":
    _after_import("torchtitan.tools.utils", _cpu_device)
    _after_import("torchtitan.models.common.attention", _reference_attention)
    _after_import("torch.distributed.fsdp._fully_shard._fsdp_collectives", _sum_for_premul)
