"""Collective algorithms as schedules, one per file; the file name is the registry name.

Each module defines ``ALGORITHM``, an instance of
:class:`collectives.algorithms.base.Algorithm`.  Adding an algorithm is adding
a file: :func:`names` discovers the modules, there is no table to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from collectives.algorithms.base import Algorithm

_NOT_ALGORITHMS = {"base"}


@lru_cache(maxsize=1)
def _registry() -> dict[str, Algorithm]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_ALGORITHMS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        algorithm = getattr(module, "ALGORITHM", None)
        if isinstance(algorithm, Algorithm):
            found[algorithm.name] = algorithm
    return dict(sorted(found.items()))


def names() -> list[str]:
    """Every algorithm's name, sorted."""
    return list(_registry())


def check_name(name) -> None:
    """TypeError unless ``name`` is an algorithm name or None (``algorithm=["ring"]`` is refused here,
    before it reaches a cache key or a lookup)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"algorithm: expected an algorithm name or None, got {type(name).__name__} {name!r}; "
                        f"accepted: {', '.join(names())}")


def get(name: str) -> Algorithm:
    """The algorithm called ``name``; ValueError listing the accepted names (TypeError for a non-name)."""
    if name is None:
        raise TypeError(f"algorithm: expected an algorithm name, got None; accepted: {', '.join(names())}")
    check_name(name)
    key = name.strip().lower().replace("-", "_")
    reg = _registry()
    if key not in reg:
        raise ValueError(f"algorithm: unknown {name!r}; accepted: {', '.join(reg)}")
    return reg[key]


def for_op(op: str) -> list[Algorithm]:
    """The algorithms implementing collective ``op``."""
    return [a for a in _registry().values() if op in a.ops]


__all__ = ["Algorithm", "check_name", "for_op", "get", "names"]
