"""``python -m benchmarks [name ...]``: run benchmarks and update RESULTS.md.

The file name is the registry: every ``bench_<name>.py`` here defines ``run(repeats=...)`` returning a
:class:`benchmarks.harness.Section`; adding a benchmark is adding a file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import os


def names() -> list[str]:
    """Every benchmark, by the file it lives in (``bench_cli.py`` -> ``cli``), sorted."""
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(info.name.removeprefix("bench_") for info in pkgutil.iter_modules([here])
                  if info.name.startswith("bench_"))


def main() -> None:
    found = names()
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help=f"which benchmarks (default: all of {found})")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per measurement (median reported)")
    args = parser.parse_args()
    for name in args.names:
        if name not in found:
            parser.error(f"unknown benchmark {name!r}; choose from {found}")
    for name in args.names or found:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        module.run(repeats=args.repeats).print()


if __name__ == "__main__":
    main()
