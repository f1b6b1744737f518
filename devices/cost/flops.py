"""What one op does: its FLOPs and the bytes it moves, by op family.

:func:`count` classifies an op (see :mod:`devices.cost.op_families`) and counts it.
The compute-heavy families (matmul, convolution, attention) are counted here;
the memory-bound ones in :mod:`devices.cost.traffic`.  Conventions:

- A multiply-add is 2 FLOPs; bias adds and epilogues are counted per element.
- Bytes are the ideal traffic: each input read once, each output written once
  (a tiled kernel's re-reads hit on-chip memory).  Index tensors are int64.
- Attention counts only its matmuls (the convention FlashAttention's papers
  and MFU figures use), with causal masking counting only the unmasked pairs,
  and a block-sparse mask (FlexAttention's BlockMask, ``args["block_fraction"]``)
  only the fraction of (query block, key block) pairs it computes.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from devices.cost import op_families as ops, shapes as sh, traffic
from devices.cost.work import Shape, Work, default_work, moved_bytes


def count(op: str, shapes: Sequence[Shape], itemsize: int,
          out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    """Count the FLOPs and bytes of ``op`` on inputs ``shapes`` of ``itemsize``-byte elements.

    Ops outside every family, and ops whose shapes a family's rule cannot
    read, get a bytes-only count from their input and output sizes with
    ``by_default=True`` and a note saying why; nothing is guessed silently.
    """
    category, name = ops.classify(op)
    if category in ("view", "none"):
        return Work(category)
    if category == "unknown":
        return default_work(shapes, itemsize, out_shapes, f"{name}: no cost rule for this op")
    counter = _COUNTERS.get(category) or traffic.COUNTERS[category]
    try:
        return counter(name, op, list(shapes), itemsize, out_shapes, args)
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError) as exc:
        return default_work(shapes, itemsize, out_shapes,
                            f"{name}: shapes {list(shapes)} not understood by the {category} rule ({exc})")


# ---------------------------------------------------------------- matmul family
_EPILOGUE = {"addmm": 1, "baddbmm": 1, "addmv": 1, "addr": 1, "_addmm_activation": 2}


def _matmul(name: str, op: str, shapes: list[Shape], itemsize: int,
            out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    batch, m, n, k, out = sh.matmul_dims(name, shapes)
    flops = 2.0 * batch * m * n * k
    # Bias / beta*C epilogues touch every output element once more.
    flops += _EPILOGUE.get(name, 0) * batch * m * n
    if name == "linear" and len(shapes) > 2:
        flops += m * n
    if name == "addbmm":
        flops += batch * m * n
    outs = list(out_shapes) if out_shapes is not None else [out]
    return Work("matmul", flops, moved_bytes(shapes, outs, itemsize), gemm=(m, n, k))


# ----------------------------------------------------------------- convolution
def _conv_geometry(name: str, inp: Shape, weight: Shape, args: Mapping[str, object],
                   out: Shape | None = None) -> tuple[bool, int]:
    transposed = args.get("transposed")
    if name.startswith("conv_transpose") or name == "cudnn_convolution_transpose":
        transposed = True
    elif transposed is None and out is not None:
        transposed = _reads_as_transposed(inp, weight, out)
    transposed = bool(transposed)
    groups = args.get("groups")
    if groups is None:
        # Weights are (C_out, C_in / groups, *kernel), or (C_in, C_out / groups, *kernel) when transposed, so
        # the group count is readable from the input's (or the output's) channels.
        if transposed:
            groups = out[1] // weight[1] if out is not None and weight[1] else 1
        else:
            groups = inp[1] // weight[1] if weight[1] else 1
    return transposed, max(1, int(groups))


def _reads_as_transposed(inp: Shape, weight: Shape, out: Shape) -> bool:
    """Whether a convolution known by its shapes alone (a slot's timeline records no scalar arguments) is a
    transposed one: its weight's first dimension is the input's channels, and either the shapes fit no
    ordinary convolution or the output is spatially larger than the input (an up-convolution). Where both
    readings fit and the sizes agree, the two count the same pixels and FLOPs."""
    if len(inp) < 3 or len(weight) != len(inp) or len(out) != len(inp) or not weight[1]:
        return False
    fits_transposed = weight[0] == inp[1] and out[1] % weight[1] == 0
    fits_plain = out[1] == weight[0] and inp[1] % weight[1] == 0
    if not fits_transposed:
        return False
    return not fits_plain or sh.numel(out[2:]) > sh.numel(inp[2:])


def _conv_gemm(transposed: bool, groups: int, inp: Shape, weight: Shape, out: Shape) -> tuple[int, int, int]:
    kernel = sh.numel(weight[2:])
    if transposed:
        return inp[0] * sh.numel(inp[2:]), weight[1] * kernel, max(1, weight[0] // groups)
    # Implicit GEMM: rows are output pixels, columns output channels per group.
    return out[0] * sh.numel(out[2:]), max(1, weight[0] // groups), weight[1] * kernel


def _conv(name: str, op: str, shapes: list[Shape], itemsize: int,
          out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    inp, weight = shapes[0], shapes[1]
    transposed, groups = _conv_geometry(name, inp, weight, args, out_shapes[0] if out_shapes else None)
    out = out_shapes[0] if out_shapes else sh.conv_output(inp, weight, {**args, "groups": groups}, transposed)
    # Every weight element meets every output pixel (every input pixel when transposed).
    pixels = inp[0] * sh.numel(inp[2:]) if transposed else out[0] * sh.numel(out[2:])
    flops = 2.0 * pixels * sh.numel(weight)
    if len(shapes) > 2 and shapes[2]:
        flops += sh.numel(out)
    outs = list(out_shapes) if out_shapes is not None else [out]
    return Work("conv", flops, moved_bytes(shapes, outs, itemsize), gemm=_conv_gemm(transposed, groups, inp, weight, out))


def _conv_backward(name: str, op: str, shapes: list[Shape], itemsize: int,
                   out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    grad_out, inp, weight = shapes[0], shapes[1], shapes[2]
    transposed, groups = _conv_geometry(name, inp, weight, args, grad_out)
    mask = tuple(args.get("output_mask") or (True, True, args.get("bias_sizes") is not None))
    pixels = inp[0] * sh.numel(inp[2:]) if transposed else grad_out[0] * sh.numel(grad_out[2:])
    core = 2.0 * pixels * sh.numel(weight)
    # grad_input and grad_weight are each one GEMM the size of the forward.
    flops = core * (bool(mask[0]) + bool(mask[1])) + (sh.numel(grad_out) if mask[2] else 0)
    if out_shapes is not None:
        outs = list(out_shapes)
    else:
        outs = [s for s, want in zip((inp, weight, (grad_out[1],)), mask) if want]
    return Work("conv_backward", flops, moved_bytes(shapes, outs, itemsize),
                gemm=_conv_gemm(transposed, groups, inp, weight, grad_out))


# ------------------------------------------------------------------- attention
def causal_pairs(q_len: int, k_len: int) -> int:
    """Unmasked (query, key) pairs of a causal mask aligned top-left, as torch's ``is_causal``.

    Query i sees keys 0..i, so ``sum(min(i + 1, k_len))``: about half of
    ``q_len * k_len`` for a square mask.
    """
    if q_len <= k_len:
        return q_len * (q_len + 1) // 2
    return k_len * (k_len + 1) // 2 + (q_len - k_len) * k_len


def _qkv(shapes: list[Shape], first: int, layout: str) -> tuple[int, int, int, int, int]:
    q, k, v = shapes[first], shapes[first + 1], shapes[first + 2]
    if layout == "blhd":
        return q[0] * q[2], q[1], k[1], q[3], v[3]
    return sh.numel(q[:-2]), q[-2], k[-2], q[-1], v[-1]


def _is_causal(args: Mapping[str, object]) -> bool:
    # SDPA ops take is_causal; the raw efficient kernels a custom_mask_type
    # (1: causal from the top left, 2: from the bottom right).
    return bool(args.get("is_causal", False)) or args.get("custom_mask_type") in (1, 2)


def _pairs(q_len: int, k_len: int, args: Mapping[str, object]) -> float:
    """The (query, key) pairs a fused kernel computes: all, the causal ones, or those of the blocks a
    block-sparse mask computes (``block_fraction``: its computed blocks, partial and full, over all blocks)."""
    fraction = args.get("block_fraction")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
            raise ValueError(f"block_fraction: expected a number in [0, 1], got {fraction!r}")
        return float(fraction) * q_len * k_len
    return causal_pairs(q_len, k_len) if _is_causal(args) else q_len * k_len


def _attention(name: str, op: str, shapes: list[Shape], itemsize: int,
               out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    first, layout = ops.ATTENTION_FORWARD[name]
    bh, q_len, k_len, d_qk, d_v = _qkv(shapes, first, layout)
    pairs = _pairs(q_len, k_len, args)
    # Two matmuls: S = Q K^T (d_qk) and O = P V (d_v).
    flops = 2.0 * bh * pairs * (d_qk + d_v)
    q = shapes[first]
    outs = list(out_shapes) if out_shapes is not None else [tuple(q[:-1]) + (d_v,)]
    return Work("attention", flops, moved_bytes(shapes, outs, itemsize),
                keys_per_query=pairs / q_len if q_len else 0.0, scores=float(bh * pairs))


def _attention_backward(name: str, op: str, shapes: list[Shape], itemsize: int,
                        out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    first, layout = ops.ATTENTION_BACKWARD[name]
    bh, q_len, k_len, d_qk, d_v = _qkv(shapes, first, layout)
    pairs = _pairs(q_len, k_len, args)
    # Five matmuls: S = Q K^T recomputed, dQ = dS K, dK = dS^T Q (d_qk each);
    # dV = P^T dO, dP = dO V^T (d_v each): 2.5x the forward when d_qk = d_v.
    flops = 2.0 * bh * pairs * (3 * d_qk + 2 * d_v)
    outs = list(out_shapes) if out_shapes is not None else list(shapes[first:first + 3])
    return Work("attention_backward", flops, moved_bytes(shapes, outs, itemsize),
                keys_per_query=pairs / q_len if q_len else 0.0, scores=float(bh * pairs))


def _attention_math(name: str, op: str, shapes: list[Shape], itemsize: int,
                    out_shapes: Sequence[Shape] | None, args: Mapping[str, object]) -> Work:
    bh, q_len, k_len, d_qk, d_v = _qkv(shapes, 0, "bhld")
    # The unfused path computes every score and masks afterwards, so causal
    # masking saves nothing; softmax adds ~5 FLOPs per score.
    scores = bh * q_len * k_len
    flops = 2.0 * scores * (d_qk + d_v) + 5.0 * scores
    q = shapes[0]
    outs = list(out_shapes) if out_shapes is not None else [tuple(q[:-1]) + (d_v,)]
    # The score matrix goes through HBM: written, read by softmax, written
    # back as probabilities, read by P @ V.
    moved = moved_bytes(shapes, outs, itemsize) + 4.0 * scores * itemsize
    return Work("attention_math", flops, moved, gemm=(q_len, k_len, d_qk))


_COUNTERS = {
    "matmul": _matmul,
    "conv": _conv,
    "conv_backward": _conv_backward,
    "attention": _attention,
    "attention_backward": _attention_backward,
    "attention_math": _attention_math,
}

__all__ = ["count", "causal_pairs"]
