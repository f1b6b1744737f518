"""``nn.DataParallel`` on hybrid slots: the single-process, multi-device communication it is built on.

DataParallel (which transformers' Trainer picks by itself when it sees several GPUs) replicates the module
with ``torch.nn.parallel.comm.broadcast_coalesced``, splits the batch with ``comm.scatter``, gathers the
outputs with ``comm.gather`` and sums the replicas' gradients with ``comm.reduce_add_coalesced``. torch
implements those in C++ for CUDA devices only. Here they run on slots: every copy is a copy between slots,
placed on the rack's timeline by the same point-to-point model as any ``Tensor.to`` (modelled), and every
sum runs on the destination slot.

DataParallel passes device indices as plain ints: they are slots when a tensor involved is a hybrid tensor,
or when no CUDA device exists in the process (the only accelerator is then ``hybrid``); otherwise torch's
own implementation runs (real GPUs). :func:`install` (at ``import interop``) points DataParallel's modules
at these functions; under the CUDA layer, DataParallel's CUDA indices become the mapped slots
(:mod:`interop.cuda_layer.distributed`) and ``torch.cuda.comm`` is served by :func:`for_cuda_indices`.
"""

from __future__ import annotations

import types

import torch

DEVICE_TYPE = "hybrid"


def _no_cuda_devices() -> bool:
    from interop import native_cuda

    return native_cuda.count() == 0


def _on_slots(tensors, devices=()) -> bool:
    if any(isinstance(t, torch.Tensor) and t.device.type == DEVICE_TYPE for t in tensors):
        return True
    if any(isinstance(d, torch.device) and d.type == DEVICE_TYPE for d in devices):
        return True
    return _no_cuda_devices()


def _device(device, what: str) -> torch.device:
    """A slot from an int, a hybrid device or its string; -1 and "cpu" are the host."""
    if isinstance(device, bool):
        raise TypeError(f"{what}: expected a device or an int, got {device!r}")
    if isinstance(device, int):
        return torch.device("cpu") if device == -1 else torch.device(DEVICE_TYPE, device)
    device = torch.device(device)
    if device.type == DEVICE_TYPE and device.index is None:
        return torch.device(DEVICE_TYPE, torch.hybrid.current_device())
    return device


def broadcast(tensor, devices=None, *, out=None):
    """``tensor`` copied to each of ``devices`` (or into each of ``out``)."""
    if (devices is None) == (out is None):
        raise RuntimeError(f"broadcast: exactly one of 'devices' and 'out' must be given, got devices={devices} "
                           f"and out={out}")
    if out is not None:
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    return tuple(tensor.to(_device(d, "broadcast")) for d in devices)


def broadcast_coalesced(tensors, devices, buffer_size=10485760):
    """Every tensor copied to each of ``devices``: one list per device, the inputs themselves where they already
    are (as torch's CUDA implementation returns them)."""
    out = []
    for d in devices:
        device = _device(d, "broadcast_coalesced")
        out.append([t if t.device == device else t.to(device) for t in tensors])
    return out


def reduce_add(inputs, destination=None):
    """The sum of ``inputs`` (one per device), on ``destination`` (default: the current slot)."""
    if not inputs:
        raise ValueError("reduce_add: inputs must not be empty")
    shape = inputs[0].shape
    for i, t in enumerate(inputs):
        if t.shape != shape:
            raise ValueError(f"reduce_add: input {i} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    target = _device(torch.hybrid.current_device() if destination is None else destination, "reduce_add")
    total = inputs[0].to(target, copy=True)
    for t in inputs[1:]:
        total.add_(t.to(target))
    return total


def reduce_add_coalesced(inputs, destination=None, buffer_size=10485760):
    """``inputs[d][i]`` summed over the devices d, for each i, on ``destination``."""
    return [reduce_add([per_device[i] for per_device in inputs], destination) for i in range(len(inputs[0]))]


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    """``tensor`` split along ``dim`` (in ``chunk_sizes``, or evenly), one chunk to each device (or ``out``)."""
    if out is not None:
        chunks = tensor.split([o.shape[dim] for o in out], dim)
        for o, c in zip(out, chunks):
            o.copy_(c)
        return tuple(out)
    if devices is None:
        raise RuntimeError("scatter: 'devices' must be given when 'out' is not")
    chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None else tensor.chunk(len(devices), dim)
    return tuple(c.contiguous().to(_device(d, "scatter")) for c, d in zip(chunks, devices))


def gather(tensors, dim=0, destination=None, *, out=None):
    """``tensors`` (one per device) concatenated along ``dim`` on ``destination`` (-1 or "cpu": the host;
    default: the current slot), or into ``out``."""
    if out is not None:
        if destination is not None:
            raise RuntimeError(f"'destination' must not be specified when 'out' is specified, but got "
                               f"destination={destination}")
        return torch.cat([t.to(out.device) for t in tensors], dim, out=out)
    target = _device(torch.hybrid.current_device() if destination is None else destination, "gather")
    return torch.cat([t.to(target) for t in tensors], dim)


SLOT_COMM = types.SimpleNamespace(broadcast=broadcast, broadcast_coalesced=broadcast_coalesced,
                                  reduce_add=reduce_add, reduce_add_coalesced=reduce_add_coalesced,
                                  scatter=scatter, gather=gather)
"""The six functions, as the namespace DataParallel's modules call them through."""


def _either(name: str, original):
    """Torch's own function for real CUDA devices, ours for slots."""
    ours = getattr(SLOT_COMM, name)

    def fn(first, *args, **kwargs):
        tensors = first if isinstance(first, (list, tuple)) else [first]
        flat = [t for x in tensors for t in (x if isinstance(x, (list, tuple)) else [x])]
        devices = list(kwargs.get("devices") or (args[0] if args and isinstance(args[0], (list, tuple)) else ()))
        return (ours if _on_slots(flat, devices) else original)(first, *args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = ours.__doc__
    return fn


_installed = False


def install() -> None:
    """Point torch.nn.parallel's replicate, scatter and gather at the slot implementations (once)."""
    global _installed
    if _installed:
        return
    import importlib

    comm = importlib.import_module("torch.nn.parallel.comm")
    dispatching = types.SimpleNamespace(**{name: _either(name, getattr(comm, name))
                                           for name in vars(SLOT_COMM)})
    # By module path: torch.nn.parallel.replicate is also the name of the function the package exports.
    for module in ("torch.nn.parallel._functions", "torch.nn.parallel.replicate"):
        importlib.import_module(module).comm = dispatching
    _installed = True


__all__ = ["SLOT_COMM", "broadcast", "broadcast_coalesced", "gather", "install", "reduce_add",
           "reduce_add_coalesced", "scatter"]
