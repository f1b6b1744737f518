"""``hybrid demo``: train a GPT-style model on the rack, checked against the CPU."""

from __future__ import annotations

import warnings

NAME = "demo"
HELP = "train a GPT-style model on the rack, checked against the CPU"
REQUIRES = ("torch",)
ORDER = 0


def add_arguments(parser) -> None:
    parser.add_argument("--rack", default="fusion-default", help="rack spec or preset (default: fusion-default)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true",
                        help="also compare the modelled step time eager vs torch.compile on each kind of slot")


def main(args) -> int:
    import interop
    from interop.commands.demo import DemoConfig, run

    _ = interop
    with warnings.catch_warnings():
        # The demo lists what the real chips would do differently once, at the end (interop.commands.demo).
        warnings.simplefilter("ignore", interop.FidelityWarning)
        result = run(DemoConfig(rack=args.rack, steps=args.steps, batch=args.batch, seed=args.seed,
                                compile=args.compile))
    return 0 if result.ok else 1
