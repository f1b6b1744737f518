"""`Rack`: the set of slots the `hybrid` device exposes.

A rack is built from a :class:`devices.RackSpec` (a preset, a ``kind:count``
string or a TOML file). It owns a slot table in the C++ runtime (each slot's
chip kind, memory capacity and backing, emulated on the host or a real CUDA
device, and its memory accounting) and its modelled timeline. Making it
current (:func:`set_rack`, ``with rack:``; the session in :mod:`interop.session`
keeps which one is) makes ``hybrid:i`` slot ``i`` of the rack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import devices
from devices import Backing
from interop import session

GPU_FAMILY = "gpu"


@dataclass(frozen=True, slots=True)
class RackDevice:
    """One slot of a live rack, as ``rack.devices`` lists it."""

    index: int
    """The device index: ``hybrid:<index>``."""
    kind: str
    """Chip kind (``trn3``, ``h100``...)."""
    backing: Backing
    """``emulated`` (host memory, CPU kernels) or ``cuda:N`` (a real GPU); never ``auto`` on a live rack."""
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


def _resolve_backing(requested: Backing, chip: devices.Chip, gpu_ordinal: int, cuda_count: int) -> Backing:
    if requested.is_emulated:
        return requested
    if requested.is_cuda:
        if requested.cuda_index >= cuda_count:
            raise ValueError(
                f"backing: {requested!r} asked for, but this machine has {cuda_count} CUDA device(s)"
                + ("" if cuda_count else " (torch.cuda.is_available() is False)")
            )
        return requested
    # auto: NVIDIA kinds ride on real GPUs where there are any; Trainium kinds
    # have no real counterpart here and stay emulated.
    if chip.family == GPU_FAMILY and cuda_count > 0:
        return Backing.cuda(gpu_ordinal % cuda_count)
    return Backing("emulated")


def _cuda_count() -> int:
    import torch

    from interop import native_cuda  # torch's own answer: the CUDA layer answers torch.cuda for slots

    return native_cuda.count()


class Rack:
    """A heterogeneous rack whose slots are the indices of the ``hybrid`` device.

    Build one with :meth:`from_spec`, :meth:`preset` or :meth:`load`, then make it
    current with :func:`interop.set_rack` or ``with rack:``. Each Rack owns its
    slots, their memory accounting and its modelled :attr:`timeline`. Making
    another rack current retires this one without destroying it: its tensors keep
    their bytes and stay counted here (read with :meth:`memory_allocated`,
    :meth:`memory_stats`); they refuse to compute until this rack is current
    again, but move to the CPU, print, save and free as ever.

    Example::

        rack = interop.Rack.from_spec("trn3:2+h100:2")
        with rack:
            x = torch.randn(8, 512, device="hybrid:2")   # an H100 slot
        x.cpu()                                          # fine: back on the host
        with rack:
            y = x * 2                                    # fine: its rack is current again
    """

    def __init__(self, spec: devices.RackSpec, *, backing: str | None = None, cuda_count: int | None = None):
        """Wrap a validated spec. ``backing`` overrides every slot's ``auto`` backing
        (``"emulated"`` forces host emulation even where a GPU exists)."""
        from interop import _C  # the runtime: its slot limit, and the slot table this rack owns

        override = None if backing is None else Backing.parse(backing)
        if len(spec) > _C.MAX_SLOTS:
            raise ValueError(
                f"rack {spec.name!r} has {len(spec)} slots; a live rack may have at most {_C.MAX_SLOTS} "
                "(PyTorch device indices are 8-bit). Model larger systems without live tensors: "
                "devices.estimate and collectives.estimate take any rack spec."
            )
        self.spec = spec
        cuda = _cuda_count() if cuda_count is None else cuda_count
        rows: list[RackDevice] = []
        gpu_ordinal = 0
        for slot in spec.iter_slots():
            chip = devices.chip(slot.kind)
            requested = override if override is not None and slot.backing.is_auto else slot.backing
            resolved = _resolve_backing(requested, chip, gpu_ordinal, cuda)
            if chip.family == GPU_FAMILY:
                gpu_ordinal += 1
            rows.append(RackDevice(slot.index, slot.kind, resolved, slot.capacity, slot.domain, chip))
        self.devices: tuple[RackDevice, ...] = tuple(rows)
        self._table = _C.SlotTable(self.label, [
            (d.kind, int(d.capacity), -1 if d.backing.cuda_index is None else d.backing.cuda_index)
            for d in self.devices])
        self.timeline = session.timeline_of(self)
        """This rack's modelled timeline (:class:`interop.timelines.Timeline`); ``interop.timeline()``
        reads the current rack's."""
        self._previous: list[tuple[Rack | None, int]] = []  # (rack, current slot) per `with`

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

    @property
    def label(self) -> str:
        """How messages name the rack: ``'trn3:2+h100:2'``, ``'h100-node' (h100:8)``."""
        counts = "+".join(f"{k}:{n}" for k, n in self.spec.counts().items())
        return repr(self.name) if counts == self.name else f"{self.name!r} ({counts})"

    @property
    def is_current(self) -> bool:
        """True while this rack's slots are the ``hybrid`` device's."""
        return session.current() is self

    def __repr__(self) -> str:
        counts = "+".join(f"{k}:{n}" for k, n in self.spec.counts().items())
        return f"Rack({self.name!r}, {counts}, {len(self)} slots)"

    # -- memory (this rack's accounts, current or not) ---------------------------------

    def _index(self, device) -> int:
        if isinstance(device, str):
            import torch

            device = torch.device(device)
        if getattr(device, "type", "hybrid") != "hybrid":
            raise ValueError(f"device: expected a hybrid device, got {device}")
        index = getattr(device, "index", device)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self):
            raise ValueError(f"device: expected a slot of rack {self.label} (an int in 0..{len(self) - 1}, "
                             f"'hybrid:i' or a torch.device), got {device!r}")
        return index

    def memory_stats(self, device) -> dict:
        """torch.cuda.memory_stats-style counters of one of this rack's slots, current or not
        (``allocated_bytes.all.current``...; ``capacity`` is the slot's modelled HBM)."""
        return dict(sorted(self._table.memory_stats(self._index(device)).items()))

    def memory_allocated(self, device) -> int:
        """Bytes this rack's tensors hold on a slot, current or not; 0 once the last one is freed."""
        return self._table.memory_stats(self._index(device))["allocated_bytes.all.current"]

    def max_memory_allocated(self, device) -> int:
        """Peak of :meth:`memory_allocated` since the rack was made or its peak was reset."""
        return self._table.memory_stats(self._index(device))["allocated_bytes.all.peak"]

    def reset_peak_memory_stats(self, device) -> None:
        """Start the slot's peak tracking afresh from its current usage."""
        self._table.reset_peak_stats(self._index(device))

    # -- activation ---------------------------------------------------------------

    def __enter__(self) -> Rack:
        from interop import _C

        self._previous.append((session.current(), _C._current_slot()))
        _install(self)
        return self

    def __exit__(self, *exc) -> None:
        from interop import _C

        previous, slot = self._previous.pop()
        if previous is not None:
            _install(previous)
            if slot < len(previous.devices):
                _C._set_current_slot(slot)  # this thread's current slot on that rack, as it was


def _install(rack: Rack) -> None:
    session.install(rack)  # its subscribers follow: fidelity masks, numerics modes, the CUDA map


def current_rack() -> Rack | None:
    """The rack whose slots ``hybrid:i`` currently are."""
    return session.current()


def set_rack(rack: Rack | str) -> Rack:
    """Make ``rack`` (a :class:`Rack` or any spec string) current.

    The rack it replaces is retired, not destroyed: its tensors keep their bytes
    and accounting, move to the CPU as ever, and compute again once it is current
    again. Anything else asked of them raises an error that says so.
    """
    if isinstance(rack, str):
        rack = Rack.from_spec(rack)
    if not isinstance(rack, Rack):
        raise TypeError(f"rack: expected an interop.Rack or a rack spec string, got {rack!r}")
    _install(rack)
    return rack


def presets() -> dict[str, str]:
    """Preset name -> description; ``fusion-default`` is the embedded default rack."""
    return devices.presets()
