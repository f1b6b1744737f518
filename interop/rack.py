"""`Rack`: the set of slots the `hybrid` device exposes, and which one is current.

A rack is built from a :class:`devices.RackSpec` (a preset, a ``kind:count``
string or a TOML file). Making it current installs its slot table in the C++
runtime: ``hybrid:i`` is then slot ``i`` of the rack, with the chip kind,
memory capacity and backing (emulated on the host, or a real CUDA device) that
the spec gives it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import devices

# A DeviceIndex is an int8 in PyTorch, so a process can address 127 devices.
MAX_LIVE_SLOTS = 127

GPU_FAMILY = "gpu"


@dataclass(frozen=True, slots=True)
class RackDevice:
    """One slot of a live rack, as ``rack.devices`` lists it."""

    index: int
    """The device index: ``hybrid:<index>``."""
    kind: str
    """Chip kind (``trn3``, ``h100``...)."""
    backing: str
    """``emulated`` (host memory, CPU kernels) or ``cuda:N`` (a real GPU)."""
    capacity: int
    """Bytes the slot's allocator admits (the chip's HBM unless overridden)."""
    domain: str
    """The switch or torus domain the slot sits in."""
    spec: devices.Chip
    """The catalogue entry, every figure with its source and status."""

    @property
    def name(self) -> str:
        projected = " (projected spec)" if self.spec.projected and "projected" not in self.spec.name else ""
        return f"{self.spec.name}{projected} [{self.backing}]"


def _resolve_backing(requested: str, chip: devices.Chip, gpu_ordinal: int, cuda_count: int) -> str:
    if requested == "emulated":
        return "emulated"
    if requested.startswith("cuda:"):
        index = int(requested.split(":", 1)[1])
        if index >= cuda_count:
            raise ValueError(
                f"backing: {requested!r} asked for, but this machine has {cuda_count} CUDA device(s)"
                + ("" if cuda_count else " (torch.cuda.is_available() is False)")
            )
        return requested
    # auto: NVIDIA kinds ride on real GPUs where there are any; Trainium kinds
    # have no real counterpart here and stay emulated.
    if chip.family == GPU_FAMILY and cuda_count > 0:
        return f"cuda:{gpu_ordinal % cuda_count}"
    return "emulated"


def _cuda_count() -> int:
    import torch

    from interop import native_cuda  # torch's own answer: the CUDA layer answers torch.cuda for slots

    return native_cuda.count()


class Rack:
    """A heterogeneous rack whose slots are the indices of the ``hybrid`` device.

    Build one with :meth:`from_spec`, :meth:`preset` or :meth:`load`, then make it
    current with :func:`interop.set_rack` or ``with rack:``. Changing the rack
    while hybrid tensors are alive is refused: their memory is counted on slots
    that would disappear.

    Example::

        rack = interop.Rack.from_spec("trn3:2+h100:2")
        with rack:
            x = torch.randn(8, 512, device="hybrid:2")   # an H100 slot
    """

    def __init__(self, spec: devices.RackSpec, *, backing: str | None = None, cuda_count: int | None = None):
        """Wrap a validated spec. ``backing`` overrides every slot's ``auto`` backing
        (``"emulated"`` forces host emulation even where a GPU exists)."""
        if backing is not None and backing not in ("auto", "emulated") and not backing.startswith("cuda:"):
            raise ValueError(f"backing: expected 'auto', 'emulated' or 'cuda:N', got {backing!r}")
        if len(spec) > MAX_LIVE_SLOTS:
            raise ValueError(
                f"rack {spec.name!r} has {len(spec)} slots; a live rack may have at most {MAX_LIVE_SLOTS} "
                "(PyTorch device indices are 8-bit). Model larger systems without live tensors: "
                "devices.estimate and collectives.estimate take any rack spec."
            )
        self.spec = spec
        cuda = _cuda_count() if cuda_count is None else cuda_count
        rows: list[RackDevice] = []
        gpu_ordinal = 0
        for slot in spec.iter_slots():
            chip = devices.chip(slot.kind)
            requested = slot.backing if backing is None or slot.backing != "auto" else backing
            resolved = _resolve_backing(requested, chip, gpu_ordinal, cuda)
            if chip.family == GPU_FAMILY:
                gpu_ordinal += 1
            rows.append(RackDevice(slot.index, slot.kind, resolved, slot.capacity, slot.domain, chip))
        self.devices: tuple[RackDevice, ...] = tuple(rows)
        self._previous: list[Rack | None] = []

    # -- construction -------------------------------------------------------------

    @classmethod
    def from_spec(cls, spec: str, **kwargs) -> Rack:
        """From ``"kind:count+kind:count"``, a preset name, or a ``.toml`` path."""
        return cls(devices.parse_rack(spec), **kwargs)

    @classmethod
    def preset(cls, name: str, **kwargs) -> Rack:
        """A named preset (see :func:`interop.presets`)."""
        return cls(devices.load_preset(name), **kwargs)

    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> Rack:
        """From a TOML rack file."""
        return cls(devices.load_rack(path), **kwargs)

    # -- queries --------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, index: int) -> RackDevice:
        return self.devices[index]

    def slots_of(self, kind: str) -> list[int]:
        """Indices of every slot of ``kind``."""
        return [d.index for d in self.devices if d.kind == kind]

    def __repr__(self) -> str:
        counts = "+".join(f"{k}:{n}" for k, n in self.spec.counts().items())
        return f"Rack({self.name!r}, {counts}, {len(self)} slots)"

    # -- activation ---------------------------------------------------------------

    def _slot_rows(self) -> list[tuple[str, int, str]]:
        return [(d.kind, int(d.capacity), d.backing) for d in self.devices]

    def __enter__(self) -> Rack:
        self._previous.append(current_rack())
        set_rack(self)
        return self

    def __exit__(self, *exc) -> None:
        previous = self._previous.pop()
        if previous is not None:
            set_rack(previous)


_current: Rack | None = None


def current_rack() -> Rack | None:
    """The rack whose slots ``hybrid:i`` currently are."""
    return _current


def set_rack(rack: Rack | str) -> Rack:
    """Make ``rack`` (a :class:`Rack` or any spec string) current.

    Raises RuntimeError while hybrid tensors are alive: delete them first.
    """
    global _current
    from interop import _C

    if isinstance(rack, str):
        rack = Rack.from_spec(rack)
    if rack is _current:
        return rack
    from interop import timelines as timeline

    if _current is not None:
        timeline.current().ingest()  # what ran on the old rack is costed on the old rack
    _C._install_slots(rack._slot_rows())
    from interop import fidelity

    fidelity.apply(rack)
    _current = rack
    timeline.on_rack_change(rack)
    from interop.numerics import mode as numerics_mode

    numerics_mode.on_rack_change(rack)  # a rack file's device-mode slots take effect
    return rack


def presets() -> dict[str, str]:
    """Preset name -> description; ``fusion-default`` is the embedded default rack."""
    return devices.presets()
