"""``hybrid whatif``: a training step of a model on a rack that may exist only on paper (every figure modelled).

    hybrid whatif --model llama3-70b --rack trn3-ultraserver*64 --tp 8 --pp 4 --global-batch 1024 --seq 8192 \
        --precision fp8
    hybrid whatif --model llama3.1-405b --rack trn3-ultraserver*7282 --search
    hybrid whatif --model llama3.1-405b --compare trn3-ultraserver*7282 gb300-nvl72*14563
    hybrid whatif --model llama2-70b --rack trn1-cluster-32 --neuron --tp 32 --pp 8 --gbs 1024 --seq 4096
    hybrid whatif --model llama3-8b --rack h100-node --kernels eager     # the ops as written, not a tuned stack
"""

from __future__ import annotations

import sys

NAME = "whatif"
HELP = "model a training step of a model on a rack (modelled: time, memory, energy, cost, breakdown)"
REQUIRES = ("transformers",)
ORDER = 60

DEFAULT_BATCH_TOKENS = 16 * 2**20
"""Tokens per step when --global-batch is not given: Llama 3 405B's 16M-token batch (The Llama 3 Herd of Models,
3.4.1)."""


def add_arguments(parser) -> None:
    from hybrid_cli.arguments import positive_int
    from planner.kernels import KERNELS
    from planner.models import model_names
    from planner.optimizers import OPTIMIZERS
    from planner.precision import PRECISIONS

    parser.add_argument("--model", required=True, help=f"a named model ({', '.join(model_names(whatif=True))}) or a "
                        "transformers causal-LM model type (llama, gpt2, mixtral, ...)")
    parser.add_argument("--rack", default=None, help="a rack preset or spec, e.g. h100-node*128, "
                        "trn3-ultraserver*64, 'h100:1024'")
    parser.add_argument("--compare", nargs="+", metavar="RACK", default=None,
                        help="model the step on several racks and print them side by side")
    for dim, text in (("tp", "tensor parallel"), ("pp", "pipeline stages"), ("cp", "context parallel"),
                      ("ep", "expert parallel"), ("vp", "virtual pipeline chunks per stage"),
                      ("dp", "data-parallel replicas (default: the chips left over)")):
        parser.add_argument(f"--{dim}", type=positive_int, default=None, help=text)
    parser.add_argument("--fsdp", action="store_true", help="shard like FSDP / ZeRO-3")
    parser.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=None, help="ZeRO stage (default 1)")
    parser.add_argument("--mbs", "--microbatch", dest="microbatch", type=positive_int, default=None,
                        help="samples per microbatch per replica")
    parser.add_argument("--global-batch", "--gbs", dest="global_batch", type=positive_int, default=None,
                        help="samples per step (default: 16M tokens, Llama 3 405B's batch: 2,048 x 8,192; "
                             "--gbs is the old name)")
    parser.add_argument("--seq", type=positive_int, default=8192, help="tokens per sample")
    parser.add_argument("--precision", "--dtype", dest="precision", default="bfloat16", choices=list(PRECISIONS),
                        help="training precision: bfloat16, fp8 (FP8 matmuls, the rest bfloat16) or float32; "
                             "--dtype is the old name")
    parser.add_argument("--kernels", default="fused", choices=list(KERNELS),
                        help="fused (default): a production stack (fused RMSNorm, flash attention, fitted step "
                             "efficiencies); eager: the model's ops as written, as a slot runs them, priced op by op "
                             "(as `hybrid plan` predicts)")
    parser.add_argument("--recompute", default="auto", help="none, selective, full, full:K or auto")
    parser.add_argument("--optimizer", default="adamw", choices=list(OPTIMIZERS))
    parser.add_argument("--neuron", action="store_true",
                        help="--tp/--pp/--dp count NeuronCore ranks as Neuron configurations do (Trn1: 2 per chip; "
                             "Trn2/Trn3: 8 / --lnc), mapped onto chips")
    parser.add_argument("--lnc", type=positive_int, default=None, help="Logical NeuronCore setting with --neuron "
                        "(Trn2/Trn3; default 2)")
    parser.add_argument("--price-basis", dest="price_basis", default="on-demand",
                        help="price basis of the cost: on-demand, capacity-block or reserved-effective (one for "
                             "every rack compared)")
    parser.add_argument("--search", action="store_true", help="find the fastest configuration that fits")
    parser.add_argument("--plot", default=None, metavar="PATH", help="draw one step per stage (PNG)")
    parser.add_argument("--goodput", action="store_true",
                        help="expected goodput under the default failure model (and from 16K to 1M chips)")


def _parallel(args) -> dict | None:
    out = {}
    for key in ("tp", "pp", "cp", "ep", "vp", "dp", "zero", "microbatch"):
        value = getattr(args, key)
        if value is not None:
            out[key] = value
    if args.fsdp:
        out["fsdp"] = True
    return out or None


def _neuron_parallel(args, rack: str) -> dict:
    """--tp/--pp/--dp in NeuronCore ranks, mapped onto the chips of ``rack``'s one Trainium kind."""
    import devices
    from planner.neuron_config import NeuronConfig

    kinds = list(devices.parse_rack(rack).counts())
    if len(kinds) != 1 or devices.chip(kinds[0]).family != "trainium":
        raise ValueError(f"--neuron: degrees in NeuronCores need a rack of one Trainium kind; {rack} holds "
                         f"{', '.join(kinds)}")
    config = NeuronConfig(kind=kinds[0], tp=args.tp or 1, pp=args.pp or 1, dp=args.dp, lnc=args.lnc,
                          zero1=args.zero != 0, microbatch=args.microbatch or 1)
    out = {k: v for k, v in config.parallel().as_dict().items() if v is not None}
    for key in ("cp", "ep", "vp"):
        if getattr(args, key) is not None:
            out[key] = getattr(args, key)
    return out


def main(args) -> int:
    from devices.text_table import paragraph
    from planner import whatif
    from planner.report import compare_table

    racks = args.compare or ([args.rack] if args.rack else None)
    if not racks:
        raise ValueError("--rack or --compare: name at least one rack (a preset or a spec such as 'h100:1024')")
    if args.search and _parallel(args):
        raise ValueError("--search chooses tp/pp/cp/ep/vp/dp/fsdp/zero/mbs itself; drop those options")
    if args.lnc is not None and not args.neuron:
        raise ValueError("--lnc: give --neuron too (the Logical NeuronCore setting counts NeuronCores)")
    if args.neuron and (args.search or args.fsdp):
        raise ValueError("--neuron: maps --tp/--pp/--dp given in NeuronCores; drop --search and --fsdp")
    parallel = "search" if args.search else _parallel(args)
    from hybrid_cli.outputs import check_outputs, draw

    check_outputs({"--plot": args.plot})  # before the estimates, not after
    gbs = args.global_batch if args.global_batch is not None else max(1, DEFAULT_BATCH_TOKENS // args.seq)
    estimates, failures = [], []
    for rack in racks:
        try:
            if args.neuron:
                parallel = _neuron_parallel(args, rack)
            estimates.append(whatif(args.model, rack, parallel=parallel, global_batch=gbs, seq_len=args.seq,
                                    precision=args.precision, recompute=args.recompute,
                                    optimizer=args.optimizer, price_basis=args.price_basis,
                                    kernels=args.kernels))
        except ValueError as error:
            if len(racks) == 1:
                raise
            failures.append(f"{rack}: {error}")
    print(paragraph(f"hybrid whatif: {args.model}, global batch {gbs:,} x {args.seq:,} tokens, {args.precision}, "
                    f"kernels {args.kernels}, prices {args.price_basis} (all figures modelled; projected chips "
                    f"marked)"))
    if len(estimates) == 1:
        print(estimates[0])
    elif estimates:
        print(compare_table(estimates))
    if parallel is None and estimates:
        print(paragraph("configuration: the default (of the plain ones, as fast as any by its compute bound, on the "
                        "fewest chips); --search runs the step model over every configuration"))
    for line in failures:
        print(f"error: {line}", file=sys.stderr)
    if args.goodput:
        from planner.goodput import FailureModel, scaling_table

        for est in estimates:
            print()
            print(paragraph(est.goodput(FailureModel()).describe(), indent="  "))
            print(scaling_table(est))
    drawn = True
    if args.plot and estimates:
        from planner.plot import plot_step

        path = draw(NAME, "--plot", lambda: plot_step(estimates[0], args.plot))
        drawn = path is not None
        if drawn:
            print(f"plot: {path}")
    return 0 if estimates and all(e.fits for e in estimates) and not failures and drawn else 1
