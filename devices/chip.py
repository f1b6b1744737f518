"""The chip record and the catalogue that finds chips by their kind.

One chip per file under ``devices/chips/``; the file name is the kind, and
each file defines ``CHIP = Chip(...)``.  Adding a chip is adding a file: the
catalogue discovers modules by name, so there is no table to edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from devices.dtypes import dtype_name
from devices.figure import Figure

VENDORS: tuple[str, ...] = ("nvidia", "aws")
"""Accepted values of :attr:`Chip.vendor`."""

FAMILIES: tuple[str, ...] = ("gpu", "trainium")
"""Accepted values of :attr:`Chip.family`."""

SCALE_UP_FABRICS: tuple[str, ...] = (
    "nvlink3", "nvlink4", "nvlink5", "nvlink-fusion", "neuronlink-v2", "neuronlink-v3", "neuronlink-v4",
)
"""Accepted values of :attr:`Chip.scale_up_fabric` (the chip's own link generation)."""

PEAK_KEYS: tuple[str, ...] = ("bfloat16", "float16", "tf32", "float8", "float4", "float32", "float64", "int8")
"""Keys a chip's :attr:`Chip.peak` may hold: torch dtype names; float8/float4 cover their variants, and
``tf32`` is the TF32 tensor-core rate float32 matmuls get under ``torch.backends.cuda.matmul.allow_tf32``."""

# Which catalogue keys answer a dtype, in order of preference.  The first key
# is the dtype's own family (float8_e4m3fn -> float8); a later key is a
# fallback and is recorded in the returned figure's note.  Why each fallback:
#   float16 -> bfloat16: every catalogued chip runs FP16 and BF16 at one rate
#                        (vendors list them together, "BF16/FP16").
#   float4  -> float8:   a chip without an FP4 path (H100, H200, Trn2) computes
#                        FP4 data at best at its FP8 rate after upcasting.
#   float8  -> bfloat16: likewise a chip without an FP8 path (A100) computes
#                        FP8 data at best at its BF16 rate.
#   tf32    -> float32:  a chip without a TF32 figure is bounded by its FP32 rate.
#   int8    -> float8:   NVIDIA lists dense INT8 at the FP8 rate through Hopper
#                        and Blackwell; the exceptions (A100, GB300) carry their own.
#                        Quantized types (qint8...) run on the integer path.
#   float64 -> float32:  Trainium has no FP64 units; the float32 figure is an
#                        optimistic upper bound, marked as such in the note.
#   other integers, bool, complex64 -> float32; complex128 -> float64 chain:
#                        no tensor-engine path; such ops are memory-bound in
#                        practice, so the compute rate is only a bound.
_FLOAT8 = ("float8", "bfloat16")
_FLOAT4 = ("float4", "float8", "bfloat16")
_INT8 = ("int8", "float8", "bfloat16")
_PEAK_RULES: dict[str, tuple[str, ...]] = {
    "bfloat16": ("bfloat16",),
    "float16": ("float16", "bfloat16"),
    "tf32": ("tf32", "float32"),
    "float32": ("float32",),
    "float64": ("float64", "float32"),
    "float8": _FLOAT8,
    "float8_e4m3fn": _FLOAT8, "float8_e5m2": _FLOAT8, "float8_e4m3fnuz": _FLOAT8,
    "float8_e5m2fnuz": _FLOAT8, "float8_e8m0fnu": _FLOAT8,
    "float4": _FLOAT4, "float4_e2m1fn_x2": _FLOAT4,
    "int8": _INT8, "uint8": _INT8,
    "qint8": _INT8, "quint8": _INT8, "qint32": _INT8, "quint4x2": _INT8, "quint2x4": _INT8,
    "int16": ("float32",), "int32": ("float32",), "int64": ("float32",),
    "uint16": ("float32",), "uint32": ("float32",), "uint64": ("float32",),
    "bool": ("float32",),
    "complex32": ("float16", "bfloat16"),
    "complex64": ("float32",),
    "complex128": ("float64", "float32"),
}


FIELD_UNITS: dict[str, str] = {"hbm_capacity": "B", "hbm_bandwidth": "B/s", "scale_up_bandwidth": "B/s",
                               "power": "W", "exp_rate": "exp/s"}
"""The unit of each of a :class:`Chip`'s single-figure fields (its peaks are FLOP/s, its prices USD/h)."""

PRICE_BASES: tuple[str, ...] = ("on-demand", "capacity-block", "reserved-effective")
"""Keys of :attr:`Chip.prices`, the bases a price per chip-hour is quoted on: ``on-demand`` (the EC2 list
rate), ``capacity-block`` (EC2 Capacity Blocks for ML, reserved ahead for a fixed term) and
``reserved-effective`` (the effective hourly rate of a reserved instance, the basis of Neuron's performance
pages). A comparison uses one basis for every chip in it (:mod:`devices.pricing`)."""

UNSET_KEYS: tuple[str, ...] = ("power", "price") + tuple(f"price.{b}" for b in PRICE_BASES)
"""Keys of :attr:`Chip.unset`: why ``power`` is None, why the chip has no price at all (``price``), or why one
basis has none (``price.<basis>``)."""


@dataclass(frozen=True, slots=True)
class Chip:
    """One accelerator's sourced figures (per chip, dense rates, SI units)."""

    kind: str
    """Catalogue key and file name, e.g. ``"h100"``."""
    name: str
    """Marketing name, e.g. ``"NVIDIA H100 SXM5"``."""
    vendor: str
    """One of :data:`VENDORS`."""
    family: str
    """One of :data:`FAMILIES`."""
    peak: Mapping[str, Figure]
    """Dense peak FLOP/s keyed by torch dtype name (see :data:`PEAK_KEYS`); read it with :meth:`peak_for`."""
    hbm_capacity: Figure
    """Device memory in bytes."""
    hbm_bandwidth: Figure
    """Device memory bandwidth in bytes/s."""
    scale_up_bandwidth: Figure
    """Bytes/s per direction per chip on its scale-up fabric (vendor bidirectional totals are halved)."""
    scale_up_fabric: str
    """One of :data:`SCALE_UP_FABRICS`."""
    power: Figure | None
    """Board power in W, or None where no figure was found (:attr:`unset` says why)."""
    exp_rate: Figure | None = None
    """Exponentials per second of the special-function units (NVIDIA's MUFU.EX2), the rate that bounds a fused
    attention kernel's softmax; None where no figure was found (then attention's time has no head-dim term:
    :mod:`devices.cost.model`)."""
    prices: Mapping[str, Figure] = field(default_factory=dict)
    """USD per chip-hour by basis (:data:`PRICE_BASES`): an instance's rate over its chips, each figure saying
    its basis, region and date; a basis without a public price is absent, never invented."""
    unset: Mapping[str, str] = field(default_factory=dict)
    """Why a figure is missing, by :data:`UNSET_KEYS` key (``"power"``, ``"price"``, ``"price.on-demand"``)."""

    def __post_init__(self) -> None:
        if self.vendor not in VENDORS:
            raise ValueError(f"Chip.vendor: unknown vendor {self.vendor!r}; accepted: {', '.join(VENDORS)}")
        if self.family not in FAMILIES:
            raise ValueError(f"Chip.family: unknown family {self.family!r}; accepted: {', '.join(FAMILIES)}")
        if self.scale_up_fabric not in SCALE_UP_FABRICS:
            raise ValueError(f"Chip.scale_up_fabric: unknown fabric {self.scale_up_fabric!r}; "
                             f"accepted: {', '.join(SCALE_UP_FABRICS)}")
        for key, fig in self.peak.items():
            if key not in PEAK_KEYS:
                raise ValueError(f"Chip.peak: unknown key {key!r} for {self.kind}; accepted: {', '.join(PEAK_KEYS)}")
            if fig.unit != "FLOP/s":
                raise ValueError(f"Chip.peak[{key!r}]: unit must be FLOP/s, got {fig.unit!r}")
        for required in ("bfloat16", "float32"):
            if required not in self.peak:
                raise ValueError(f"Chip.peak: {self.kind} needs a {required!r} figure")
        for field_name, unit in FIELD_UNITS.items():
            fig = getattr(self, field_name)
            if fig is not None and fig.unit != unit:
                raise ValueError(f"Chip.{field_name}: unit must be {unit!r}, got {fig.unit!r}")
        for basis, fig in self.prices.items():
            if basis not in PRICE_BASES:
                raise ValueError(f"Chip.prices: unknown basis {basis!r} for {self.kind}; accepted: "
                                 f"{', '.join(PRICE_BASES)}")
            if fig.unit != "USD/h":
                raise ValueError(f"Chip.prices[{basis!r}]: unit must be 'USD/h', got {fig.unit!r}")
        for key, reason in self.unset.items():
            if key not in UNSET_KEYS:
                raise ValueError(f"Chip.unset: unknown key {key!r} for {self.kind}; accepted: {', '.join(UNSET_KEYS)}")
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"Chip.unset[{key!r}]: give the reason the figure is missing")
            present = (self.power is not None if key == "power" else bool(self.prices) if key == "price"
                       else key.removeprefix("price.") in self.prices)
            if present:
                raise ValueError(f"Chip.unset[{key!r}]: {self.kind} has that figure; a reason is for a missing one")
        # Read-only views, so a caller cannot edit the shared catalogue entry.
        object.__setattr__(self, "peak", MappingProxyType(dict(self.peak)))
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        object.__setattr__(self, "unset", MappingProxyType(dict(self.unset)))

    def __hash__(self) -> int:
        # peak is a mapping (unhashable); the kind identifies a catalogue chip.
        return hash((self.kind, self.name))

    @property
    def projected(self) -> bool:
        """True if any of the chip's figures is projected (e.g. Trainium4)."""
        return any(fig is not None and fig.projected for fig in self.figures().values())

    def figures(self) -> dict[str, Figure | None]:
        """Every figure by field name (``"peak.bfloat16"``, ``"hbm_capacity"``, ...), in display order."""
        out: dict[str, Figure | None] = {f"peak.{key}": self.peak[key] for key in PEAK_KEYS if key in self.peak}
        out.update(
            hbm_capacity=self.hbm_capacity,
            hbm_bandwidth=self.hbm_bandwidth,
            scale_up_bandwidth=self.scale_up_bandwidth,
            power=self.power,
        )
        if self.exp_rate is not None:  # catalogued for NVIDIA parts only; attention's head-dim term needs it
            out["exp_rate"] = self.exp_rate
        out.update({f"price.{basis}": self.prices.get(basis) for basis in PRICE_BASES})
        return out

    @property
    def price_per_hour(self) -> Figure | None:
        """The on-demand price per chip-hour, or None (other bases: :attr:`prices`)."""
        return self.prices.get("on-demand")

    def missing(self, key: str) -> str:
        """Why the figure ``key`` (``"power"``, ``"price.<basis>"``) is unset: the chip's own reason, else the
        reason it has no price at all, else a plain statement that none was found."""
        if key in self.unset:
            return self.unset[key]
        if key.startswith("price.") and not self.prices and "price" in self.unset:
            return self.unset["price"]
        basis = key.removeprefix("price.")
        what = "a power figure" if key == "power" else f"{'an' if basis[0] in 'aeiou' else 'a'} {basis} price"
        return f"no public source giving {what} for {self.kind} was found; left unset rather than invented"

    def peak_for(self, dtype: object) -> Figure:
        """Dense peak FLOP/s for a dtype (any spelling of :func:`devices.dtype_name`, or a catalogue key).

        The chip's figure for the dtype's family (``float8_e4m3fn`` ->
        ``float8``) when it has one; otherwise the documented fallback
        (float16 -> bfloat16, float8 -> bfloat16, float4 -> float8 -> bfloat16,
        tf32 -> float32, int8/uint8/quantized -> float8 -> bfloat16, float64 ->
        float32 as an optimistic bound, other integers/bool/complex64 ->
        float32), with the rule appended to the returned figure's note.
        Unknown dtypes raise ValueError listing the accepted names.
        """
        name = dtype if type(dtype) is str and dtype in _PEAK_RULES else dtype_name(dtype)
        rule = _PEAK_RULES[name]
        for position, key in enumerate(rule):
            fig = self.peak.get(key)
            if fig is None:
                continue
            if position == 0:
                return fig
            return fig.with_note(f"{name} uses the {key} figure (fallback rule: no {rule[0]} figure for {self.kind})")
        raise ValueError(f"dtype: {self.kind} has no figure for {name!r} nor its fallbacks {', '.join(rule)}")


@lru_cache(maxsize=1)
def _load() -> Mapping[str, Chip]:
    # Discovered once, on first use, so `import devices` stays cheap.
    import devices.chips as package
    from devices.file_registry import load_records

    return load_records(package, "CHIP", Chip)  # type: ignore[return-value]


def kinds() -> list[str]:
    """Every catalogued chip kind, sorted (``["b200", "gb300", "h100", ...]``)."""
    return sorted(_load())


def catalogue() -> dict[str, Chip]:
    """A fresh dict of every catalogued chip by kind."""
    return dict(_load())


def chip(kind: str) -> Chip:
    """The chip of a kind (case-insensitive); ValueError naming it and listing the accepted kinds."""
    table = _load()
    key = kind.strip().lower() if isinstance(kind, str) else kind
    if key not in table:
        raise ValueError(f"kind: unknown chip kind {kind!r}; accepted kinds: {', '.join(sorted(table))}")
    return table[key]
