"""The numerics fields of a kind's capability record: rounding, block formats, accumulation.

Pure data (no torch), each entry sourced like a :class:`devices.capability.Rule`
and carrying a status (``published`` / ``secondary`` / ``projected`` /
``assumption``); where no source says, the status is ``assumption`` and the
entry says what was assumed. The names used here are the vocabularies of
:mod:`interop.numerics`: rounding modes (``nearest``, ``stochastic``), format
names (``mxfp8_e4m3``, ``nvfp4``...) and scale rules (``ocp``, ``trn3``,
``rceil``, ``nvfp4``); a test checks that every name used here exists there.

A slot in ``device`` numerics mode rounds the way its kind's record says.
"""

from __future__ import annotations

from dataclasses import dataclass

ROUNDING_MODES: tuple[str, ...] = ("nearest", "stochastic")
"""Rounding modes a record may name (interop.numerics.ROUNDINGS)."""

STATUSES: tuple[str, ...] = ("published", "secondary", "projected", "assumption")
"""How far a rule can be trusted: ``published`` (vendor documentation or the
framework's own source), ``secondary`` (a third party), ``projected`` (an
announced, not shipping, chip), ``assumption`` (no source says either way;
the reason states what was assumed)."""

STOCHASTIC_SCOPES: tuple[str, ...] = ("none", "op_outputs", "conversion_instructions")
"""Where a kind rounds stochastically: nowhere; every FP32 -> narrower result its engines write
(Trainium, when enabled); or only in conversion instructions a kernel chooses (Blackwell's
``cvt.rs``), never in the framework's own ops."""


def _check_status(owner: str, status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"{owner}.status: unknown status {status!r}; accepted: {', '.join(STATUSES)}")


@dataclass(frozen=True, slots=True)
class Rounding:
    """How a kind rounds results to narrower floating-point types."""

    default: str
    """The rounding mode op results get unless something switches it (one of :data:`ROUNDING_MODES`)."""
    stochastic_scope: str
    """One of :data:`STOCHASTIC_SCOPES`."""
    stochastic_dtypes: tuple[str, ...]
    """Result dtypes that can be rounded stochastically (torch dtype names)."""
    switch: str
    """How stochastic rounding is turned on (an environment variable, an instruction), or ``""``."""
    algorithm: str
    """What is known of the stochastic algorithm and its random source, and what this project assumes."""
    source: str
    status: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.default not in ROUNDING_MODES:
            raise ValueError(f"Rounding.default: unknown mode {self.default!r}; accepted: {', '.join(ROUNDING_MODES)}")
        if self.stochastic_scope not in STOCHASTIC_SCOPES:
            raise ValueError(f"Rounding.stochastic_scope: unknown scope {self.stochastic_scope!r}; "
                             f"accepted: {', '.join(STOCHASTIC_SCOPES)}")
        if (self.stochastic_scope == "none") != (not self.stochastic_dtypes):
            raise ValueError("Rounding: stochastic_dtypes must be empty exactly when stochastic_scope is 'none'")
        _check_status("Rounding", self.status)

    def stochastic_outputs(self, dtype: str) -> bool:
        """True when the kind can round op results of ``dtype`` stochastically (not only in custom kernels)."""
        return self.stochastic_scope == "op_outputs" and dtype in self.stochastic_dtypes


@dataclass(frozen=True, slots=True)
class BlockFormat:
    """A block-scaled format a kind computes with, and the scale rule its stack quantizes with."""

    format: str
    """Format name as :func:`interop.numerics.quantize` takes it (``"mxfp8_e4m3"``, ``"nvfp4"``)."""
    block: int
    """Elements per scale."""
    element: str
    """Element type (``e4m3``, ``e5m2``, ``e3m2``, ``e2m3``, ``e2m1``)."""
    scale: str
    """Scale type (``e8m0``, or ``e4m3 + fp32 tensor scale`` for NVFP4)."""
    scale_rule: str
    """The rule the kind's own quantizer uses (``trn3``, ``rceil``, ``ocp``, ``nvfp4``)."""
    source: str
    status: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.block <= 0:
            raise ValueError(f"BlockFormat.block: expected a positive integer, got {self.block!r}")
        _check_status("BlockFormat", self.status)


@dataclass(frozen=True, slots=True)
class Accumulation:
    """What a kind's matrix engine accumulates in, for some operand types."""

    inputs: tuple[str, ...]
    """Operand types (torch dtype names or block format names) this entry speaks for."""
    accumulator: str
    """The accumulator type (``float32``)."""
    outputs: tuple[str, ...]
    """Result types the engine writes."""
    source: str
    status: str
    note: str = ""

    def __post_init__(self) -> None:
        _check_status("Accumulation", self.status)


def accumulation_for(entries: tuple[Accumulation, ...], operand: str) -> Accumulation | None:
    """The first entry speaking for ``operand`` (a dtype or block format name), or None."""
    for entry in entries:
        if operand in entry.inputs:
            return entry
    return None


def block_format_for(entries: tuple[BlockFormat, ...], fmt: str) -> BlockFormat | None:
    """The kind's entry for block format ``fmt``, or None where the kind has none."""
    for entry in entries:
        if entry.format == fmt:
            return entry
    return None
