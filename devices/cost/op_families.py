"""Op names: normalisation and the classification the cost model counts by.

Ops arrive as ``"aten::name"`` or ``"aten::name.overload"`` (also the
``torch.ops`` spelling ``"aten.name.overload"``).  The overload never changes
what an op costs here, and neither does the in-place or ``out=`` form (same
reads, same writes), so all of them classify by the base name.
"""

from __future__ import annotations

from functools import lru_cache

# Ops that only reinterpret metadata: no kernel runs, so they cost exactly 0.
VIEWS = frozenset("""
view view_as _unsafe_view _reshape_alias reshape as_strided alias detach lift lift_fresh
transpose permute t numpy_T mT mH T H adjoint matrix_H expand expand_as unsqueeze squeeze
select slice split split_with_sizes unsafe_split unsafe_split_with_sizes chunk unsafe_chunk
tensor_split hsplit vsplit dsplit unbind narrow diagonal unfold movedim moveaxis swapaxes swapdims
flatten unflatten ravel view_as_real view_as_complex real imag conj _conj _neg_view resolve_conj
resolve_neg positive _indices _values indices values crow_indices col_indices ccol_indices
row_indices _nested_view_from_buffer
""".split())

# Ops with no device work: allocation from a caching allocator, asserts, bookkeeping.
NO_WORK = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided empty_permuted resize resize_as
set record_stream _assert_async _assert_tensor_metadata _functional_assert_async sym_constrain_range
_assert_scalar sym_constrain_range_for_size _resize_output is_same_size _has_same_storage_numel
_fused_sdp_choice _has_compatible_shallow_copy_type is_pinned
""".split())

MATMUL = frozenset("""
mm bmm addmm matmul linear baddbmm addbmm addmv mv dot vdot inner _addmm_activation _scaled_mm
_int_mm outer ger addr
""".split())

CONV = frozenset("""
convolution _convolution conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d
cudnn_convolution cudnn_convolution_transpose _convolution_mode convolution_overrideable
mkldnn_convolution _slow_conv2d_forward slow_conv3d_forward thnn_conv2d
""".split())

CONV_BACKWARD = frozenset("""
convolution_backward _convolution_backward convolution_backward_overrideable
""".split())

# Fused attention.  The value says where q/k/v sit in `shapes` and their layout:
# "bhld" is (..., heads, seq, dim) as SDPA takes them, "blhd" is (batch, seq,
# heads, dim) as the raw flash/efficient kernels take them.
ATTENTION_FORWARD: dict[str, tuple[int, str]] = {
    "scaled_dot_product_attention": (0, "bhld"),
    "_scaled_dot_product_flash_attention": (0, "bhld"),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "bhld"),
    "_scaled_dot_product_efficient_attention": (0, "bhld"),
    "_scaled_dot_product_cudnn_attention": (0, "bhld"),
    "_scaled_dot_product_fused_attention_overrideable": (0, "bhld"),
    "_flash_attention_forward": (0, "blhd"),
    "_efficient_attention_forward": (0, "blhd"),
    # FlexAttention's higher-order op (q, k, v first; a BlockMask's computed-block fraction in args).
    "flex_attention": (0, "bhld"),
}
ATTENTION_BACKWARD: dict[str, tuple[int, str]] = {
    "_scaled_dot_product_flash_attention_backward": (1, "bhld"),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhld"),
    "_scaled_dot_product_efficient_attention_backward": (1, "bhld"),
    "_scaled_dot_product_cudnn_attention_backward": (1, "bhld"),
    "_scaled_dot_product_fused_attention_overrideable_backward": (1, "bhld"),
    "_flash_attention_backward": (1, "blhd"),
    "_efficient_attention_backward": (1, "blhd"),
    "flex_attention_backward": (0, "bhld"),
}
# The unfused reference path materialises the score matrix in memory.
ATTENTION_MATH = frozenset({"_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps"})

# Arithmetic per output element a straightforward kernel issues; an op not
# listed costs 1.  These ops are memory-bound on every catalogued chip, so the
# counts matter only for FLOP totals, not for time.
ELEMENTWISE_FLOPS: dict[str, float] = {
    # unary
    "abs": 1, "neg": 1, "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1,
    "sqrt": 1, "rsqrt": 1, "reciprocal": 1, "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1,
    "atan": 1, "sinh": 1, "cosh": 1, "tanh": 4, "asinh": 1, "acosh": 1, "atanh": 1, "sigmoid": 4,
    "logit": 2, "erf": 1, "erfc": 1, "erfinv": 1, "relu": 1, "relu6": 1, "gelu": 8, "silu": 4,
    "mish": 6, "elu": 3, "selu": 3, "celu": 3, "leaky_relu": 2, "hardtanh": 2, "hardsigmoid": 3,
    "hardswish": 4, "softplus": 4, "softshrink": 2, "hardshrink": 1, "threshold": 1, "sign": 1,
    "sgn": 1, "floor": 1, "ceil": 1, "round": 1, "trunc": 1, "frac": 1, "bitwise_not": 1,
    "logical_not": 1, "clamp": 2, "clamp_min": 1, "clamp_max": 1, "clip": 2, "nan_to_num": 2,
    "isnan": 1, "isinf": 1, "isfinite": 1, "isneginf": 1, "isposinf": 1, "square": 1, "lgamma": 1,
    "digamma": 1, "polygamma": 1, "i0": 1, "sinc": 2, "deg2rad": 1, "rad2deg": 1, "glu": 5,
    "native_dropout": 2, "dropout": 2, "rrelu_with_noise": 2, "prelu": 2, "_prelu_kernel": 2,
    "tril": 1, "triu": 1, "signbit": 1, "_to_dense": 0,
    # binary and ternary
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "true_divide": 1, "floor_divide": 1,
    "remainder": 1, "fmod": 1, "pow": 1, "float_power": 1, "atan2": 1, "maximum": 1, "minimum": 1,
    "fmax": 1, "fmin": 1, "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1,
    "logical_and": 1, "logical_or": 1, "logical_xor": 1, "bitwise_and": 1, "bitwise_or": 1,
    "bitwise_xor": 1, "bitwise_left_shift": 1, "bitwise_right_shift": 1, "__and__": 1, "__or__": 1,
    "__xor__": 1, "__lshift__": 1, "__rshift__": 1, "__iand__": 1, "__ior__": 1, "__ixor__": 1,
    "hypot": 3, "copysign": 1, "xlogy": 2, "special_xlog1py": 2, "heaviside": 1, "nextafter": 1,
    "lerp": 2, "addcmul": 2, "addcdiv": 2, "where": 1, "masked_fill": 1, "isclose": 3,
    "logaddexp": 4, "logaddexp2": 4, "gcd": 1, "lcm": 1, "ldexp": 1, "mse_loss": 2,
    "smooth_l1_loss": 3, "huber_loss": 3, "binary_cross_entropy": 4,
    "binary_cross_entropy_with_logits": 6, "bernoulli": 2,
    # backward of the activations (grad * d activation)
    "gelu_backward": 12, "silu_backward": 6, "threshold_backward": 1, "relu_backward": 1,
    "sigmoid_backward": 2, "tanh_backward": 2, "hardtanh_backward": 2, "elu_backward": 3,
    "leaky_relu_backward": 2, "softplus_backward": 5, "hardswish_backward": 4,
    "hardsigmoid_backward": 2, "mish_backward": 10, "native_dropout_backward": 1, "logit_backward": 3,
    "glu_backward": 6, "softshrink_backward": 1, "hardshrink_backward": 1, "rrelu_with_noise_backward": 1,
    "mse_loss_backward": 3, "smooth_l1_loss_backward": 3, "huber_loss_backward": 3,
    "binary_cross_entropy_backward": 5, "_prelu_kernel_backward": 3, "prelu_backward": 3,
    # fused recurrent cells (CUDA's RNN.cu math), per element of the first output, counted from the formulas:
    # the LSTM cell ~36 operations per row and hidden unit (gate sums, three sigmoids and two tanh, the cell
    # update) for one hy element; its backward ~24 per row and hidden unit over the 4 gate gradients; the GRU
    # cell ~25 per hy element; its backward ~20 over the 3 input-gate gradients.
    "_thnn_fused_lstm_cell": 36, "_thnn_fused_lstm_cell_backward_impl": 6, "_thnn_fused_gru_cell": 25,
    "_thnn_fused_gru_cell_backward": 7,
}

# Ops that write a tensor without reading one (fills, factories, in-place
# random fills): the output is all their traffic.
CREATION = frozenset("""
zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full scalar_tensor arange
linspace logspace eye rand rand_like randn randn_like randint randint_like randperm fill zero
uniform normal exponential geometric log_normal cauchy random
""".split())

REDUCTION_FLOPS: dict[str, float] = {
    "sum": 1, "mean": 1, "nansum": 1, "nanmean": 2, "prod": 1, "amax": 1, "amin": 1, "max": 1,
    "min": 1, "aminmax": 2, "argmax": 1, "argmin": 1, "var": 3, "std": 4, "var_mean": 3,
    "std_mean": 4, "norm": 2, "linalg_vector_norm": 2, "frobenius_norm": 2, "logsumexp": 4,
    "all": 1, "any": 1, "count_nonzero": 1, "cumsum": 1, "cumprod": 1, "cummax": 1, "cummin": 1,
    "logcumsumexp": 4, "median": 4, "nanmedian": 4, "mode": 4,
    "kthvalue": 4, "topk": 4, "sort": 8, "argsort": 8, "sum_to_size": 1,
}
# Reductions that keep the input's shape (scans, sorts).
SHAPE_KEEPING_REDUCTIONS = frozenset("""
cumsum cumprod cummax cummin logcumsumexp sort argsort
""".split())

SOFTMAX = frozenset("""
softmax _softmax log_softmax _log_softmax _safe_softmax _masked_softmax special_softmax
""".split())
SOFTMAX_BACKWARD = frozenset("""
_softmax_backward_data _log_softmax_backward_data _masked_softmax_backward
""".split())

NORM = frozenset("""
native_layer_norm layer_norm rms_norm _fused_rms_norm native_batch_norm batch_norm
_native_batch_norm_legit _native_batch_norm_legit_no_training _native_batch_norm_legit_functional
_batch_norm_with_update _batch_norm_no_update cudnn_batch_norm miopen_batch_norm
native_group_norm group_norm instance_norm _batch_norm_impl_index
""".split())
NORM_BACKWARD = frozenset("""
native_layer_norm_backward _fused_rms_norm_backward native_batch_norm_backward batch_norm_backward
cudnn_batch_norm_backward miopen_batch_norm_backward native_group_norm_backward
_batch_norm_impl_index_backward
""".split())

EMBEDDING = frozenset({"embedding", "embedding_dense_backward", "embedding_backward"})

# Indexing ops: which `shapes` positions hold int64 index tensors, as
# (first, stop) into the list; stop None means "to the end", negative counts
# from the end.
INDEX: dict[str, tuple[int, int | None]] = {
    "index_select": (1, 2), "gather": (1, 2), "scatter": (1, 2), "scatter_add": (1, 2),
    "scatter_reduce": (1, 2), "index_add": (1, 2), "index_copy": (1, 2), "index_fill": (1, 2),
    "index_reduce": (1, 2), "index": (1, None), "_unsafe_index": (1, None), "index_put": (1, -1),
    "_index_put_impl": (1, -1), "_unsafe_index_put": (1, -1), "take": (1, 2), "take_along_dim": (1, 2),
    "put": (1, 2), "masked_scatter": (1, 2), "masked_select": (1, 2), "nonzero": (0, 0),
    "searchsorted": (0, 0), "bucketize": (0, 0), "one_hot": (0, 1),
}

COPY = frozenset("""
copy _to_copy to clone contiguous _copy_from _copy_from_and_resize lift_fresh_copy cat concat
concatenate _cat stack hstack vstack dstack repeat repeat_interleave tile flip fliplr flipud roll
rot90 constant_pad_nd pad reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d
replication_pad2d replication_pad3d _local_scalar_dense expand_copy permute_copy transpose_copy
view_copy t_copy unsqueeze_copy squeeze_copy slice_copy select_copy alias_copy detach_copy
as_strided_copy diagonal_copy unfold_copy narrow_copy split_copy split_with_sizes_copy unbind_copy
_reshape_copy _unsafe_view_copy slice_scatter select_scatter diagonal_scatter
as_strided_scatter _pin_memory pin_memory _to_cpu pixel_shuffle pixel_unshuffle channel_shuffle
native_channel_shuffle im2col col2im reflection_pad1d_backward reflection_pad2d_backward
reflection_pad3d_backward replication_pad1d_backward replication_pad2d_backward replication_pad3d_backward
""".split())

# Pooling and resampling: windows over the trailing (spatial) dims.
POOL = frozenset("""
max_pool1d max_pool2d max_pool3d max_pool1d_with_indices max_pool2d_with_indices
max_pool3d_with_indices avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d
adaptive_avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d
adaptive_max_pool3d upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d
_upsample_nearest_exact2d _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d
upsample_bicubic2d upsample_trilinear3d _upsample_bilinear2d_aa _upsample_bicubic2d_aa
""".split())
POOL_BACKWARD = frozenset("""
max_pool2d_with_indices_backward max_pool3d_with_indices_backward avg_pool2d_backward
avg_pool3d_backward _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward
adaptive_max_pool2d_backward adaptive_max_pool3d_backward upsample_nearest1d_backward
upsample_nearest2d_backward upsample_nearest3d_backward _upsample_nearest_exact1d_backward
_upsample_nearest_exact2d_backward _upsample_nearest_exact3d_backward upsample_linear1d_backward
upsample_bilinear2d_backward upsample_bicubic2d_backward upsample_trilinear3d_backward
_upsample_bilinear2d_aa_backward _upsample_bicubic2d_aa_backward
""".split())

# Class-index losses read one element per target, not the whole input.
LOSS = frozenset("""
nll_loss nll_loss_forward nll_loss2d nll_loss2d_forward nll_loss_backward nll_loss2d_backward
""".split())

# Backward of view ops: zeros shaped like the view's base, with the grad copied in.
VIEW_BACKWARD = frozenset("""
select_backward slice_backward diagonal_backward unfold_backward as_strided_backward
index_select_backward narrow_backward
""".split())

# Multi-tensor (optimizer) kernels: one launch over lists of tensors.
MULTI_TENSOR_PREFIXES = ("_foreach_", "_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad")


def base_name(op: str) -> str:
    """``"aten::add_.Tensor"`` -> ``"add"``; ``"aten.mm.default"`` -> ``"mm"``.

    Strips the namespace, the overload and an in-place trailing underscore
    (but not a dunder's: ``"__and__"`` stays).
    """
    name = op.strip()
    if "::" in name:
        name = name.split("::", 1)[1]
    elif name.startswith("aten."):
        name = name[len("aten."):]
    name = name.split(".", 1)[0]
    if name.endswith("_") and not name.endswith("__") and len(name) > 1:
        name = name[:-1]
    return name


@lru_cache(maxsize=4096)
def classify(op: str) -> tuple[str, str]:
    """(category, base name) of an op string.

    Categories: ``view``, ``none`` (no device work), ``matmul``, ``conv``,
    ``conv_backward``, ``attention``, ``attention_backward``,
    ``attention_math``, ``elementwise``, ``creation``, ``reduction``,
    ``softmax``, ``softmax_backward``, ``norm``, ``norm_backward``,
    ``embedding``, ``index``, ``copy``, ``pool``, ``pool_backward``,
    ``loss``, ``multi_tensor``, ``unknown``.  Ops outside the ``aten``
    namespace that do no device work (``profiler::``) are ``none``.
    """
    if op.startswith("profiler::"):
        return "none", op.split("::", 1)[1].split(".", 1)[0]
    name = base_name(op)
    if name in VIEWS:
        return "view", name
    if name in NO_WORK:
        return "none", name
    if name in MATMUL:
        return "matmul", name
    if name in CONV:
        return "conv", name
    if name in CONV_BACKWARD:
        return "conv_backward", name
    if name in ATTENTION_FORWARD:
        return "attention", name
    if name in ATTENTION_BACKWARD:
        return "attention_backward", name
    if name in ATTENTION_MATH:
        return "attention_math", name
    if name in SOFTMAX:
        return "softmax", name
    if name in SOFTMAX_BACKWARD:
        return "softmax_backward", name
    if name in NORM:
        return "norm", name
    if name in NORM_BACKWARD:
        return "norm_backward", name
    if name in EMBEDDING:
        return "embedding", name
    if name in INDEX:
        return "index", name
    if name in COPY or name in VIEW_BACKWARD:
        return "copy", name
    if name in POOL:
        return "pool", name
    if name in POOL_BACKWARD:
        return "pool_backward", name
    if name in LOSS:
        return "loss", name
    if name in CREATION:
        return "creation", name
    if name in REDUCTION_FLOPS:
        return "reduction", name
    if name in ELEMENTWISE_FLOPS:
        return "elementwise", name
    if name.startswith(MULTI_TENSOR_PREFIXES):
        return "multi_tensor", name
    return "unknown", name
