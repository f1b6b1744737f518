"""The CUDA layer: CUDA code runs on the rack unmodified.

Importing this package changes nothing; :func:`configure` installs the layer.
``hybrid run SCRIPT`` / ``python -m interop.run SCRIPT`` configure it once, with
their ``--map``/``--strict``, before the script runs; ``import interop.cuda``
(:mod:`interop.cuda`, a script's or notebook's first line) configures it with
the defaults.  Each ``cuda:N`` becomes a slot of the current rack (by default the
rack's GPU-kind slots in order; see :func:`configure` and
:mod:`interop.cuda_layer.mapping`), ``torch.cuda`` answers for those slots in CUDA's
terms, device arguments in every form reach the mapped slot, ``"nccl"``
becomes the project's ``hybrid`` distributed backend while
``dist.get_backend()`` answers ``"nccl"``, and every CUDA API the code touches
is recorded for :func:`report`.

Patching happens once, here; nothing of the layer sits on the per-op path.
Triton and torch.compile are left as they are.

Public names: :func:`configure`, :func:`device_map`, :func:`report`,
:func:`uninstall`, :func:`installed`, :class:`DeviceMap`, :class:`MapError`,
:class:`UnsupportedCudaAPI`.
"""

from __future__ import annotations

import torch

import interop
from interop.cuda_layer import install, mapping
from interop.cuda_layer.refusals import UnsupportedCudaAPI
from interop.cuda_layer.mapping import DeviceMap, MapError, parse_map
from interop.cuda_layer.usage import LOG

_installed = False


def configure(*, map: str | None = None, rack=None, strict: bool | None = None) -> DeviceMap:  # noqa: A002
    """Choose the rack, the device map and strictness (any of them), and install the layer if needed.

    ``rack``: an :class:`interop.Rack` or a spec string, made current first. ``map``: ``None``/``""`` (the
    rack's GPU-kind slots in order), a kind or family (``"trn"``), or ``"0=hybrid:4,1=hybrid:5"``; a map
    naming a slot or kind the rack lacks raises :class:`MapError` listing the rack's slots. ``strict``:
    raise what the real chips would raise (:func:`interop.set_strict`). Returns the device map.
    """
    global _installed
    if rack is not None:
        interop.set_rack(rack)
    current = interop.current_rack()
    if current is None:
        raise RuntimeError("no rack is installed; pass rack=... or call interop.set_rack first")
    device_map = parse_map(map, current)
    mapping.install(device_map)
    torch.hybrid.set_device(device_map.slots[0])  # real CUDA starts every process on cuda:0
    if strict is not None:
        interop.set_strict(strict)
    if not _installed:
        install.install_patches()
        _installed = True
    return device_map


def device_map() -> DeviceMap:
    """The installed device map."""
    return mapping.current()


def installed() -> bool:
    """Whether the layer's patches are in place."""
    return _installed


def uninstall() -> None:
    """Undo every patch (torch behaves as before the import); the usage log is kept."""
    global _installed
    install.uninstall_patches()
    mapping.clear()
    _installed = False


def report():
    """The report of this run so far: CUDA APIs met, flags set, the op ledger, divergences."""
    from interop.cuda_layer.report import build

    return build()


__all__ = ["DeviceMap", "LOG", "MapError", "UnsupportedCudaAPI", "configure", "device_map", "installed",
           "parse_map", "report", "uninstall"]
