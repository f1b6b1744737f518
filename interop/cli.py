"""The ``hybrid`` command line: ``hybrid racks``, ``hybrid demo``."""

from __future__ import annotations

import argparse
import sys


def _cmd_racks(args) -> int:
    import devices
    from interop.fmt import table

    print("== presets ==")
    rows = devices.presets_rows()
    print(table(["name", "slots", "kinds", "domains", "network", "description"],
                [[r["name"], r["slots"], r["kinds"], r["domains"], r["network"], r["description"]] for r in rows],
                align="lrllll"))
    print("\n== catalogue (dense figures; status: published / secondary / projected) ==")
    kinds = [args.kind] if args.kind else None
    rows = devices.catalogue_rows(kinds)
    print(table(["kind", "figure", "value", "status", "source"],
                [[r["kind"], r["figure"], r["display"], r["status"], r["source"] + (f" [{r['note']}]" if r["note"] else "")]
                 for r in rows], align="llrll"))
    return 0


def _cmd_demo(args) -> int:
    import interop
    from interop.demo import DemoConfig, run

    _ = interop
    result = run(DemoConfig(rack=args.rack, steps=args.steps, batch=args.batch, seed=args.seed))
    return 0 if result.ok else 1


def _cmd_bench(args) -> int:
    if args.what == "ops":
        from interop.bench_ops import DEFAULT_KINDS, plot, sweep

        kinds = args.kinds.split(",") if args.kinds else DEFAULT_KINDS
        result = sweep(kinds)
        for family in ("matmul", "attention", "elementwise"):
            print(result.table(family))
            print()
        print(f"plot: {plot(result, args.plot)}")
        return 0
    parser_error = f"unknown benchmark {args.what!r}"
    print(parser_error, file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybrid", description="hybrid-interop: a Trainium + NVIDIA rack as a PyTorch device")
    sub = parser.add_subparsers(dest="command", required=True)

    racks = sub.add_parser("racks", help="list rack presets and the chip catalogue with sources")
    racks.add_argument("--kind", help="only this chip kind")
    racks.set_defaults(func=_cmd_racks)

    demo = sub.add_parser("demo", help="train a GPT-style model on the rack, checked against the CPU")
    demo.add_argument("--rack", default="fusion-default", help="rack spec or preset (default: fusion-default)")
    demo.add_argument("--steps", type=int, default=3)
    demo.add_argument("--batch", type=int, default=4)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="modelled sweeps (ops) across chip kinds")
    bench.add_argument("what", choices=["ops"], help="ops: matmul, attention, elementwise sweeps")
    bench.add_argument("--kinds", help="comma-separated chip kinds (default: all but trn1)")
    bench.add_argument("--plot", default="bench_ops.png", help="where to write the plot (PNG)")
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as e:
        print(f"hybrid {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
