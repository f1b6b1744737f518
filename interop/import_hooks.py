"""Run a function right after a module is imported, without importing it.

The one import hook of the package: torch.compile's registrations (:mod:`interop.compile`) and the CUDA layer's
patches of optional modules (:mod:`interop.cuda`) both wait here.

``import interop`` must stay cheap: torch._dynamo, torch._inductor and triton
take seconds to import, and most programs never compile anything. Their
registrations therefore wait for the module they extend: :func:`after_import`
runs a callback at once when the module is already loaded, else right after
its first import finishes (a finder on ``sys.meta_path`` wraps that module's
loader; every other import goes by untouched).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Callable

_callbacks: dict[str, list[Callable]] = {}
_lock = threading.RLock()


class _Loader(importlib.abc.Loader):
    """Delegates to the module's own loader, then runs the callbacks waiting for it."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        with _lock:
            pending = _callbacks.pop(module.__name__, [])
        for callback in pending:
            callback(module)

    def __getattr__(self, name):  # get_source, is_package, ... (inspect and linecache use them)
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_finder = _Finder()


def after_import(module: str, callback: Callable) -> None:
    """Call ``callback(module_object)`` once ``module`` is imported (now, if it already is)."""
    with _lock:
        loaded = sys.modules.get(module)
        if loaded is None:
            _callbacks.setdefault(module, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    callback(loaded)


def cancel(module: str, callback: Callable) -> None:
    """Forget ``callback`` if it is still waiting for ``module`` (a patch uninstalled before the import)."""
    with _lock:
        pending = _callbacks.get(module)
        if pending and callback in pending:
            pending.remove(callback)
            if not pending:
                del _callbacks[module]
