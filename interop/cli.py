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


def _sizes(args) -> list[int]:
    from collectives.harness import parse_bytes

    lo, hi, factor = parse_bytes(args.minbytes), parse_bytes(args.maxbytes), max(2, args.stepfactor)
    if lo > hi:
        raise ValueError(f"-b ({lo} bytes) must not exceed -e ({hi} bytes)")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s = s * factor if s else 1
    return sizes


def _cmd_bench(args) -> int:
    if args.what == "collectives":
        import interop
        from interop.collective_tools import bench, plot

        if args.rack:
            interop.set_rack(args.rack)
        rows = bench(args.op, _sizes(args), dtype=args.dtype, redop=args.redop, root=args.root,
                     algorithm=args.algorithm)
        print(f"plot: {plot(rows, args.plot or 'bench_collectives.png')}")
        return 1 if any(r.wrong_oop or r.wrong_ip > 0 for r in rows) else 0
    if args.what == "ops":
        from interop.bench_ops import DEFAULT_KINDS, plot, sweep

        kinds = args.kinds.split(",") if args.kinds else DEFAULT_KINDS
        result = sweep(kinds)
        for family in ("matmul", "attention", "elementwise"):
            print(result.table(family))
            print()
        print(f"plot: {plot(result, args.plot or 'bench_ops.png')}")
        return 0
    parser_error = f"unknown benchmark {args.what!r}"
    print(parser_error, file=sys.stderr)
    return 2


def _cmd_check(args) -> int:
    import interop
    from interop.collective_tools import check

    with interop.Rack.from_spec(args.rack):
        wrong = check(participants=tuple(int(x) for x in args.participants.split(",")),
                      sizes=tuple(int(x) for x in args.sizes.split(",")), dtypes=tuple(args.dtypes.split(",")),
                      algorithms=not args.no_algorithms, progress=not args.no_progress)
    return 1 if wrong else 0


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

    bench = sub.add_parser("bench", help="ops: modelled sweeps across chip kinds; collectives: nccl-tests on the rack")
    bench.add_argument("what", choices=["ops", "collectives"])
    bench.add_argument("--kinds", help="ops: comma-separated chip kinds (default: all but trn1)")
    bench.add_argument("--plot", default=None, help="where to write the plot (PNG)")
    bench.add_argument("--rack", default=None, help="collectives: rack spec or preset (default: the current rack)")
    bench.add_argument("--op", default="all_reduce", help="collectives: all_reduce, all_gather, reduce_scatter, "
                       "broadcast, reduce, all_to_all, gather, scatter")
    bench.add_argument("-b", "--minbytes", default="8", help="collectives: smallest size (e.g. 8, 64K)")
    bench.add_argument("-e", "--maxbytes", default="16M", help="collectives: largest size")
    bench.add_argument("-f", "--stepfactor", type=int, default=4, help="collectives: size multiplier")
    bench.add_argument("-d", "--dtype", default="float32")
    bench.add_argument("-o", "--redop", default="sum")
    bench.add_argument("-r", "--root", type=int, default=0)
    bench.add_argument("-a", "--algorithm", default=None, help="force an algorithm (default: by modelled time)")
    bench.set_defaults(func=_cmd_bench)

    check = sub.add_parser("check", help="correctness sweeps; exit 1 on any wrong element")
    check.add_argument("what", choices=["collectives"])
    check.add_argument("--rack", default="b200:17", help="rack to check on (default b200:17: 1..17 participants)")
    check.add_argument("--participants", default="1,2,3,4,5,8,13,17")
    check.add_argument("--sizes", default="0,1,13,4099", help="element counts per participant")
    check.add_argument("--dtypes", default="float32,float16,bfloat16,float8_e4m3fn,int32,uint8")
    check.add_argument("--no-algorithms", action="store_true", help="only the algorithm chosen by modelled time")
    check.add_argument("--no-progress", action="store_true")
    check.set_defaults(func=_cmd_check)
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
