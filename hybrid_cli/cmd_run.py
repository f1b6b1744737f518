"""``hybrid run``: run CUDA code unmodified on the rack (``cuda:N`` -> a rack slot), with a report of every
CUDA API it touched, how each op ran, and what would fail or differ on the real target."""

from __future__ import annotations

NAME = "run"
HELP = "run a CUDA script unmodified on the rack (hybrid run [--rack R] [--map M] SCRIPT ARGS...)"
REQUIRES = ("torch",)
ORDER = 25


def add_arguments(parser) -> None:
    from interop.run import add_arguments as shared

    shared(parser)


def main(args) -> int:
    from interop.run import run

    return run(args)
