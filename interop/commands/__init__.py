"""Subcommands of the ``hybrid`` command line, one module each.

The file name is the registry: every module ``cmd_<name>.py`` here defines
``NAME`` (the subcommand), ``HELP`` (one line), ``ORDER`` (its place in ``hybrid --help``),
``add_arguments(parser)`` and ``main(args) -> int`` (the exit status). Adding a
subcommand is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil


def discover() -> list:
    """Every subcommand module, in ``ORDER``."""
    modules = [importlib.import_module(f"{__name__}.{info.name}")
               for info in pkgutil.iter_modules(__path__) if info.name.startswith("cmd_")]
    return sorted(modules, key=lambda m: (m.ORDER, m.NAME))
