"""Shape arithmetic for the cost model: sizes, broadcasting, output inference.

Only the rules the counting needs; where an output shape cannot be inferred
from the inputs and the args, callers fall back to what they were told
(``out_shapes``) or flag the estimate.
"""

from __future__ import annotations

from math import prod
from typing import Mapping, Sequence

Shape = tuple[int, ...]


def numel(shape: Sequence[int]) -> int:
    """Number of elements of a shape (1 for a 0-dim shape)."""
    return prod(shape)


def total(shapes: Sequence[Sequence[int]]) -> int:
    """Elements across several shapes."""
    return sum(prod(s) for s in shapes)


def broadcast(shapes: Sequence[Shape]) -> Shape:
    """The broadcast of several shapes (numpy rules); ValueError if they do not broadcast."""
    if not shapes:
        return ()
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, start=ndim - len(shape)):
            if size == out[i] or size == 1:
                continue
            if out[i] == 1:
                out[i] = size
            else:
                raise ValueError(f"shapes {list(shapes)} do not broadcast")
    return tuple(out)


def normalize_dims(dim: object, ndim: int) -> tuple[int, ...] | None:
    """Reduction dims as non-negative ints; None means "all dims" (absent, None or empty list)."""
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)  # type: ignore[arg-type]
    if not dims:
        return None
    return tuple(sorted({d % ndim if ndim else 0 for d in dims}))


def reduced(shape: Shape, args: Mapping[str, object]) -> Shape:
    """Output shape of a reduction over ``args["dim"]`` (all dims when absent), honouring keepdim."""
    dims = normalize_dims(args.get("dim"), len(shape))
    keep = bool(args.get("keepdim", False))
    if dims is None:
        return tuple(1 for _ in shape) if keep else ()
    return tuple(1 if i in dims else s for i, s in enumerate(shape) if keep or i not in dims)


def matmul_dims(name: str, shapes: Sequence[Shape]) -> tuple[int, int, int, int, Shape]:
    """(batch, M, N, K, output shape) of a matmul-family op; ValueError on shapes it cannot read.

    ``batch`` counts independent GEMMs (broadcast batch dims for ``matmul``
    and ``bmm``), so the FLOPs are ``2 * batch * M * N * K``.
    """
    if name in ("mm", "_int_mm", "_scaled_mm"):
        (m, k), (_, n) = shapes[0], shapes[1]
        return 1, m, n, k, (m, n)
    if name in ("addmm", "_addmm_activation"):
        (m, k), (_, n) = shapes[1], shapes[2]
        return 1, m, n, k, (m, n)
    if name == "bmm":
        (b, m, k), (_, _, n) = shapes[0], shapes[1]
        return b, m, n, k, (b, m, n)
    if name in ("baddbmm", "addbmm"):
        (b, m, k), (_, _, n) = shapes[1], shapes[2]
        return b, m, n, k, ((b, m, n) if name == "baddbmm" else (m, n))
    if name == "mv":
        (m, k) = shapes[0]
        return 1, m, 1, k, (m,)
    if name == "addmv":
        (m, k) = shapes[1]
        return 1, m, 1, k, (m,)
    if name in ("dot", "vdot", "inner") and len(shapes[0]) <= 1 and len(shapes[1]) <= 1:
        return 1, 1, 1, numel(shapes[0]), ()
    if name in ("outer", "ger", "addr"):
        a, b = (shapes[1], shapes[2]) if name == "addr" else (shapes[0], shapes[1])
        return 1, numel(a), numel(b), 1, (numel(a), numel(b))
    if name == "linear":
        x, w = shapes[0], shapes[1]
        n = w[0] if len(w) == 2 else 1
        # Leading dims fold into M: one (prod(leading), K) x (K, N) GEMM.
        return 1, numel(x[:-1]), n, x[-1], tuple(x[:-1]) + ((n,) if len(w) == 2 else ())
    if name in ("matmul", "inner"):
        return _matmul_general(shapes[0], shapes[1])
    raise ValueError(f"no matmul shape rule for {name}")


def _matmul_general(a: Shape, b: Shape) -> tuple[int, int, int, int, Shape]:
    # torch.matmul's rules: 1-D operands get a dim prepended/appended and
    # then removed from the result; leading dims broadcast.
    if len(a) == 0 or len(b) == 0:
        raise ValueError("matmul operands must be at least 1-D")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch = broadcast([a2[:-2], b2[:-2]])
    out: list[int] = list(batch)
    if len(a) > 1:
        out.append(m)
    if len(b) > 1:
        out.append(n)
    if len(b) <= 2:
        # A batched input times a matrix is one GEMM with the batch folded into M.
        return 1, numel(batch) * m, n, k, tuple(out)
    return numel(batch), m, n, k, tuple(out)


def per_dim(value: object, nd: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * nd
    if isinstance(value, int):
        return (value,) * nd
    vals = tuple(value)  # type: ignore[arg-type]
    return vals * nd if len(vals) == 1 else vals


def conv_output(inp: Shape, weight: Shape, args: Mapping[str, object], transposed: bool) -> Shape:
    """Output shape of a convolution from PyTorch's formula (stride/padding/dilation in ``args``)."""
    nd = len(inp) - 2
    spatial_in, kernel = inp[2:], weight[2:]
    stride = per_dim(args.get("stride"), nd, 1)
    dilation = per_dim(args.get("dilation"), nd, 1)
    padding_arg = args.get("padding")
    groups = int(args.get("groups") or 1)
    if transposed:
        pad = per_dim(padding_arg, nd, 0)
        extra = per_dim(args.get("output_padding"), nd, 0)
        spatial = tuple((i - 1) * s - 2 * p + d * (k - 1) + e + 1
                        for i, s, p, d, k, e in zip(spatial_in, stride, pad, dilation, kernel, extra))
        return (inp[0], weight[1] * groups) + spatial
    if padding_arg == "same":
        spatial = tuple(spatial_in)
    else:
        pad = (0,) * nd if padding_arg == "valid" else per_dim(padding_arg, nd, 0)
        spatial = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                        for i, s, p, d, k in zip(spatial_in, stride, pad, dilation, kernel))
    return (inp[0], weight[0]) + tuple(max(0, x) for x in spatial)
