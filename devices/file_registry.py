"""One record per file: the registries of devices/ whose file name is the key.

``devices/chips/<kind>.py`` defines ``CHIP`` and ``CAPABILITIES``: adding a kind
is adding a file, with no table to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType, ModuleType
from typing import Mapping


def load_records(package: ModuleType, attribute: str, record_type: type, key: str = "kind") -> Mapping[str, object]:
    """Every public module of ``package`` by name -> its ``attribute``, checked to be a ``record_type``
    whose ``key`` field equals the file name (ValueError naming the file otherwise)."""
    folder = package.__name__.replace(".", "/")
    found: dict[str, object] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        record = getattr(module, attribute, None)
        if not isinstance(record, record_type):
            raise ValueError(f"{folder}/{info.name}.py: must define {attribute} = {record_type.__name__}(...)")
        if getattr(record, key) != info.name:
            raise ValueError(f"{folder}/{info.name}.py: {attribute}.{key} is {getattr(record, key)!r}; "
                             f"the file name is the {key}, so it must be {info.name!r}")
        found[info.name] = record
    return MappingProxyType(found)
