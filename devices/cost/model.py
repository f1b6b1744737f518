"""The per-op estimate: roofline time with size-dependent efficiencies.

    seconds = max(FLOPs / (peak * e_compute), bytes / (bandwidth * e_memory)) + launch overhead

Peak and bandwidth come from the chip catalogue (:mod:`devices.chip`), the
efficiencies and the overhead from :mod:`devices.cost.efficiency`; every
figure used is returned in :attr:`Estimate.sources`.  Nothing runs: this is
arithmetic on shapes, cached, because the timeline asks once per recorded op.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence

from devices.cost import efficiency as eff
from devices.cost import recurrent
from devices.cost.op_families import base_name
from devices.cost.flops import count
from devices.cost.work import Work
from devices.dtypes import dtype_label, dtype_name, itemsize
from devices.figure import Figure

BOUNDS = ("compute", "memory", "overhead", "none")
"""Values of :attr:`Estimate.bound`."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """Modelled cost of one op on one chip kind (a model, never a measurement)."""

    seconds: float
    """Modelled duration: roofline term plus launch overhead (0 for views)."""
    flops: float
    """Floating-point operations counted for the op (multiply-add = 2)."""
    bytes: float
    """HBM bytes read plus written."""
    bound: str
    """What sets the time: "compute", "memory", "overhead" (overhead exceeds the roofline term) or "none" (no work)."""
    kind: str
    """Chip kind the estimate is for."""
    op: str
    """The op as given (``"aten::mm"``)."""
    dtype: str
    """Canonical torch dtype name."""
    projected: bool
    """True when the chip figures used are projections (e.g. every trn4 figure)."""
    estimated_by_default: bool
    """True when the op (or its shapes) was not understood: bytes-only estimate from input+output sizes."""
    sources: tuple[Figure, ...]
    """Every figure the estimate used: peak, bandwidth, efficiencies, overhead."""
    category: str = ""
    """Op family (:func:`devices.cost.op_families.classify`)."""
    compute_seconds: float = 0.0
    """FLOPs / (peak * compute efficiency)."""
    memory_seconds: float = 0.0
    """bytes / (bandwidth * memory efficiency)."""
    overhead_seconds: float = 0.0
    """Launch overhead: the per-launch figure times :attr:`launches`."""
    launches: int = 1
    """Kernel launches the op issues (several, or none, for a multi-tensor op; see :mod:`devices.cost.multi_tensor`)."""
    note: str = ""
    """Why the estimate is a default one, when it is."""


def estimate(kind: str, op: str, shapes: Sequence[Sequence[int]], dtype: object, *,
             out_shapes: Sequence[Sequence[int]] | None = None,
             args: Mapping[str, object] | None = None, list_length: int | None = None) -> Estimate:
    """Modelled cost of ``op`` on inputs of ``shapes`` and ``dtype`` on a chip of ``kind``.

    ``op`` is ``"aten::name"`` or ``"aten::name.overload"``; ``shapes`` the
    input tensor shapes in argument order (scalars omitted); ``dtype`` a
    torch dtype name (``"bfloat16"``, ``"float8_e4m3fn"``) or a
    ``torch.dtype``; ``out_shapes`` the output shapes where known (inferred
    otherwise); ``args`` the non-tensor arguments by schema name
    (``{"is_causal": True}``, ``{"dim": [-1], "keepdim": True}``);
    ``list_length`` the tensors per list of a multi-tensor op (``_foreach_*``,
    ``_fused_adamw_``, ...), whose tensor lists arrive flattened in ``shapes``
    (inferred from the shapes when absent: see
    :func:`devices.cost.multi_tensor.lists`).

    An op without a cost rule gets a bytes-only estimate flagged
    ``estimated_by_default``.  Unknown kinds and dtypes raise ValueError.
    Results are cached.

    >>> estimate("h200", "aten::mm", [(8192, 8192), (8192, 8192)], "bfloat16").bound
    'compute'
    """
    if list_length is not None:
        if isinstance(list_length, bool) or not isinstance(list_length, int) or list_length < 0:
            raise ValueError(f"list_length: expected a non-negative int, got {list_length!r}")
        args = {**(args or {}), "list_length": list_length}
    try:
        return _estimate(kind, op, tuple(map(tuple, shapes)), dtype if type(dtype) is str else dtype_name(dtype),
                         None if out_shapes is None else tuple(map(tuple, out_shapes)),
                         _freeze_args(args) if args else ())
    except TypeError as exc:
        raise ValueError(f"{op}: shapes and args must be sequences of ints and plain values ({exc})") from None


def _freeze(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return dtype_label(value)  # torch.dtype and friends, by name


def _freeze_args(args: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((k, _freeze(v)) for k, v in args.items()))


@lru_cache(maxsize=1 << 16)
def _estimate(kind: str, op: str, shapes: tuple[tuple[int, ...], ...], dtype: str,
              out_shapes: tuple[tuple[int, ...], ...] | None,
              args: tuple[tuple[str, object], ...]) -> Estimate:
    from devices.chip import chip as lookup  # the catalogue, loaded on first use

    chip = lookup(kind)
    name = dtype_name(dtype)
    for shape in shapes + (out_shapes or ()):
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise ValueError(f"{op}: shapes must hold non-negative ints, got {shape!r}")
    layer = recurrent.parts(base_name(op), shapes) if base_name(op) in recurrent.SEQUENCE_OPS else None
    if layer is not None:
        return _sum(chip, op, name, [(_estimate(kind, part, ins, name, outs, ()), n) for part, ins, outs, n in layer])
    work = count(op, shapes, itemsize(name), out_shapes, dict(args))
    if work.category in ("view", "none"):
        return Estimate(0.0, 0.0, 0.0, "none", chip.kind, op, name, _projected(chip), False, (),
                        category=work.category, launches=0)
    return _price(chip, op, name, work)


def _sum(chip, op: str, dtype: str, parts: list[tuple[Estimate, int]]) -> Estimate:
    """One op that runs several kernels (:mod:`devices.cost.recurrent`): each priced by its own rule, times how
    often it runs, added up; bound by what bounds the part that takes the most time."""
    slowest = max(parts, key=lambda p: p[0].seconds * p[1])[0]
    return Estimate(
        seconds=sum(e.seconds * n for e, n in parts), flops=sum(e.flops * n for e, n in parts),
        bytes=sum(e.bytes * n for e, n in parts), bound=slowest.bound, kind=chip.kind, op=op, dtype=dtype,
        projected=any(e.projected for e, _ in parts), estimated_by_default=any(e.estimated_by_default for e, _ in parts),
        sources=tuple(dict.fromkeys(f for e, _ in parts for f in e.sources)), category="recurrent",
        compute_seconds=sum(e.compute_seconds * n for e, n in parts),
        memory_seconds=sum(e.memory_seconds * n for e, n in parts),
        overhead_seconds=sum(e.overhead_seconds * n for e, n in parts), launches=sum(e.launches * n for e, n in parts),
        note="; ".join(dict.fromkeys(e.note for e, _ in parts if e.note)))


def _price(chip, op: str, dtype: str, work: Work) -> Estimate:
    p = eff.params_for(chip.kind, chip.family)
    peak_fig = chip.peak_for(dtype)
    bw_fig = chip.hbm_bandwidth
    peak, bandwidth = peak_fig.value, bw_fig.value
    sources: list[Figure] = []

    compute = 0.0
    if work.flops > 0:
        sources.append(peak_fig)
        # Non-matmul arithmetic runs on vector units; never above the dtype's own peak.
        bf16 = chip.peak_for("bfloat16")
        vector = min(p.vector_fraction.value * bf16.value, peak)
        if work.category in ("matmul", "conv", "conv_backward", "attention_math") and work.gemm:
            # Tensor-engine GEMM, or the vector-unit GEMV path when that is faster
            # (dot, mv, skinny shapes): a library picks the faster kernel.
            rate = max(peak * eff.matmul_efficiency(p, *work.gemm), vector * p.matmul_efficiency.value)
            sources += [p.matmul_efficiency, p.matmul_half_dim, p.vector_fraction, bf16]
        elif work.category in ("attention", "attention_backward"):
            backward = work.category == "attention_backward"
            rate = peak * eff.attention_efficiency(p, work.keys_per_query, backward)
            sources += ([p.attention_backward_efficiency, p.attention_backward_half_keys] if backward
                        else [p.attention_efficiency, p.attention_half_keys])
            if chip.exp_rate is not None and work.scores > 0:
                rate /= eff.head_dim_factor(rate, chip.exp_rate.value, work.flops / work.scores, backward)
                sources.append(chip.exp_rate)
        else:
            rate = vector
            sources += [p.vector_fraction, bf16]
        compute = work.flops / rate

    memory = 0.0
    if work.bytes > 0:
        sources += [bw_fig, p.memory_efficiency, p.memory_latency]
        # Each launch streams its share: the latency term is paid per launch.
        rate = bandwidth * eff.memory_efficiency(p, bandwidth, work.bytes / max(work.launches, 1))
        if work.category == "index":
            rate *= p.gather_efficiency.value
            sources.append(p.gather_efficiency)
        memory = work.bytes / rate

    overhead = p.launch_overhead.value * work.launches
    sources.append(p.launch_overhead)
    sources += work.sources
    roof = max(compute, memory)
    bound = "overhead" if overhead > roof else "compute" if compute >= memory else "memory"
    used_chip = (peak_fig.projected and work.flops > 0) or (bw_fig.projected and work.bytes > 0)
    return Estimate(
        seconds=roof + overhead, flops=float(work.flops), bytes=float(work.bytes), bound=bound,
        kind=chip.kind, op=op, dtype=dtype,
        projected=bool(used_chip or (not work.flops and not work.bytes and _projected(chip))),
        estimated_by_default=work.by_default, sources=tuple(dict.fromkeys(sources)),
        category=work.category, compute_seconds=compute, memory_seconds=memory, overhead_seconds=overhead,
        launches=work.launches, note=work.note)


@lru_cache(maxsize=64)
def _projected(chip) -> bool:
    # Chip.projected walks every figure; an estimate (thousands per what-if) asks once per chip.
    return chip.projected


def cache_clear() -> None:
    """Forget cached estimates and parameters (after editing the catalogue in a test)."""
    _estimate.cache_clear()
    _projected.cache_clear()
    eff.params_for.cache_clear()
