"""``hybrid plan``: partition a model across a heterogeneous rack, compare the plan with the alternatives
and, with ``--run``, train it on the rack and check it against the single-device run."""

from __future__ import annotations

import os
import sys

NAME = "plan"
HELP = "partition a model across the rack's chips, compare, and run the plan (--run)"
REQUIRES = ("torch",)
ORDER = 6


def add_arguments(parser) -> None:
    from hybrid_cli.arguments import count, positive_int, slot_list
    from planner.models import model_names
    from planner.optimizers import OPTIMIZERS

    parser.add_argument("--model", default="gpt",
                        help=f"a named model ({', '.join(model_names())}), a transformers model type (gpt2, llama, "
                             "...: its default config, no download) or module:factory (default: gpt)")
    parser.add_argument("--rack", default=None, help="rack spec or preset (default: the current rack, fusion-default)")
    parser.add_argument("--objective", default="time", choices=("time", "cost", "energy"))
    parser.add_argument("--run", type=count, default=0, metavar="STEPS",
                        help="train the plan this many steps and check it against the single-device run")
    parser.add_argument("--plot", default=None, metavar="PATH", help="write the plan's pipeline chart (PNG)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the plan as JSON")
    parser.add_argument("--global-batch", "--batch", dest="global_batch", type=positive_int, default=None,
                        help="rows per step (default: the model's example batch; --batch is the old name)")
    parser.add_argument("--seq", type=positive_int, default=None, help="sequence length (token models)")
    parser.add_argument("--microbatches", type=positive_int, default=None,
                        help="fix the microbatch count (default: search)")
    parser.add_argument("--schedule", default="auto", choices=("auto", "1f1b", "gpipe", "interleaved"),
                        help="the pipeline schedule (auto: the fastest the step model finds, interleaved included)")
    parser.add_argument("--optimizer", default="adamw", choices=tuple(OPTIMIZERS))
    parser.add_argument("--slots", type=slot_list, default=None,
                        help="comma-separated slots the plan may use (default: all)")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16"), help="parameter dtype")


def host_huge_pages() -> None:
    """Put the process's large host blocks (a slot's bytes, the CPU's) on transparent huge pages, through
    PyTorch's own switch ``THP_MEM_ALLOC_ENABLE``, which c10 reads once, at its first allocation: so before torch
    is imported. A setting of the user's wins. Blocks of 2 MB and more are then mapped at 2 MB alignment, and a
    freed one leaves the heap rather than staying resident in it: the README's flagship (``--run 3``) peaked at
    3.95 GB of host memory with them, 4.30 GB without, when they were introduced (benchmarks/RESULTS.md,
    plan_call, has today's figure)."""
    if "torch" not in sys.modules:  # later it would change nothing here, only what this process starts
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def main(args) -> int:
    host_huge_pages()
    import interop
    from devices.text_table import paragraph
    from hybrid_cli.outputs import check_outputs, draw, write_data
    from interop.live import plan_run
    from interop.live.plan_models import build

    check_outputs({"--json": args.json, "--plot": args.plot})  # before the search, not after
    pm = build(args.model, real=args.run > 0, batch=args.global_batch, seq=args.seq, dtype=args.dtype)
    print(paragraph(f"model: {pm.name}: {pm.description}", indent="  "))
    plan = interop.plan(pm.model, pm.inputs, args.rack, slots=args.slots, objective=args.objective,
                        microbatches=args.microbatches, schedule=args.schedule, optimizer=args.optimizer,
                        loss_fn=pm.loss_fn, example_targets=pm.targets)
    print()
    print(plan.table())
    print()
    print(plan.baselines().table())
    drawn = True
    if args.json:  # the data before the picture
        print(f"plan JSON: {write_data('--json', args.json, plan.to_json())}")
    if args.plot:
        chart = draw(NAME, "--plot", lambda: plan.gantt(args.plot))
        drawn = chart is not None
        if drawn:
            print(f"\npipeline chart (modelled): {chart}")
    if args.run <= 0:
        return 0 if drawn else 1
    if not plan.live:
        print(f"\n--run: rack {plan.rack.name} has {len(plan.rack)} slots, more than a live rack holds; plan only")
        return 2
    print()
    check = plan_run.run_and_check(plan, pm, args.run, echo=print)
    return 0 if check.matches and drawn else 1
