"""``hybrid diverge``: where a training script's run on the rack first parts from its single-device reference.

The script runs unmodified, twice, for --steps optimizer steps: on the rack (one process, or
--nproc-per-node ranks launched as torchrun launches them: FSDP2, DTensor tensor/sequence parallelism, DDP,
pipelining, nn.DataParallel) and as its reference: one process (--reference cpu: plain torch on the CPU;
slot: one slot under the CUDA layer, for scripts that require a GPU), or gloo: the same --nproc-per-node
ranks (2 or more) in plain torch on the CPU, launched alike, for a script that picks gloo and the CPU
without CUDA; each rank is compared with the same rank, shard against shard, so a bug of the script itself
(in both runs) does not show and one of the rack's (a collective or a kernel that computes otherwise) does.
Hooks record each module's parameters before the first step (init), its forward outputs (forward), the
gradients of its inputs (input_grad), each parameter's gradient (param_grad) and the optimizer's update
(update), and every collective of the run under test. Against one process, a shard is compared with the
matching slice of the reference's full tensor.

It prints the first point that differs beyond the tolerance (stated by dtype and phase), the last that
agreed, their magnitudes, the module's call site and the collective nearest before it.

exit status: 0 the runs agree, 1 they diverge, 2 a bad argument or a run that recorded nothing to compare.

example:
  hybrid diverge --nproc-per-node 2 --steps 2 train.py --lr 0.1
  hybrid diverge --reference slot --json where.json example.py
  hybrid diverge --nproc-per-node 2 --reference gloo train.py
"""

from __future__ import annotations

import argparse

NAME = "diverge"
HELP = "find where a training run on the rack first differs from its single-device reference"
REQUIRES = ("torch",)
ORDER = 27


def add_arguments(parser) -> None:
    parser.usage = ("hybrid diverge [--nproc-per-node N] [--steps K] [--reference cpu|slot|gloo] [--json PATH]\n"
                    "                      [--rack RACK] SCRIPT [ARGS...]")
    parser.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                        help="ranks of the run under test, launched as torchrun launches them (default 1: one "
                             "process); the reference is one process, or as many with --reference gloo")
    parser.add_argument("--steps", type=int, default=2, metavar="K",
                        help="optimizer steps to record and compare (default 2)")
    parser.add_argument("--reference", default="cpu", metavar="cpu|slot|gloo",
                        help="the reference run: cpu (plain torch, one process, default), slot (one slot under "
                             "the CUDA layer, for a script that requires a GPU) or gloo (plain torch on the CPU "
                             "with the same --nproc-per-node ranks, 2 or more, rank compared with rank)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH")
    parser.add_argument("--rack", help="rack spec for the run under test (default: the current rack)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                        help="the training script and its own arguments")


def _error(message: str) -> int:
    import sys

    print(f"hybrid diverge: error: {message}", file=sys.stderr)
    return 2


def main(args) -> int:
    import os

    from interop.diverge import REFERENCES

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        return _error("no SCRIPT given: hybrid diverge [OPTIONS] SCRIPT [ARGS...] (see hybrid diverge --help)")
    script, script_args = command[0], command[1:]
    if not os.path.isfile(script):
        return _error(f"SCRIPT {script!r} not found (working directory {os.getcwd()})")
    if args.steps < 1:
        return _error(f"--steps {args.steps}: give at least 1 optimizer step")
    if args.nproc_per_node < 1:
        return _error(f"--nproc-per-node {args.nproc_per_node}: give at least 1 rank")
    if args.reference not in REFERENCES:
        return _error(f"--reference {args.reference!r}: choose cpu (plain torch on the CPU), slot (one slot "
                      f"under the CUDA layer) or gloo (the same ranks on the CPU over Gloo)")
    if args.reference == "gloo" and args.nproc_per_node < 2:
        return _error(f"--reference gloo runs the same parallelism over Gloo: give --nproc-per-node 2 or more "
                      f"(got {args.nproc_per_node}; one process: --reference cpu)")
    if args.rack:
        from interop.diverge import check_rack

        try:
            check_rack(args.rack)
        except ValueError as e:
            return _error(f"--rack {e}")
    if args.json:
        from devices.output_files import check_writable

        try:
            check_writable(args.json, "--json")
        except ValueError as e:
            return _error(str(e))
    from interop.diverge import RunFailed, diverge

    try:
        result = diverge(script, script_args, nproc_per_node=args.nproc_per_node, steps=args.steps,
                         reference=args.reference, rack=args.rack)
    except RunFailed as e:
        hint = {"cpu": "\n(a script that requires a GPU runs its reference with --reference slot)",
                "gloo": "\n(--reference gloo runs the script in plain torch on the CPU: one that requires a GPU or "
                        "'nccl' has no reference of its ranks; --reference slot runs one process on a slot)"}
        hint = hint.get(args.reference, "") if str(e).startswith("the reference") else ""
        return _error(f"{e}{hint}")
    print(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(result.to_json())
        print(f"hybrid diverge: JSON written to {args.json}")
    return result.exit_status
