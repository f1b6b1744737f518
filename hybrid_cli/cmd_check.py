"""``hybrid check``: correctness sweeps that exit 1 on any wrong element."""

from __future__ import annotations

NAME = "check"
HELP = "correctness sweeps; exit 1 on any wrong element"
REQUIRES = ("torch",)
ORDER = 40


def add_arguments(parser) -> None:
    parser.add_argument("what", choices=["collectives"])
    parser.add_argument("--rack", default="b200:17", help="rack to check on (default b200:17: 1..17 participants)")
    parser.add_argument("--participants", default="1,2,3,4,5,8,13,17")
    parser.add_argument("--sizes", default="0,1,13,4099", help="element counts per participant")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16,float8_e4m3fn,int32,uint8")
    parser.add_argument("--no-algorithms", action="store_true", help="only the algorithm chosen by modelled time")
    parser.add_argument("--no-progress", action="store_true")


def _counts(text: str, option: str, least: int) -> tuple[int, ...]:
    values = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) < least:
            raise ValueError(f"{option}: expected comma-separated integers >= {least}, got {item!r} in {text!r}")
        values.append(int(item))
    return tuple(values)


def main(args) -> int:
    """Exit 0 when every case was exact, 1 on any wrong element, 2 when nothing could be checked (with why)."""
    import interop
    from interop.commands.collective_tools import check

    participants = _counts(args.participants, "--participants", 1)
    sizes = _counts(args.sizes, "--sizes", 0)
    dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
    with interop.Rack.from_spec(args.rack):
        wrong = check(participants=participants, sizes=sizes, dtypes=dtypes, algorithms=not args.no_algorithms,
                      progress=not args.no_progress)
    return 1 if wrong else 0
