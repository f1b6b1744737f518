"""Training recipes of the drift report: which precision a model trains in, and how its GEMMs are quantized.

``bf16`` / ``bf16-sr``: parameters, activations, gradients and optimizer state in
bfloat16 (pure BF16 training), results rounded to nearest or stochastically
(the latter where the slot's kind rounds op results stochastically: Trainium).
The quantized recipes keep float32 parameters and non-GEMM ops and quantize the
operands of every GEMM in the transformer blocks (embeddings and the LM head stay
in float32, as Transformer Engine and torchao leave them), each GEMM accumulated
in float32 from exactly dequantized operands:

- ``fp8-current`` / ``fp8-delayed``: per-tensor scaling, E4M3 forward operands,
  E5M2 gradients (Transformer Engine's HYBRID format); the scale from the tensor's
  own amax (Float8CurrentScaling) or from the largest amax of the last
  :data:`AMAX_HISTORY` steps (DelayedScaling, amax_compute_algo="max").
- ``mxfp8``: MXFP8 E4M3 for every operand (torchao's MX training), requantized
  along each GEMM's reduction dimension, with the scale rule of the slot's kind.
- ``nvfp4``: NVFP4 operands; gradients rounded stochastically where the kind can
  (NVIDIA's NVFP4 recipe); its 16x16 random Hadamard transform on weight-gradient
  inputs is not modelled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from interop.numerics.maths.quantize import QuantizedTensor, quantize

AMAX_HISTORY = 16
"""Steps of amax history for delayed scaling (Transformer Engine's default is 1024; a short run needs fewer)."""


@dataclass(frozen=True, slots=True)
class Recipe:
    """One way to train: the parameter dtype, stochastic rounding, and the GEMM operand formats."""

    name: str
    params_dtype: torch.dtype
    """dtype of parameters, activations and optimizer state."""
    stochastic: bool = False
    """Round op results stochastically (device mode on kinds that do: Trainium)."""
    forward: str | None = None
    """Format of forward GEMM operands (None: GEMMs run in params_dtype)."""
    backward: str | None = None
    """Format of gradient operands in the backward GEMMs."""
    scaling: str | None = None
    """``current`` or ``delayed`` for per-tensor FP8; None for block formats."""
    gradient_rounding: str = "nearest"
    """Rounding of gradient operands (``stochastic`` for NVFP4 where the kind rounds conversions stochastically)."""
    description: str = ""

    @property
    def quantized(self) -> bool:
        return self.forward is not None


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("bf16", torch.bfloat16, description="pure BF16 training, round to nearest even"),
    Recipe("bf16-sr", torch.bfloat16, stochastic=True, description="pure BF16 training, stochastic rounding"),
    Recipe("fp8-current", torch.float32, forward="float8_e4m3fn", backward="float8_e5m2", scaling="current",
           description="FP8 GEMMs, per-tensor current scaling (E4M3 forward, E5M2 gradients)"),
    Recipe("fp8-delayed", torch.float32, forward="float8_e4m3fn", backward="float8_e5m2", scaling="delayed",
           description=f"FP8 GEMMs, per-tensor delayed scaling (amax history {AMAX_HISTORY})"),
    Recipe("mxfp8", torch.float32, forward="mxfp8_e4m3", backward="mxfp8_e4m3",
           description="MXFP8 E4M3 GEMM operands, the kind's scale rule"),
    Recipe("nvfp4", torch.float32, forward="nvfp4", backward="nvfp4", gradient_rounding="stochastic",
           description="NVFP4 GEMM operands, stochastic rounding of gradients"),
)}
"""Every recipe :func:`interop.numerics.drift.drift` runs, by name."""


def recipe_named(name: str) -> Recipe:
    found = RECIPES.get(name)
    if found is None:
        raise ValueError(f"recipe: unknown recipe {name!r}; accepted: {', '.join(RECIPES)}")
    return found


@dataclass
class QuantStats:
    """Range events of a run's quantizations."""

    quantized: int = 0
    """Elements quantized."""
    overflow: int = 0
    """Finite elements past the format's range once scaled (clamped to the largest value, or infinite)."""
    underflow: int = 0
    """Non-zero elements that became zero."""

    def add(self, x: torch.Tensor, q: QuantizedTensor) -> None:
        x = x.float()
        back = q.dequantize(torch.float32)
        finite = torch.isfinite(x)
        element = q.format.element
        codes = q.codes.view(torch.uint8) if q.codes.dtype.itemsize == 1 and not element.integer else q.codes
        if element.integer:
            magnitude = codes.to(torch.int32).abs()
        else:
            magnitude = codes.to(torch.int32) & (element.sign_bit - 1)
        clamped = (magnitude == element.max_code) & (x.abs() > back.abs() * element.overflow_ratio)
        self.overflow += int((finite & (clamped | torch.isinf(back))).sum())
        self.underflow += int((finite & (x != 0) & (back == 0)).sum())
        self.quantized += x.numel()


@dataclass
class Quantizer:
    """Quantizes GEMM operands for one recipe on one slot; keeps amax histories and range counts."""

    recipe: Recipe
    scale_rule: str | None
    """The kind's scale rule for the block format (None: the format's default)."""
    generator: torch.Generator | None
    stats: QuantStats = field(default_factory=QuantStats)
    histories: dict[str, deque] = field(default_factory=dict)

    def __call__(self, x: torch.Tensor, key: str, *, gradient: bool = False) -> torch.Tensor:
        """``x`` quantized (blocks along its last dimension) and dequantized to float32."""
        fmt = self.recipe.backward if gradient else self.recipe.forward
        rounding = self.recipe.gradient_rounding if gradient else "nearest"
        x = x.contiguous()
        kwargs = {}
        if self.recipe.scaling is not None:
            kwargs["scale_rule"] = "tensor"
            if self.recipe.scaling == "delayed":
                history = self.histories.setdefault(key, deque(maxlen=AMAX_HISTORY))
                current = _host(x.detach()).float().abs().amax()
                kwargs["amax"] = max(history) if history else current
                history.append(current)
        elif fmt.startswith("mx") and self.scale_rule is not None:
            kwargs["scale_rule"] = self.scale_rule
        # On a slot the quantization runs on a host alias of the operand: on the chip it is fused into the
        # GEMM, so it is neither a separate op on the modelled timeline nor worth the per-op dispatch here.
        source = _host(x.detach())
        q = quantize(source.float(), fmt, rounding=rounding,
                     generator=self.generator if rounding == "stochastic" else None, **kwargs)
        self.stats.add(source, q)
        values = q.dequantize(torch.float32)
        if x.device.type != "hybrid":
            return values
        out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        _host(out).copy_(values)
        return out


def _host(t: torch.Tensor) -> torch.Tensor:
    """A host view of a slot tensor's bytes (the tensor itself off the rack)."""
    if t.device.type != "hybrid":
        return t
    from interop import _C

    return _C._execution_alias(t, "a low-precision recipe")


class _QuantizedGemm(torch.autograd.Function):
    """``x @ w.T`` with both operands quantized along K, gradients quantized along each backward GEMM's K."""

    @staticmethod
    def forward(ctx, x, w, quantizer: Quantizer, key: str):
        x2 = x.reshape(-1, x.shape[-1])
        out = quantizer(x2, f"{key}.x") @ quantizer(w, f"{key}.w").t()
        ctx.save_for_backward(x2, w)
        ctx.quantizer, ctx.key, ctx.shape = quantizer, key, x.shape
        return out.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad):
        x2, w = ctx.saved_tensors
        q, key = ctx.quantizer, ctx.key
        g = grad.reshape(-1, grad.shape[-1]).float()
        # dX = G @ W reduces over N; dW = G.T @ X reduces over the tokens: requantize along each.
        dx = q(g, f"{key}.g", gradient=True) @ q(w.t(), f"{key}.wt").t()
        dw = q(g.t(), f"{key}.gt", gradient=True) @ q(x2.t(), f"{key}.xt").t()
        return dx.reshape(ctx.shape).to(x2.dtype), dw.to(w.dtype), None, None


def quantize_gemms(model: torch.nn.Module, quantizer: Quantizer, prefix: str = "transformer.h") -> int:
    """Route the GEMMs of ``model``'s transformer blocks (nn.Linear and transformers' Conv1D) through
    ``quantizer``; returns how many modules were changed."""
    changed = 0
    for name, module in model.named_modules():
        if not name.startswith(prefix):
            continue
        kind = type(module).__name__
        if kind not in ("Linear", "Conv1D"):
            continue
        module.forward = _gemm_forward(module, quantizer, name, transposed=kind == "Conv1D")
        changed += 1
    return changed


def _gemm_forward(module, quantizer: Quantizer, key: str, *, transposed: bool):
    def forward(x):
        weight = module.weight.t() if transposed else module.weight  # Conv1D stores (in, out)
        out = _QuantizedGemm.apply(x, weight, quantizer, key)
        return out if module.bias is None else out + module.bias
    return forward
