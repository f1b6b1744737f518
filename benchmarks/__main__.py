"""``python -m benchmarks [name ...]``: run benchmarks and update RESULTS.md."""

from __future__ import annotations

import argparse
import importlib

ALL = ["device", "timeline", "collectives", "scale", "numerics", "whatif", "plan", "compile", "cuda_layer"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help=f"which benchmarks (default: all of {ALL})")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per measurement (median reported)")
    args = parser.parse_args()
    for name in args.names or ALL:
        if name not in ALL:
            parser.error(f"unknown benchmark {name!r}; choose from {ALL}")
        module = importlib.import_module(f"benchmarks.bench_{name}")
        module.run(repeats=args.repeats).print()


if __name__ == "__main__":
    main()
