"""Counting for the memory-bound op families: elementwise, reductions,
softmax, norms, embedding, indexing, copies, fills, multi-tensor kernels.

Each counter takes ``(name, op, shapes, itemsize, out_shapes, args)`` and
returns a :class:`devices.cost.work.Work`.  Output shapes are inferred when
``out_shapes`` is absent; the traffic is each input read once and each
output written once unless a comment says otherwise.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from devices.cost import multi_tensor as mt, op_families as ops, shapes as sh
from devices.cost.work import Shape, Work, moved_bytes as _moved, outputs as _outs
from devices.dtypes import INDEX_ITEMSIZE, itemsize as itemsize_of


def _elementwise(name, op, shapes, itemsize, out_shapes, args) -> Work:
    if name == "glu":
        x = shapes[0]
        dim = int(args.get("dim", -1)) % len(x)
        inferred = [x[:dim] + (x[dim] // 2,) + x[dim + 1:]]
    elif name in ("glu_backward", "native_dropout"):
        # glu_backward's grad is half the input; dropout also writes its mask.
        inferred = [shapes[-1]] if name == "glu_backward" else [shapes[0], shapes[0]]
    else:
        inferred = [sh.broadcast(shapes)] if out_shapes is None else []  # an op's own out_shapes need no inferring
    outs = _outs(out_shapes, inferred)
    per = ops.ELEMENTWISE_FLOPS.get(name, 1)
    return Work("elementwise", float(per * sh.numel(outs[0] if outs else ())), _moved(shapes, outs, itemsize))


def _creation(name, op, shapes, itemsize, out_shapes, args) -> Work:
    if out_shapes is not None:
        outs = list(out_shapes)
    elif args.get("size") is not None:
        size = args["size"]
        outs = [(int(size),) if isinstance(size, int) else tuple(int(s) for s in size)]  # type: ignore[union-attr]
    elif shapes:
        # *_like factories and in-place fills (fill_, zero_, normal_...) write
        # a tensor shaped like their first input.
        outs = [shapes[0]]
    else:
        raise ValueError("no output shape: pass out_shapes or args['size']")
    per = 2.0 if name in ("rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "uniform",
                          "normal", "exponential", "geometric", "log_normal", "cauchy", "random") else 0.0
    # A fill writes its output and reads nothing of size.
    return Work("creation", per * sh.total(outs), float(sh.total(outs) * itemsize))


_PAIRED = {"max", "min", "median", "nanmedian", "mode", "kthvalue", "aminmax", "var_mean", "std_mean",
           "cummax", "cummin", "sort", "topk"}


def _reduction(name, op, shapes, itemsize, out_shapes, args) -> Work:
    if name in ("max", "min") and len(shapes) >= 2:
        return _elementwise("maximum", op, shapes, itemsize, out_shapes, args)  # max.other: binary
    x = shapes[0]
    if name in ops.SHAPE_KEEPING_REDUCTIONS:
        out = x
    elif name == "topk" and "k" not in args and out_shapes:
        out = tuple(out_shapes[0])  # a slot's record: shapes without k, which the values' shape says
    elif name == "topk":
        dim = int(args.get("dim", -1)) % max(1, len(x))
        out = x[:dim] + (int(args["k"]),) + x[dim + 1:]
    elif name == "sum_to_size":
        out = tuple(args["size"])  # type: ignore[arg-type]
    else:
        out = sh.reduced(x, args)
    # values + indices (or values + second statistic) for the paired reductions.
    inferred = [out, out] if name in _PAIRED and (name not in ("max", "min") or "dim" in args) else [out]
    outs = _outs(out_shapes, inferred)
    return Work("reduction", float(ops.REDUCTION_FLOPS[name] * sh.numel(x)), _moved(shapes, outs, itemsize))


def _softmax(name, op, shapes, itemsize, out_shapes, args) -> Work:
    outs = _outs(out_shapes, [shapes[0]])
    # max, subtract, exp, sum, divide per element; rows fit on chip, so one read.
    return Work("softmax", 5.0 * sh.numel(shapes[0]), _moved(shapes, outs, itemsize))


def _softmax_backward(name, op, shapes, itemsize, out_shapes, args) -> Work:
    outs = _outs(out_shapes, [shapes[0]])
    return Work("softmax_backward", 4.0 * sh.numel(shapes[0]), _moved(shapes, outs, itemsize))


def _is_batch_norm(name: str) -> bool:
    return "batch_norm" in name and "no_training" not in name and "no_update" not in name


def _norm(name, op, shapes, itemsize, out_shapes, args) -> Work:
    x = shapes[0]
    outs = _outs(out_shapes, [x])
    per = 5.0 if "rms" in name else 8.0
    moved = _moved(shapes, outs, itemsize)
    if _is_batch_norm(name) and args.get("training", True):
        # Per-channel statistics span the whole batch: a separate pass reads x again.
        moved += sh.numel(x) * itemsize
    return Work("norm", per * sh.numel(x), moved)


def _norm_backward(name, op, shapes, itemsize, out_shapes, args) -> Work:
    grad_out, x = shapes[0], shapes[1]
    # grad_input, plus a gradient for each 1-D parameter (weight, bias).
    params = [s for s in shapes[2:] if len(s) == 1 and s[0] <= (x[-1] if "batch" not in name else x[1])]
    outs = _outs(out_shapes, [x] + params)
    per = 10.0 if "rms" in name else 16.0
    moved = _moved(shapes, outs, itemsize)
    if _is_batch_norm(name):
        moved += (sh.numel(grad_out) + sh.numel(x)) * itemsize  # reduce pass, then apply pass
    return Work("norm_backward", per * sh.numel(x), moved)


def _embedding(name, op, shapes, itemsize, out_shapes, args) -> Work:
    if name == "embedding":
        weight, idx = shapes[0], shapes[1]
        outs = _outs(out_shapes, [tuple(idx) + (weight[-1],)])
        # Only the looked-up rows are read: one row read per output row.
        return Work("embedding", 0.0, 2.0 * sh.total(outs) * itemsize + sh.numel(idx) * INDEX_ITEMSIZE)
    grad, idx = shapes[0], shapes[1]
    rows = args.get("num_weights")
    outs = _outs(out_shapes, [(int(rows), grad[-1])] if rows is not None else [])  # type: ignore[arg-type]
    # Zero the weight gradient, then read each grad row and read-modify-write its target row.
    moved = (sh.total(outs) + 3 * sh.numel(grad)) * itemsize + sh.numel(idx) * INDEX_ITEMSIZE
    return Work("embedding", float(sh.numel(grad)), float(moved))


_GATHERS = {"gather", "take", "take_along_dim", "index", "_unsafe_index", "index_select", "masked_select"}


def _index(name, op, shapes, itemsize, out_shapes, args) -> Work:
    first, stop = ops.INDEX[name]
    idx = shapes[first:stop] if stop != 0 else []
    idx_bytes = sh.total(idx) * INDEX_ITEMSIZE
    x = shapes[0]
    if name in _GATHERS:
        if name == "index_select":
            dim = int(args.get("dim", 0)) % max(1, len(x))
            inferred = x[:dim] + (sh.numel(idx[0]),) + x[dim + 1:]
        elif name in ("index", "_unsafe_index"):
            # Advanced indexing of the leading dims: broadcast(indices) + the rest.
            inferred = sh.broadcast(idx) + tuple(x[len(idx):])
        elif name == "masked_select":
            inferred = (sh.numel(x),)  # data-dependent; an upper bound
        else:
            inferred = idx[0]
        outs = _outs(out_shapes, [inferred])
        # Only gathered elements are read.
        return Work("index", 0.0, 2.0 * sh.total(outs) * itemsize + idx_bytes)
    if name in ("nonzero", "searchsorted", "bucketize", "one_hot"):
        if name == "nonzero":
            inferred = (sh.numel(x), len(x))  # every element non-zero: an upper bound
        elif name == "one_hot":
            inferred = tuple(x) + (int(args.get("num_classes", 1)),)
        else:
            inferred = shapes[1] if name == "searchsorted" else x
        outs = _outs(out_shapes, [inferred])
        return Work("index", float(sh.total(shapes)), float(sh.total(shapes) * itemsize
                                                           + sh.total(outs) * INDEX_ITEMSIZE))
    # Updates (scatter, index_add/copy/fill/put, masked_scatter, put): each
    # updated element's source is read and its target read-modified-written;
    # the out-of-place forms first copy self.
    if name in ("index_put", "_index_put_impl", "_unsafe_index_put"):
        updated = max(sh.numel(shapes[-1]), sh.numel(sh.broadcast(idx)) * sh.numel(x[len(idx):]))
    elif name == "index_fill":
        dim = int(args.get("dim", 0)) % max(1, len(x))
        updated = sh.numel(idx[0]) * (sh.numel(x) // max(1, x[dim]) if x else 1)
    elif name == "masked_scatter":
        updated = sh.numel(shapes[1])  # every mask element set: an upper bound
    else:
        updated = sh.numel(shapes[2]) if len(shapes) > 2 else sh.numel(idx[0])
    moved = 3 * updated * itemsize + idx_bytes
    if not _in_place(op):
        moved += 2 * sh.numel(x) * itemsize
    return Work("index", float(updated), float(moved))


def _in_place(op: str) -> bool:
    name = op.strip().split("::", 1)[-1]
    if name.startswith("aten."):
        name = name[len("aten."):]
    name = name.split(".", 1)[0]
    return name.endswith("_") and not name.endswith("__")


def _copy(name, op, shapes, itemsize, out_shapes, args) -> Work:
    x = shapes[0] if shapes else ()
    out_item = itemsize
    if name in ("_to_copy", "to") and args.get("dtype") is not None:
        out_item = itemsize_of(args["dtype"])
    if name == "_local_scalar_dense":
        return Work("copy", 0.0, float(itemsize))  # .item(): one element to the host
    if name == "copy":
        # copy_(self, src): read src, write self (src broadcasts into self).
        return Work("copy", 0.0, float(sh.numel(shapes[1]) * itemsize + sh.numel(x) * itemsize))
    if name in ops.VIEW_BACKWARD:
        # Zeros shaped like the view's base, then the grad copied into its window.
        base = tuple(args.get("input_sizes") or args.get("sizes") or x)  # type: ignore[arg-type]
        outs = _outs(out_shapes, [base])
        return Work("copy", 0.0, float((sh.numel(x) + sh.total(outs)) * itemsize))
    if name in ("cat", "concat", "concatenate", "_cat", "stack", "hstack", "vstack", "dstack"):
        inferred = [(sh.total(shapes),)]  # only the element count matters for traffic
    elif name == "repeat" and args.get("repeats") is not None:
        reps = tuple(args["repeats"])  # type: ignore[arg-type]
        padded = (1,) * (len(reps) - len(x)) + tuple(x)
        inferred = [tuple(r * s for r, s in zip(reps, padded))]
    elif name in ("repeat_interleave", "tile") and isinstance(args.get("repeats"), int):
        inferred = [(sh.numel(x) * int(args["repeats"]),)]  # type: ignore[arg-type]
    elif name == "constant_pad_nd" or "pad" in name:
        pad = tuple(args.get("pad") or args.get("padding") or ())  # type: ignore[arg-type]
        grown = list(x)
        for i in range(len(pad) // 2):
            grown[len(x) - 1 - i] += pad[2 * i] + pad[2 * i + 1]
        inferred = [tuple(grown)]
    elif name.endswith("_scatter"):
        # slice/select/diagonal_scatter: self copied, src written into it.
        inferred = [x]
    else:
        inferred = [x]
    outs = _outs(out_shapes, inferred)
    return Work("copy", 0.0, float(sh.total(shapes) * itemsize + sh.total(outs) * out_item))


def _multi_tensor(name, op, shapes, itemsize, out_shapes, args) -> Work:
    # One kernel over lists of tensors (foreach ops, fused optimizers), launched as often as PyTorch's
    # multi-tensor launch rule needs (devices.cost.multi_tensor). Every tensor of every list is read once;
    # in-place forms write their mutated lists, out-of-place ones their outputs.
    length = args.get("list_length")
    cut, _ = mt.lists(shapes, None if length is None else int(length))  # type: ignore[arg-type]
    first = cut[0] if cut else []
    fused = name.startswith("_fused_")
    walked = cut[:-1] if fused and name.startswith(mt.FUSED_OPTIMIZERS_WITH_STEPS) and len(cut) > 1 else cut
    in_place = _in_place(op)
    base = name[len("_foreach_"):] if name.startswith("_foreach_") else ""
    reduction = base in ("norm", "max")
    if out_shapes:
        outs = list(out_shapes)
    elif fused:
        # params and the optimizer's state lists; the gradients (the second list) are only read.
        outs = [s for i, lst in enumerate(walked) if i != 1 for s in lst]
    elif in_place:
        outs = list(first)
    else:
        outs = [()] * len(first) if reduction else list(first)
    depth = len(walked) + (0 if in_place or fused or reduction else 1)
    scalar_list = "ScalarList" in op
    n = mt.numels(first)
    count = mt.launches(n, depth, scalar_list=scalar_list)
    if reduction:
        count += mt.cleanup_launches(sum(1 for k in n if k))
    if fused:
        per = 12.0 if "adam" in name else 2.0
    elif reduction:
        per = float(ops.REDUCTION_FLOPS.get(base, 1))
    else:
        per = float(ops.ELEMENTWISE_FLOPS.get(base, 1))
    return Work("multi_tensor", per * sum(n), _moved(shapes, outs, itemsize), launches=count,
                sources=mt.sources(depth, scalar_list=scalar_list, reduction=reduction))


def _window_output(x: Shape, args: Mapping[str, object], name: str) -> Shape:
    nd = 1 if "1d" in name else 3 if "3d" in name else 2
    if args.get("output_size") is not None:
        return tuple(x[:-nd]) + tuple(args["output_size"])  # type: ignore[arg-type]
    if args.get("scale_factors") is not None:
        return tuple(x[:-nd]) + tuple(int(i * f) for i, f in zip(x[-nd:], args["scale_factors"]))  # type: ignore
    kernel = sh.per_dim(args["kernel_size"], nd, 1)
    stride = sh.per_dim(args.get("stride") or kernel, nd, 1)
    pad = sh.per_dim(args.get("padding"), nd, 0)
    dil = sh.per_dim(args.get("dilation"), nd, 1)
    ceil = bool(args.get("ceil_mode", False))
    spatial = tuple(-(-(i + 2 * p - d * (k - 1) - 1) // s) + 1 if ceil else (i + 2 * p - d * (k - 1) - 1) // s + 1
                    for i, k, s, p, d in zip(x[-nd:], kernel, stride, pad, dil))
    return tuple(x[:-nd]) + spatial


def _pool(name, op, shapes, itemsize, out_shapes, args) -> Work:
    x = shapes[0]
    out = _window_output(x, args, name) if out_shapes is None else None
    outs = list(out_shapes) if out_shapes is not None else [out, out] if "with_indices" in name else [out]
    # About one comparison or multiply-add per input element per window it falls in.
    return Work("pool", float(max(sh.numel(x), sh.numel(outs[0]))), _moved(shapes, outs, itemsize))


def _pool_backward(name, op, shapes, itemsize, out_shapes, args) -> Work:
    grad = shapes[0]
    if out_shapes is not None:
        outs = list(out_shapes)
    elif args.get("input_size") is not None:
        outs = [tuple(args["input_size"])]  # type: ignore[arg-type]
    else:
        outs = [shapes[1]]  # (grad_output, self, ...): grad_input is shaped like self
    # Zero the input gradient, then scatter-add each window's gradient.
    return Work("pool_backward", float(sh.total(outs) + sh.numel(grad)), _moved(shapes, outs, itemsize))


def _loss(name, op, shapes, itemsize, out_shapes, args) -> Work:
    target = shapes[2] if name.endswith("backward") else shapes[1]
    if name.endswith("backward"):
        # grad_input: zeros like the input, one element per target written.
        outs = _outs(out_shapes, [shapes[1]])
        moved = sh.total(outs) * itemsize + sh.numel(target) * (itemsize + INDEX_ITEMSIZE)
    else:
        outs = _outs(out_shapes, [()])
        moved = sh.numel(target) * (itemsize + INDEX_ITEMSIZE) + sh.total(outs) * itemsize
    return Work("loss", float(sh.numel(target)), float(moved))


COUNTERS = {
    "elementwise": _elementwise,
    "creation": _creation,
    "reduction": _reduction,
    "softmax": _softmax,
    "softmax_backward": _softmax_backward,
    "norm": _norm,
    "norm_backward": _norm_backward,
    "embedding": _embedding,
    "index": _index,
    "copy": _copy,
    "multi_tensor": _multi_tensor,
    "pool": _pool,
    "pool_backward": _pool_backward,
    "loss": _loss,
}
"""Counter of each memory-bound category of :func:`devices.cost.op_families.classify`."""
