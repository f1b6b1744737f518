"""The ``hybrid`` command line. Each subcommand is a module of :mod:`interop.commands`."""

from __future__ import annotations

import argparse
import logging
import sys

from interop import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybrid", description="hybrid-interop: a Trainium + NVIDIA rack as a PyTorch device")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in commands.discover():
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(func=module.main)
    return parser


# Third-party import chatter that is not the user's business on a console: transformers imports torchao (its
# quantizers) whenever a model is built from a config, and torchao logs the CUDA kernels it cannot load on a
# CPU machine and torch's deprecation of its enum registrations. Library use of interop keeps them.
_QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def main(argv: list[str] | None = None) -> int:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as e:
        print(f"hybrid {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
