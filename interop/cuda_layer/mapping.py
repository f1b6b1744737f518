"""Which rack slot each ``cuda:N`` is: the device map of the CUDA layer, and device arguments in every form.

``--map`` spells the map: empty (the rack's GPU-kind slots in order; a rack
with none uses every slot in order and says so), a kind or family name
(``trn``/``trainium``, ``gpu``, ``h100``, ``trn2`` ...: that kind's slots in
order) or explicit pairs ``0=hybrid:4,1=hybrid:5``.  Under torchrun a node's
``cuda:N`` are its own devices: with ``GROUP_RANK`` and ``LOCAL_WORLD_SIZE``
set, node g starts at entry ``g * LOCAL_WORLD_SIZE`` of a default or kind map.

A map belongs to the rack it was made for. When another rack becomes current
(``with rack:``, ``interop.set_rack``), ``cuda:N`` follows it: the same
``--map`` is applied to the new rack at the next CUDA device lookup, and the
current CUDA index stays the same (``cuda:1`` before, ``cuda:1`` of the new
rack after).  A map the new rack cannot satisfy (an explicit slot it lacks, a
kind it has none of) raises :class:`MapError` on use, listing its slots, until
a rack that can is current again.  Tensors stay on the rack they were made on
(core's rack semantics): a retired rack's tensors move to the CPU, or compute
again once their rack is current.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from interop import session
from interop.device_arg import parse_device

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
    rack: int = 0
    """The generation of the rack's slot table the map was made for (0: unknown)."""
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


def _node_offset(env) -> int:
    from collectives.torchrun_env import torchrun_env

    return torchrun_env(env).node_offset


def parse_map(spec: str | None, rack, env=None) -> DeviceMap:
    """The device map ``spec`` asks for on ``rack``; :class:`MapError` listing the rack's slots otherwise.
    ``env``: the launcher's variables (default ``os.environ``; :func:`collectives.torchrun_env.torchrun_env`
    reads them, ValueError naming a malformed one)."""
    device_map = _parse_map(spec, rack, env)
    table = getattr(rack, "_table", None)
    if table is None:
        return device_map
    return DeviceMap(device_map.slots, device_map.spec, device_map.note, table.generation)


def _parse_map(spec: str | None, rack, env=None) -> DeviceMap:
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


def _rack_generation() -> int:
    rack = session.current()
    return 0 if rack is None else rack._table.generation


def current() -> DeviceMap:
    """The installed device map, on the current rack (RuntimeError before the layer is installed;
    :class:`MapError` when the current rack cannot satisfy it)."""
    device_map = _current
    if device_map is None:
        raise RuntimeError("the CUDA layer is not installed (import interop.cuda, or run under `hybrid run`)")
    if device_map.rack and device_map.rack != _rack_generation():
        device_map = _follow_rack(device_map)
    return device_map


def _follow_rack(old: DeviceMap) -> DeviceMap:
    """The same ``--map`` on the rack that became current; this thread keeps its CUDA index."""
    from interop import _C

    rack = session.current()
    try:
        new = parse_map(old.spec, rack)
    except MapError as e:
        raise MapError(f"the CUDA layer's device map ({old.spec or 'default'}) does not fit the current rack "
                       f"{rack.label}, made current after the map: {e}. Make a rack it fits current again, or "
                       "call interop.cuda.configure(map=...) for this one") from None
    cuda_index = old.cuda_index(_C._current_slot())
    install(new)
    torch.hybrid.set_device(new.slots[cuda_index if cuda_index is not None and cuda_index < len(new) else 0])
    return new


def on_rack_change(previous_slot: int) -> None:
    """Another rack became current (``previous_slot`` was this thread's slot before): the map follows now,
    keeping the thread's CUDA index; a map the new rack cannot satisfy stays for :func:`current` to refuse
    on use."""
    from interop import _C

    old = _current
    if old is None or not old.rack or old.rack == _rack_generation():
        return
    try:
        new = parse_map(old.spec, session.current())
    except MapError:
        return
    cuda_index = old.cuda_index(previous_slot)
    install(new)
    _C._set_current_slot(new.slots[cuda_index if cuda_index is not None and cuda_index < len(new) else 0])


session.on_rack_change(lambda rack, previous_slot: on_rack_change(previous_slot))  # cuda:N follows the rack


def install(device_map: DeviceMap) -> None:
    """Make ``device_map`` current and clear the translation cache. A thread that has not chosen a device is
    on ``cuda:0``'s slot from now on, as every new CUDA thread starts on device 0."""
    from interop import _C

    global _current
    _current = device_map
    _C._set_default_slot(device_map.slots[0])
    _renew_cache()


def clear() -> None:
    """No map (the layer is uninstalled): a thread that has not chosen a device is on ``hybrid:0`` again."""
    from interop import _C

    global _current
    _current = None
    _C._set_default_slot(0)
    _renew_cache()


def _no_rack():
    return None


_cache: dict = {}
_cache_owner = _no_rack
"""A weak reference to the rack the translations in ``_cache`` were made on."""


def _renew_cache() -> None:
    global _cache_owner
    _cache.clear()
    rack = session.current()
    _cache_owner = _no_rack if rack is None else weakref.ref(rack)


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
    if _cache_owner() is not session.current():  # another rack is current: translate afresh
        _renew_cache()
        if _current is not None:
            try:
                current()  # the map follows the rack, and so does the current CUDA device
            except MapError:
                pass  # raised again by any CUDA device argument below; other devices are unaffected
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
    elif is_cuda_like(device):
        index = parse_device(device).index
        mapped = _current_cuda_device() if index is None else torch.device(DEVICE_TYPE, current().slot(index))
    else:
        return device
    _cache[device] = mapped
    return mapped


def _current_cuda_device() -> torch.device:
    current()  # a map the current rack cannot satisfy fails here, as an indexed CUDA device would
    return torch.device(DEVICE_TYPE)


def slot_of(device=None) -> int:
    """The hybrid slot a torch.cuda-style ``device`` argument names: None (current), a CUDA index, a CUDA
    device or string, or a hybrid device."""
    from interop import _C

    arg = parse_device(device)
    if arg.current:
        return _C._current_slot()
    if arg.bare:
        return current().slot(arg.index)
    if arg.type == CUDA:
        return _C._current_slot() if arg.index is None else current().slot(arg.index)
    if arg.type == DEVICE_TYPE:
        return _C._current_slot() if arg.index is None else arg.index
    raise ValueError(f"expected a CUDA device (an int, 'cuda:N' or torch.device('cuda', N)), got {device!r}")


def cuda_index_of_slot(slot: int) -> int:
    """The CUDA index of a slot; a slot outside the map answers with the nearest honest value: -1."""
    index = current().cuda_index(slot)
    return -1 if index is None else index
