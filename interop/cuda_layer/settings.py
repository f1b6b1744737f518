"""What a CUDA script sets: ``torch.autocast("cuda")`` and ``torch.amp.GradScaler("cuda")`` on the slots with CUDA's
policy, the autocast state queries, ``torch.backends.cuda``/``cudnn`` flags and ``set_float32_matmul_precision``
(accepted, recorded, numerics-changing ones marked), and the profiler's CUDA activity (the slots' activity)."""

from __future__ import annotations

import functools

import torch

from interop.cuda_layer.patch_ledger import ORIGINAL, PATCHES, keep
from interop.cuda_layer.usage import LOG, touch


def _autocast_init(original):
    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            touch("torch.autocast(device_type='cuda')", "mapped",
                  "autocast on the hybrid slots with CUDA's policy (default dtype float16)")
            if dtype is None:
                dtype = ORIGINAL["get_autocast_dtype"]("cuda")
            device_type = "hybrid"
        original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    return __init__


def _device_type_arg(original, api_name: str):
    @functools.wraps(original)
    def fn(*args, **kwargs):
        if args and args[0] == "cuda":
            touch(api_name, "mapped", "the hybrid slots' autocast state")
            args = ("hybrid",) + args[1:]
        elif kwargs.get("device_type") == "cuda":
            touch(api_name, "mapped", "the hybrid slots' autocast state")
            kwargs["device_type"] = "hybrid"
        return original(*args, **kwargs)
    return fn


def _grad_scaler_init(original):
    @functools.wraps(original)
    def __init__(self, device="cuda", *args, **kwargs):
        if device == "cuda":
            touch("torch.amp.GradScaler('cuda')", "mapped", "loss scaling on the hybrid slots")
            device = "hybrid"
        original(self, device, *args, **kwargs)
    return __init__


# -- torch.backends flags -----------------------------------------------------------------------------------

NUMERICS_FLAGS: dict[str, str] = {
    "torch.backends.cuda.matmul.allow_tf32": "float32 matmuls run on TF32 tensor cores (10-bit mantissa)",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": "fp16 GEMMs may reduce in fp16",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": "bf16 GEMMs may reduce in bf16",
    "torch.backends.cuda.matmul.allow_fp16_accumulation": "fp16 GEMMs accumulate in fp16",
    "torch.backends.cuda.matmul.fp32_precision": "float32 matmul precision (tf32 / ieee)",
    "torch.backends.cudnn.allow_tf32": "float32 convolutions run on TF32 tensor cores",
    "torch.backends.cudnn.benchmark": "cuDNN picks algorithms by timing: results may differ run to run",
    "torch.backends.cudnn.deterministic": "restricts cuDNN to deterministic algorithms",
    "torch.backends.cudnn.fp32_precision": "float32 convolution precision (tf32 / ieee)",
    "torch.set_float32_matmul_precision": "'high'/'medium' let float32 matmuls use TF32 / bf16 passes",
    "torch.backends.cuda.enable_flash_sdp": "selects the SDPA kernel (rounding differs between kernels)",
    "torch.backends.cuda.enable_mem_efficient_sdp": "selects the SDPA kernel (rounding differs between kernels)",
    "torch.backends.cuda.enable_math_sdp": "selects the SDPA kernel (rounding differs between kernels)",
    "torch.backends.cuda.enable_cudnn_sdp": "selects the SDPA kernel (rounding differs between kernels)",
}
"""Settings that change numerics (or determinism) on a real GPU; the emulated slots compute exactly as the
CPU whatever they say, so the report lists them."""


def _patch_flags() -> None:
    cublas_cls = type(torch.backends.cuda.matmul)
    original_cublas = cublas_cls.__setattr__

    def cublas_setattr(self, name, value):
        key = f"torch.backends.cuda.matmul.{name}"
        LOG.flag(key, value, key in NUMERICS_FLAGS, NUMERICS_FLAGS.get(key, "accepted"))
        return original_cublas(self, name, value)
    PATCHES.set(cublas_cls, "__setattr__", cublas_setattr)

    cudnn_cls = type(torch.backends.cudnn)
    original_cudnn = cudnn_cls.__setattr__

    def cudnn_setattr(self, name, value):
        key = f"torch.backends.cudnn.{name}"
        LOG.flag(key, value, key in NUMERICS_FLAGS, NUMERICS_FLAGS.get(key, "accepted"))
        return original_cudnn(self, name, value)
    PATCHES.set(cudnn_cls, "__setattr__", cudnn_setattr)

    def recorded(owner, name: str, key: str):
        original = getattr(owner, name)

        @functools.wraps(original)
        def fn(*args, **kwargs):
            value = args[0] if args else next(iter(kwargs.values()), None)
            LOG.flag(key, value, key in NUMERICS_FLAGS, NUMERICS_FLAGS.get(key, "accepted"))
            return original(*args, **kwargs)
        PATCHES.set(owner, name, fn)

    recorded(torch, "set_float32_matmul_precision", "torch.set_float32_matmul_precision")
    for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp",
                 "preferred_linalg_library", "preferred_blas_library"):
        if hasattr(torch.backends.cuda, name):
            recorded(torch.backends.cuda, name, f"torch.backends.cuda.{name}")


# -- the profiler --------------------------------------------------------------------------------------------

def _patch_profiler() -> None:
    from torch import profiler as _profiler  # noqa: F401  (loads torch.profiler)

    original = torch.profiler.profile.__init__

    @functools.wraps(original)
    def init(self, *args, activities=None, **kwargs):
        if activities is not None:
            activities = list(activities)
            if torch.profiler.ProfilerActivity.CUDA in activities:
                touch("torch.profiler.ProfilerActivity.CUDA", "modelled",
                      "device activity of the hybrid slots (modelled durations merged into the trace)")
                activities = [a for a in activities if a != torch.profiler.ProfilerActivity.CUDA]
                if torch.profiler.ProfilerActivity.PrivateUse1 not in activities:
                    activities.append(torch.profiler.ProfilerActivity.PrivateUse1)
        original(self, *args, activities=activities, **kwargs)
    PATCHES.set(torch.profiler.profile, "__init__", init)


def install() -> None:
    """autocast and GradScaler on "cuda", the autocast state queries, torch.backends flags, profiler activities."""
    keep("get_autocast_dtype", torch.get_autocast_dtype)
    autocast_cls = torch.amp.autocast_mode.autocast
    PATCHES.set(autocast_cls, "__init__", _autocast_init(autocast_cls.__init__))
    for name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
        PATCHES.set(torch, name, _device_type_arg(getattr(torch, name), f"torch.{name}('cuda')"))
    from torch.amp import autocast_mode as am

    PATCHES.set(am, "is_autocast_available", _device_type_arg(am.is_autocast_available,
                                                              "torch.amp.is_autocast_available('cuda')"))
    scaler_cls = torch.amp.GradScaler
    PATCHES.set(scaler_cls, "__init__", _grad_scaler_init(scaler_cls.__init__))

    _patch_flags()
    _patch_profiler()
