"""``hybrid bench``: modelled op sweeps across chip kinds; nccl-tests-style collectives on the rack."""

from __future__ import annotations

import sys

NAME = "bench"
HELP = "ops: modelled sweeps across chip kinds; collectives: nccl-tests on the rack"
REQUIRES = ("torch", "matplotlib")
ORDER = 30


def add_arguments(parser) -> None:
    from hybrid_cli.arguments import positive_int

    parser.add_argument("what", choices=["ops", "collectives"])
    parser.add_argument("--kinds", help="ops: comma-separated chip kinds (default: all but trn1)")
    parser.add_argument("--plot", default=None, help="where to write the plot (PNG)")
    parser.add_argument("--rack", default=None, help="collectives: rack spec or preset (default: the current rack)")
    parser.add_argument("--op", default="all_reduce", help="collectives: all_reduce, all_gather, reduce_scatter, "
                        "broadcast, reduce, all_to_all, gather, scatter")
    parser.add_argument("-b", "--minbytes", default="8", help="collectives: smallest size (e.g. 8, 64K)")
    parser.add_argument("-e", "--maxbytes", default="16M", help="collectives: largest size")
    parser.add_argument("-f", "--stepfactor", type=positive_int, default=4, help="collectives: size multiplier")
    parser.add_argument("-d", "--dtype", default="float32")
    parser.add_argument("-o", "--redop", default="sum")
    parser.add_argument("-r", "--root", type=int, default=0)
    parser.add_argument("-a", "--algorithm", default=None, help="force an algorithm (default: by modelled time)")


def _sizes(args) -> list[int]:
    from collectives.verify import parse_bytes

    lo, hi, factor = parse_bytes(args.minbytes), parse_bytes(args.maxbytes), max(2, args.stepfactor)
    if lo > hi:
        raise ValueError(f"-b ({lo} bytes) must not exceed -e ({hi} bytes)")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s = s * factor if s else 1
    return sizes


def main(args) -> int:
    from hybrid_cli.outputs import check_outputs, draw

    if args.what == "collectives":
        import interop
        from interop.commands.collective_tools import bench, plot

        path = args.plot or "bench_collectives.png"
        check_outputs({"--plot": path})  # before the sweep, not after
        if args.rack:
            interop.set_rack(args.rack)
        rows = bench(args.op, _sizes(args), dtype=args.dtype, redop=args.redop, root=args.root,
                     algorithm=args.algorithm)
        drawn = draw(NAME, "--plot", lambda: plot(rows, path))
        if drawn:
            print(f"plot: {drawn}")
        return 1 if any(r.wrong_oop or r.wrong_ip > 0 for r in rows) or drawn is None else 0
    if args.what == "ops":
        from interop.commands.bench_ops import DEFAULT_KINDS, plot, sweep

        path = args.plot or "bench_ops.png"
        check_outputs({"--plot": path})
        kinds = args.kinds.split(",") if args.kinds else DEFAULT_KINDS
        result = sweep(kinds)
        for family in ("matmul", "attention", "elementwise"):
            print(result.table(family))
            print()
        drawn = draw(NAME, "--plot", lambda: plot(result, path))
        if drawn:
            print(f"plot: {drawn}")
        return 0 if drawn else 1
    print(f"unknown benchmark {args.what!r}", file=sys.stderr)
    return 2
