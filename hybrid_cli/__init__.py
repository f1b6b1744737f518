"""The ``hybrid`` command line: one module ``cmd_<name>.py`` per subcommand, found by its file name.

Every ``cmd_<name>.py`` defines ``NAME`` (the subcommand), ``HELP`` (one line),
``ORDER`` (its place in ``hybrid --help``), ``add_arguments(parser)`` and
``main(args) -> int`` (the exit status), and may define ``REQUIRES`` (the
modules it cannot run without: checked before it starts, so a missing one is
one line saying how to get it, not a traceback minutes later). Adding a
subcommand is adding a file.

Layered above :mod:`interop`: nothing here imports torch at module level, and
only the chosen subcommand's arguments are built, so ``hybrid --help``,
``hybrid racks`` and ``hybrid whatif`` (with a warm profile cache) never load
torch or the device. The subcommands that drive the device import
:mod:`interop` inside ``main`` (their implementations live in
:mod:`interop.commands`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import pkgutil
import sys

# Third-party import chatter that is not the user's business on a console: transformers imports torchao (its
# quantizers) whenever a model is built from a config, and torchao logs the CUDA kernels it cannot load on a
# CPU machine and torch's deprecation of its enum registrations. Library use of interop keeps them.
_QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def discover() -> list:
    """Every subcommand module, in ``ORDER``."""
    modules = [importlib.import_module(f"{__name__}.{info.name}")
               for info in pkgutil.iter_modules(__path__) if info.name.startswith("cmd_")]
    return sorted(modules, key=lambda m: (m.ORDER, m.NAME))


def _chosen(argv: list[str], names: set[str]) -> str | None:
    # The subcommand is the first word that is not an option (the top-level parser has only -h).
    for word in argv:
        if not word.startswith("-"):
            return word if word in names else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the subcommand named in ``argv`` gets its arguments (all of them when ``argv`` is None)."""
    parser = argparse.ArgumentParser(prog="hybrid", description="hybrid-interop: a Trainium + NVIDIA rack as a "
                                                                "PyTorch device")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = discover()
    chosen = None if argv is None else _chosen(argv, {m.NAME for m in modules})
    for module in modules:
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        if argv is None or module.NAME == chosen:
            module.add_arguments(command)
        command.set_defaults(func=module.main, command_module=module)
    return parser


INSTALL_HINTS = {
    "torch": "./bootstrap.sh setup (or: pip install torch==2.13.0, the CPU wheel)",
    "interop._C": "./bootstrap.sh setup (builds the C++ extension)",
}
"""How to get a module a command requires, where ``pip install <module>`` is not the answer."""


def missing_requirements(module) -> list[str]:
    """The modules of ``module.REQUIRES`` that cannot be imported here, each with how to get it."""
    missing = []
    for name in getattr(module, "REQUIRES", ()):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module without a spec
            found = False
        if not found:
            missing.append(f"{name} ({INSTALL_HINTS.get(name, f'pip install {name}')})")
    return missing


def main(argv: list[str] | None = None) -> int:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    missing = missing_requirements(args.command_module)
    if missing:
        print(f"hybrid {args.command}: needs {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as e:
        print(f"hybrid {args.command}: error: {e}", file=sys.stderr)
        return 2
