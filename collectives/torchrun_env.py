"""What a launcher tells each process about its place in the job: torchrun's environment, read in one place.

``torchrun`` (``torch.distributed.run``) starts every process with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK`` (the
node's index) set; other launchers set a subset. :func:`torchrun_env` reads
them: a variable that is not set is None, and one that is set to anything but a
non-negative integer raises ValueError naming the variable, whoever asks (the
backend choosing a rank's slot, the CUDA layer's device map and its report).
Read when asked, never at import. No torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
"""The variables read, as torchrun names them."""


@dataclass(frozen=True, slots=True)
class TorchrunEnv:
    """This process's place in a launched job (None where the launcher said nothing)."""

    rank: int | None = None
    """``RANK``: the process's global rank."""
    world_size: int | None = None
    """``WORLD_SIZE``: processes in the job."""
    local_rank: int | None = None
    """``LOCAL_RANK``: the process's rank on its node."""
    local_world_size: int | None = None
    """``LOCAL_WORLD_SIZE``: processes on its node."""
    group_rank: int | None = None
    """``GROUP_RANK``: its node's index among the nodes."""

    @property
    def launched(self) -> bool:
        """True when a launcher started several processes (``WORLD_SIZE`` > 1)."""
        return self.world_size is not None and self.world_size > 1

    @property
    def node_offset(self) -> int:
        """The global index of this node's first local process: ``GROUP_RANK * LOCAL_WORLD_SIZE`` (0 when either
        is unset)."""
        if self.group_rank is None or self.local_world_size is None:
            return 0
        return self.group_rank * self.local_world_size


def torchrun_env(environ: Mapping[str, str] | None = None) -> TorchrunEnv:
    """The launcher's variables from ``environ`` (default: ``os.environ``); ValueError naming a variable that is
    set to anything but a non-negative integer."""
    environ = os.environ if environ is None else environ
    values = {}
    for name in VARIABLES:
        text = environ.get(name)
        if text is None:
            values[name] = None
            continue
        try:
            value = int(text.strip())
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"{name}: expected a non-negative integer (as torchrun sets it), got {text!r}")
        values[name] = value
    return TorchrunEnv(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"], values["LOCAL_WORLD_SIZE"],
                       values["GROUP_RANK"])


__all__ = ["VARIABLES", "TorchrunEnv", "torchrun_env"]
