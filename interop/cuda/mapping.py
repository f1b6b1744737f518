"""Which rack slot each ``cuda:N`` is: the device map of the CUDA layer, and device arguments in every form.

``--map`` spells the map: empty (the rack's GPU-kind slots in order; a rack
with none uses every slot in order and says so), a kind or family name
(``trn``/``trainium``, ``gpu``, ``h100``, ``trn2`` ...: that kind's slots in
order) or explicit pairs ``0=hybrid:4,1=hybrid:5``.  Under torchrun a node's
``cuda:N`` are its own devices: with ``GROUP_RANK`` and ``LOCAL_WORLD_SIZE``
set, node g starts at entry ``g * LOCAL_WORLD_SIZE`` of a default or kind map.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

DEVICE_TYPE = "hybrid"
CUDA = "cuda"

FAMILY_ALIASES = {"trn": "trainium", "trainium": "trainium", "gpu": "gpu", "nvidia": "gpu", "cuda": "gpu"}
"""Family spellings ``--map`` accepts (besides kind names)."""


class MapError(ValueError):
    """A ``--map`` that names a slot the rack lacks, a kind it has none of, or malformed pairs.

    The message lists the rack's slots, so a usage error says what would have worked.
    """


@dataclass(frozen=True, slots=True)
class DeviceMap:
    """``cuda:i`` is ``hybrid:slots[i]`` (indices of the current rack)."""

    slots: tuple[int, ...]
    """The hybrid slot of each CUDA index, in CUDA order."""
    spec: str
    """How the map was asked for (``""`` default, ``"trn"``, ``"0=hybrid:4"``...)."""
    note: str = ""
    """A remark shown in the report (e.g. the rack had no GPU-kind slot)."""
    _inverse: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_inverse", {s: i for i, s in enumerate(self.slots)})

    def __len__(self) -> int:
        return len(self.slots)

    def slot(self, index: int) -> int:
        """The hybrid slot of ``cuda:index``; ValueError naming the valid CUDA indices."""
        if not 0 <= index < len(self.slots):
            raise ValueError(f"cuda:{index} is not a device of this run: the CUDA layer maps "
                             f"{len(self.slots)} device(s), cuda:0..cuda:{len(self.slots) - 1} "
                             f"({self.describe()})")
        return self.slots[index]

    def cuda_index(self, slot: int) -> int | None:
        """The CUDA index a hybrid slot answers to, or None for a slot outside the map."""
        return self._inverse.get(slot)

    def describe(self) -> str:
        """``cuda:0 -> hybrid:4 (b200), ...`` for the report and errors."""
        from interop.rack import current_rack

        rack = current_rack()
        kinds = [rack.devices[s].kind if rack is not None and s < len(rack) else "?" for s in self.slots]
        return ", ".join(f"cuda:{i} -> hybrid:{s} ({k})" for i, (s, k) in enumerate(zip(self.slots, kinds)))


def rack_slots_text(rack) -> str:
    """Every slot of the rack with its kind, for usage errors."""
    return ", ".join(f"hybrid:{d.index} ({d.kind})" for d in rack.devices)


def _node_offset(env=os.environ) -> int:
    group, local_world = env.get("GROUP_RANK"), env.get("LOCAL_WORLD_SIZE")
    if group is None or local_world is None:
        return 0
    try:
        return int(group) * int(local_world)
    except ValueError:
        return 0


def parse_map(spec: str | None, rack, env=os.environ) -> DeviceMap:
    """The device map ``spec`` asks for on ``rack``; :class:`MapError` listing the rack's slots otherwise."""
    import devices

    text = (spec or "").strip()
    slots_text = f"the rack {rack.name!r} has {rack_slots_text(rack)}"
    if not text:
        gpus = [d.index for d in rack.devices if d.spec.family == "gpu"]
        if gpus:
            return DeviceMap(tuple(gpus[_node_offset(env):]) or tuple(gpus), "")
        note = (f"the rack {rack.name!r} has no GPU-kind slot: CUDA devices are its slots in order "
                f"({', '.join(sorted(set(d.kind for d in rack.devices)))})")
        every = [d.index for d in rack.devices]
        return DeviceMap(tuple(every[_node_offset(env):]) or tuple(every), "", note)
    if "=" not in text:
        key = text.lower()
        family = FAMILY_ALIASES.get(key)
        if family is not None:
            chosen = [d.index for d in rack.devices if d.spec.family == family]
        elif key in devices.kinds():
            chosen = [d.index for d in rack.devices if d.kind == key]
        else:
            raise MapError(f"--map {text!r}: not a kind ({', '.join(devices.kinds())}), a family "
                           f"({', '.join(sorted(FAMILY_ALIASES))}) or pairs like 0=hybrid:4; {slots_text}")
        if not chosen:
            raise MapError(f"--map {text!r}: the rack {rack.name!r} has no {key} slot; it has "
                           f"{rack_slots_text(rack)}")
        offset = _node_offset(env)
        return DeviceMap(tuple(chosen[offset:]) or tuple(chosen), text)
    pairs: dict[int, int] = {}
    for item in text.split(","):
        left, sep, right = item.strip().partition("=")
        if not sep:
            raise MapError(f"--map {text!r}: {item.strip()!r} is not CUDA=SLOT (e.g. 0=hybrid:4); {slots_text}")
        try:
            cuda_index = _index(left.strip(), CUDA)
            slot = _index(right.strip(), DEVICE_TYPE)
        except ValueError:
            raise MapError(f"--map {text!r}: {item.strip()!r} is not CUDA=SLOT (e.g. 0=hybrid:4 or "
                           f"cuda:1=hybrid:5); {slots_text}") from None
        if not 0 <= slot < len(rack):
            raise MapError(f"--map {text!r}: hybrid:{slot} is not a slot of the rack; {slots_text}")
        if cuda_index in pairs:
            raise MapError(f"--map {text!r}: cuda:{cuda_index} is mapped twice")
        pairs[cuda_index] = slot
    if sorted(pairs) != list(range(len(pairs))):
        raise MapError(f"--map {text!r}: the CUDA indices must be 0..{len(pairs) - 1} (got "
                       f"{', '.join(str(i) for i in sorted(pairs))})")
    if len(set(pairs.values())) != len(pairs):
        raise MapError(f"--map {text!r}: two CUDA devices on one slot")
    return DeviceMap(tuple(pairs[i] for i in range(len(pairs))), text)


def _index(text: str, prefix: str) -> int:
    if text.startswith(prefix + ":"):
        text = text[len(prefix) + 1:]
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


# -- the current map and device arguments ------------------------------------------------------------------

_current: DeviceMap | None = None


def current() -> DeviceMap:
    """The installed device map (RuntimeError before the layer is installed)."""
    if _current is None:
        raise RuntimeError("the CUDA layer is not installed (import interop.cuda, or run under `hybrid run`)")
    return _current


def install(device_map: DeviceMap) -> None:
    """Make ``device_map`` current and clear the translation cache."""
    global _current
    _current = device_map
    _cache.clear()


_cache: dict = {}


def is_cuda_like(device) -> bool:
    """True for a device argument that names CUDA: ``"cuda"``, ``"cuda:1"``, ``torch.device("cuda", 1)``."""
    if isinstance(device, torch.device):
        return device.type == CUDA
    if isinstance(device, str):
        return device == CUDA or device.startswith(CUDA + ":")
    return False


def to_hybrid(device, *, ints: bool = True):
    """A device argument in any form, translated: CUDA devices (and, with ``ints``, bare ints, which
    name CUDA devices in CUDA code) become their hybrid slot; everything else passes unchanged.

    ``"cuda"`` without an index is the current device: ``torch.device("hybrid")``, whose current
    slot ``torch.cuda.set_device`` keeps equal to the current CUDA device's.
    """
    if device is None or isinstance(device, bool):  # False == 0 as a dict key
        return device
    try:
        hit = _cache.get(device)
    except TypeError:  # unhashable (a dict for map_location is handled by the caller)
        return device
    if hit is not None:
        return hit
    if isinstance(device, int):
        if not ints:
            return device
        mapped = torch.device(DEVICE_TYPE, current().slot(device))
    elif isinstance(device, torch.device):
        if device.type != CUDA:
            return device
        mapped = torch.device(DEVICE_TYPE) if device.index is None else torch.device(DEVICE_TYPE,
                                                                                     current().slot(device.index))
    elif isinstance(device, str):
        if not is_cuda_like(device):
            return device
        index = device[len(CUDA) + 1:]
        mapped = torch.device(DEVICE_TYPE) if not index else torch.device(DEVICE_TYPE, current().slot(int(index)))
    else:
        return device
    _cache[device] = mapped
    return mapped


def slot_of(device=None) -> int:
    """The hybrid slot a torch.cuda-style ``device`` argument names: None (current), a CUDA index, a CUDA
    device or string, or a hybrid device."""
    from interop import _C

    if device is None:
        return _C._current_slot()
    if isinstance(device, bool):
        raise ValueError(f"expected a device, got {device!r}")
    if isinstance(device, int):
        return current().slot(device)
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type == CUDA:
            return _C._current_slot() if device.index is None else current().slot(device.index)
        if device.type == DEVICE_TYPE:
            return _C._current_slot() if device.index is None else device.index
    raise ValueError(f"expected a CUDA device (an int, 'cuda:N' or torch.device('cuda', N)), got {device!r}")


def cuda_index_of_slot(slot: int) -> int:
    """The CUDA index of a slot; a slot outside the map answers with the nearest honest value: -1."""
    index = current().cuda_index(slot)
    return -1 if index is None else index
