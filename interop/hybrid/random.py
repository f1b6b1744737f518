"""Per-slot random generators. An emulated slot's generator is a CPU generator
underneath, so for the same seed it draws exactly the CPU's numbers."""

from __future__ import annotations

import torch

from interop.hybrid._utils import slot_index


def _generator(device=None) -> torch.Generator:
    from interop import _C

    return _C._default_generator(slot_index(device))


def default_generator(device=None) -> torch.Generator:
    """The default generator of a slot (what ops without ``generator=`` draw from)."""
    return _generator(device)


def manual_seed(seed: int) -> None:
    """Seed the current slot's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every slot's generator (``torch.manual_seed`` calls this too)."""
    from interop import _C

    for i in range(_C._slot_count()):
        _C._default_generator(i).manual_seed(int(seed))


def seed() -> None:
    """Seed the current slot's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    """Seed every slot with one non-deterministic number."""
    value = torch.Generator().seed()
    manual_seed_all(value)


def initial_seed() -> int:
    """The current slot's seed."""
    return _generator().initial_seed()


def get_rng_state(device=None) -> torch.Tensor:
    """A slot's generator state as a ByteTensor (the CPU generator's format)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    """Restore a state from :func:`get_rng_state`."""
    _generator(device).set_state(new_state.cpu() if new_state.device.type != "cpu" else new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    from interop import _C

    return [get_rng_state(i) for i in range(_C._slot_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
