"""What each chip kind computes in: the per-kind capability table (pure Python, no torch).

One kind per file under ``devices/chips/`` (the file name is the kind,
beside its chip's figures); each defines ``CAPABILITIES = Capabilities(...)``.
A kind's table answers, for an op class and a dtype, whether the real chip's
stack computes in it (``native``), accepts it but computes in another format
(``converted``), or refuses it (``unsupported``), with the reason, the source
and the error the real stack raises where it is documented::

    >>> import devices
    >>> devices.capabilities("trn2").support("matmul", "float64").level
    'unsupported'
    >>> devices.capabilities("h100").support("matmul", "float8_e4m3fn").instead
    'torch._scaled_mm (per-tensor or row-wise scales; torchao.float8 wraps it)'

Rules are data, read in order: the first rule naming the op class (or ``*``)
and the dtype answers.  Every kind's rules cover every (op class, dtype) pair
of :data:`OP_CLASSES` x :data:`DTYPES` (tested), so nothing is answered by an
unstated default; where no source says either way the rule's status is
``assumption`` and its reason says what was assumed.

:func:`op_class` names the class of an ATen op (from the cost model's
classification, so the two never disagree on what an op is).

Sections other helpers extend: a :class:`Capabilities` record holds
``compute`` (these rules) and ``cuda`` (how the kind answers torch.cuda's
device queries); numerics (rounding modes, block formats, accumulation) are
further fields of the same record, one file per kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from devices.capability_numerics import (
    STATUSES,
    Accumulation, BlockFormat, Rounding, accumulation_for, block_format_for,
)

LEVELS: tuple[str, ...] = ("native", "converted", "unsupported")
"""How a kind's real stack treats an (op class, dtype):

``native``: computed in that dtype; ``converted``: accepted, computed in
another format (results can differ from the CPU's); ``unsupported``: refused
(the op fails on the real chip)."""

OP_CLASSES: tuple[str, ...] = (
    "matmul", "conv", "attention", "scaled_matmul", "elementwise", "reduction", "data_movement",
)
"""Op classes the table distinguishes.

``matmul``: mm, bmm, addmm, linear, baddbmm, matmul, dot ...; ``conv``:
convolutions and their backward; ``attention``: fused and unfused
scaled-dot-product attention; ``scaled_matmul``: the dedicated low-precision
GEMM entry points (``torch._scaled_mm``, ``torch._scaled_grouped_mm``,
``torch._int_mm``); ``elementwise``: unary/binary math, activations, norms,
softmax, losses, pooling, optimizer (foreach) kernels; ``reduction``: sums,
means, norms, scans, sorts; ``data_movement``: copies, casts, indexing,
concatenation, fills, factories, views."""

DTYPES: tuple[str, ...] = (
    "float64", "float32", "float16", "bfloat16",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
    "complex128", "complex64", "complex32",
)
"""Dtypes the table covers: every torch dtype a strided tensor on a slot can
have (the one dtype vocabulary, devices.dtypes, less quantized types,
which have their own layouts and never live on a slot)."""

ANY = "*"
"""An op-class wildcard in :attr:`Rule.op_classes`."""

# Groups the kind files compose rules from.
FLOAT8: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
FLOAT8_FNUZ: tuple[str, ...] = ("float8_e4m3fnuz", "float8_e5m2fnuz")
FLOAT4: tuple[str, ...] = ("float4_e2m1fn_x2",)
FLOAT: tuple[str, ...] = ("float32", "float16", "bfloat16")
INT64: tuple[str, ...] = ("int64", "uint64")
INTEGER: tuple[str, ...] = ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool")
COMPLEX: tuple[str, ...] = ("complex128", "complex64", "complex32")
GEMM: tuple[str, ...] = ("matmul", "conv", "attention")
VECTOR: tuple[str, ...] = ("elementwise", "reduction")


@dataclass(frozen=True, slots=True)
class Rule:
    """One sourced statement about a kind: these dtypes, in these op classes, are handled at this level."""

    op_classes: tuple[str, ...]
    """Op classes (of :data:`OP_CLASSES`) the rule speaks for, or ``("*",)`` for all."""
    dtypes: tuple[str, ...]
    """Dtypes (of :data:`DTYPES`) the rule speaks for."""
    level: str
    """One of :data:`LEVELS`."""
    reason: str
    """One line saying why, in the chip's terms (``"Trainium has no FP64 data type"``)."""
    source: str
    """Where it is documented, with a URL where there is one."""
    status: str
    """One of :data:`STATUSES`."""
    error: str = ""
    """The error the real stack raises (its own words, where documented), for ``unsupported`` rules."""
    instead: str = ""
    """What to use instead, for ``unsupported`` and ``converted`` rules."""

    def __post_init__(self) -> None:
        for name in self.op_classes:
            if name != ANY and name not in OP_CLASSES:
                raise ValueError(f"Rule.op_classes: unknown op class {name!r}; accepted: {', '.join(OP_CLASSES)}, *")
        for name in self.dtypes:
            if name not in DTYPES:
                raise ValueError(f"Rule.dtypes: unknown dtype {name!r}; accepted: {', '.join(DTYPES)}")
        if self.level not in LEVELS:
            raise ValueError(f"Rule.level: unknown level {self.level!r}; accepted: {', '.join(LEVELS)}")
        if self.status not in STATUSES:
            raise ValueError(f"Rule.status: unknown status {self.status!r}; accepted: {', '.join(STATUSES)}")
        if not self.source.strip() or not self.reason.strip():
            raise ValueError("Rule: every rule needs a reason and a source")

    def covers(self, op_class: str, dtype: str) -> bool:
        """True when the rule speaks for this op class and dtype."""
        return dtype in self.dtypes and (ANY in self.op_classes or op_class in self.op_classes)


@dataclass(frozen=True, slots=True)
class Support:
    """The answer for one (kind, op class, dtype): the rule that applies, resolved."""

    kind: str
    op_class: str
    dtype: str
    level: str
    reason: str
    source: str
    status: str
    error: str
    instead: str

    @property
    def native(self) -> bool:
        """True when the real chip's stack computes in this dtype."""
        return self.level == "native"

    @property
    def refused(self) -> bool:
        """True when the real chip's stack refuses the op (``unsupported``)."""
        return self.level == "unsupported"

    def describe(self) -> str:
        """One line: level, reason, what to use instead and the source."""
        text = f"{self.level} on {self.kind}: {self.reason}"
        if self.instead:
            text += f"; instead: {self.instead}"
        return f"{text} [{self.status}: {self.source}]"


@dataclass(frozen=True, slots=True)
class CudaIdentity:
    """How a kind answers torch.cuda's device queries when CUDA code runs on it.

    GPU kinds give their real values; Trainium kinds give a documented answer
    (``status="assumption"``, the note says which and why).
    """

    major: int
    """Compute capability, major (``torch.cuda.get_device_capability()[0]``)."""
    minor: int
    """Compute capability, minor."""
    multi_processor_count: int
    """Streaming multiprocessors (GPUs) or NeuronCores (Trainium) per chip."""
    l2_cache_size: int | None
    """L2 cache bytes, or None where no figure was found (never invented)."""
    source: str
    status: str
    """One of :data:`STATUSES`."""
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"CudaIdentity.status: unknown status {self.status!r}; accepted: {', '.join(STATUSES)}")
        if self.major < 0 or self.minor < 0 or self.multi_processor_count <= 0:
            raise ValueError("CudaIdentity: capability must be non-negative and the processor count positive")


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Everything the catalogue says a kind can compute, one record per kind."""

    kind: str
    """The chip kind (the file name)."""
    compute: tuple[Rule, ...]
    """Dtype support per op class, first matching rule wins; covers all of OP_CLASSES x DTYPES."""
    cuda: CudaIdentity
    """The kind's answers to torch.cuda device queries."""
    notes: tuple[str, ...] = field(default=())
    """Kind-wide remarks shown with the table (e.g. a default compiler cast)."""
    rounding: Rounding | None = None
    """How results are rounded to narrower types (see :mod:`devices.capability_numerics`)."""
    block_formats: tuple[BlockFormat, ...] = field(default=())
    """Block-scaled formats the kind computes with, each with its stack's scale rule."""
    accumulation: tuple[Accumulation, ...] = field(default=())
    """Matrix-engine accumulator types per operand type."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "compute", tuple(self.compute))
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "block_formats", tuple(self.block_formats))
        object.__setattr__(self, "accumulation", tuple(self.accumulation))

    def block_format(self, fmt: str) -> BlockFormat | None:
        """The kind's entry for block format ``fmt`` (``"mxfp8_e4m3"``...), or None where it has none."""
        return block_format_for(self.block_formats, fmt)

    def accumulator(self, operand: str) -> Accumulation | None:
        """What the matrix engine accumulates ``operand`` products in (a dtype or block format name), or None."""
        return accumulation_for(self.accumulation, operand)

    def rule_for(self, op_class: str, dtype: str) -> Rule | None:
        """The first rule covering (op class, dtype), or None (a gap the tests refuse)."""
        for rule in self.compute:
            if rule.covers(op_class, dtype):
                return rule
        return None

    def support(self, op_class: str, dtype: object) -> Support:
        """The resolved answer; ValueError naming the accepted values for an unknown class or dtype."""
        return _support(self.kind, _check_class(op_class), _check_dtype(dtype))

    def gaps(self) -> list[tuple[str, str]]:
        """(op class, dtype) pairs no rule covers (empty for a complete table)."""
        return [(c, d) for c in OP_CLASSES for d in DTYPES if self.rule_for(c, d) is None]

    def rows(self) -> list[dict]:
        """The table for display, exactly: which dtypes are native in which op classes, then every rule that
        answers something else, each with the op classes and dtypes it actually answers for.

        Keys: ``op_classes`` (``"all"`` or a comma list), ``dtypes``, ``level``, ``status``, ``reason``,
        ``instead``, ``source``.
        """
        def classes_text(classes) -> str:
            return "all" if len(classes) == len(OP_CLASSES) else ", ".join(c for c in OP_CLASSES if c in classes)

        out: list[dict] = []
        native: dict[tuple[str, ...], list[str]] = {}
        for op_cls in OP_CLASSES:
            dtypes = tuple(d for d in DTYPES if self.rule_for(op_cls, d).level == "native")
            native.setdefault(dtypes, []).append(op_cls)
        for dtypes, classes in native.items():
            out.append({"op_classes": classes_text(classes), "dtypes": ", ".join(dtypes), "level": "native",
                        "status": "", "reason": "", "instead": "", "source": ""})
        for rule in self.compute:
            if rule.level == "native":
                continue
            answered: dict[frozenset, list[str]] = {}
            for d in rule.dtypes:
                classes = frozenset(c for c in OP_CLASSES if self.rule_for(c, d) is rule)
                if classes:
                    answered.setdefault(classes, []).append(d)
            for classes, dtypes in answered.items():
                out.append({"op_classes": classes_text(classes), "dtypes": ", ".join(dtypes), "level": rule.level,
                            "status": rule.status, "reason": rule.reason, "instead": rule.instead,
                            "source": rule.source})
        return out


def _check_class(op_class: str) -> str:
    if op_class not in OP_CLASSES:
        raise ValueError(f"op_class: unknown op class {op_class!r}; accepted: {', '.join(OP_CLASSES)}")
    return op_class


def _check_dtype(dtype: object) -> str:
    """:func:`devices.dtype_name` of ``dtype``, narrowed to the dtypes the tables are written for (:data:`DTYPES`);
    ValueError listing them."""
    from devices.dtypes import dtype_name as canonical

    try:
        name = canonical(dtype)
    except ValueError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; accepted: {', '.join(DTYPES)}")
    return name


@lru_cache(maxsize=None)
def _support(kind: str, op_cls: str, dtype: str) -> Support:
    caps = capabilities(kind)
    rule = caps.rule_for(op_cls, dtype)
    if rule is None:
        raise ValueError(f"devices/chips/{kind}.py: no rule covers ({op_cls}, {dtype})")
    return Support(kind, op_cls, dtype, rule.level, rule.reason, rule.source, rule.status, rule.error,
                   rule.instead)


# Cost-model categories (devices.cost.op_families.classify) -> op classes.
_CLASS_OF_CATEGORY: Mapping[str, str] = MappingProxyType({
    "matmul": "matmul", "conv": "conv", "conv_backward": "conv",
    "attention": "attention", "attention_backward": "attention", "attention_math": "attention",
    "elementwise": "elementwise", "softmax": "elementwise", "softmax_backward": "elementwise",
    "norm": "elementwise", "norm_backward": "elementwise", "loss": "elementwise", "pool": "elementwise",
    "pool_backward": "elementwise", "multi_tensor": "elementwise", "unknown": "elementwise",
    "reduction": "reduction",
    "copy": "data_movement", "index": "data_movement", "creation": "data_movement",
    "embedding": "data_movement", "view": "data_movement", "none": "data_movement",
})
SCALED_MATMUL_OPS: frozenset[str] = frozenset({"_scaled_mm", "_scaled_grouped_mm", "_int_mm", "_scaled_mm_v2"})
"""Base names of the dedicated low-precision GEMM ops (class ``scaled_matmul``)."""


@lru_cache(maxsize=4096)
def op_class(op: str) -> str:
    """The op class of an ATen op name (``"aten::addmm"`` -> ``"matmul"``).

    Ops the cost model does not know are ``elementwise`` (the class whose
    dtype rules are the widest, so an unknown op is never refused for its class).
    """
    from devices.cost.op_families import classify

    category, base = classify(op)
    if base in SCALED_MATMUL_OPS:
        return "scaled_matmul"
    return _CLASS_OF_CATEGORY.get(category, "elementwise")


@lru_cache(maxsize=1)
def _load() -> Mapping[str, Capabilities]:
    # Discovered once, on first use, so `import devices` stays cheap.
    import devices.chips as package
    from devices.file_registry import load_records

    return load_records(package, "CAPABILITIES", Capabilities)  # type: ignore[return-value]


def capability_kinds() -> list[str]:
    """Every kind with a capability table, sorted."""
    return sorted(_load())


def capabilities(kind: str) -> Capabilities:
    """The capability table of a kind (case-insensitive); ValueError listing the kinds that have one."""
    table = _load()
    key = kind.strip().lower() if isinstance(kind, str) else kind
    if key not in table:
        raise ValueError(f"kind: no capability table for {kind!r}; kinds with one: {', '.join(sorted(table))}")
    return table[key]
