"""``hybrid numerics``: the drift report of a model trained in each slot's device numerics against float32."""

from __future__ import annotations

NAME = "numerics"
HELP = "drift report: train in each slot's device numerics vs float32 on the CPU (loss, gradients, range)"
REQUIRES = ("torch", "matplotlib", "transformers")
ORDER = 60


def add_arguments(parser) -> None:
    from hybrid_cli.arguments import positive_int
    from interop.numerics.drift import MODELS, RECIPES

    parser.add_argument("--model", default="gpt2", choices=MODELS, help="model to train (default: gpt2, a tiny "
                        "Hugging Face GPT-2 built from a config, no download)")
    parser.add_argument("--rack", default="trn3:1+b200:1", help="rack spec, preset or .toml file; every slot trains")
    parser.add_argument("--steps", type=positive_int, default=50, help="optimizer steps per run (default 50)")
    parser.add_argument("--recipe", action="append", default=None, metavar="RECIPE",
                        help=f"recipe (repeatable, or comma-separated; default: all of {', '.join(RECIPES)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the data")
    parser.add_argument("--strict", action="store_true",
                        help="fail (exit 2) on a recipe a slot's kind does not support natively instead of skipping it")
    parser.add_argument("--plot", default="numerics_drift.png", help="where to write the loss-curve PNG")
    parser.add_argument("--layers", action="store_true", help="also print the per-layer gradient error table")
    parser.add_argument("--json", default=None, help="also write every figure as JSON here")


def main(args) -> int:
    import json
    import sys

    from hybrid_cli.outputs import check_outputs, draw, write_data
    from interop.numerics.drift import RECIPES, DriftConfig, drift

    recipes = tuple(r.strip() for item in (args.recipe or [",".join(RECIPES)]) for r in item.split(",") if r.strip())
    check_outputs({"--json": args.json, "--plot": args.plot})  # before the training runs, not after
    config = DriftConfig(model=args.model, rack=args.rack, steps=args.steps, recipes=recipes, seed=args.seed,
                         strict=args.strict)

    def progress(index, total, what):
        print(f"[{index + 1}/{total}] training {what} ...", file=sys.stderr, flush=True)

    try:
        report = drift(config, progress=progress)
    except ValueError as error:
        print(f"hybrid numerics: {error}", file=sys.stderr)
        return 2
    print(report.table())
    if args.layers:
        print()
        print(report.layer_table())
    if args.json:  # the data before the picture
        settings = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))}
        write_data("--json", args.json, json.dumps(
            {"config": settings | {"recipe": list(recipes)}, "reference": report.reference.losses,
             "runs": [dict(row, losses=run.losses, grad_errors=run.grad_errors, numerics=run.numerics)
                      for row, run in zip(report.rows(), report.runs)],
             "skipped": [vars(s) for s in report.skipped]}, indent=1))
        print(f"json: {args.json}")
    plot = draw(NAME, "--plot", lambda: report.plot(args.plot))
    if plot is None:
        return 1
    print(f"plot: {plot}")
    return 0
