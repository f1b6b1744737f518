"""``hybrid serving``: a model serving a workload on a rack that may exist only on paper (every figure modelled).

    hybrid serving --model llama3-70b --rack h100:2 --tp 2 --precision fp8 --isl 1000 --osl 1000 --requests 3000
    hybrid serving --model llama3-70b --rack trn4:8+gb300:8 --prefill trn4:8:4 --decode gb300:8:2 --isl 2000 --osl 200
    hybrid serving --model llama3-70b --rack h100:16 --isl 2000 --osl 200 --rate 20 --slo-ttft 500 --slo-tpot 50 --search
    hybrid serving --compare            # one model on a Trainium rack, a GPU rack and a disaggregated hybrid

A paper command: it imports no torch (presets need no transformers either).
"""

from __future__ import annotations

import sys

NAME = "serving"
HELP = "model serving a workload (TTFT, TPOT, throughput, $/M tokens, J/token), colocated or disaggregated"
ORDER = 62

DEMO_RACKS = ("trn3:16", "h100:16", "trn4:8+gb300:8")
"""``--compare`` without racks: a Trainium rack, a GPU rack, and Trn4 prefill feeding GB300 decode over NVLink
Fusion."""

DEMO = {"model": "llama3-70b", "isl": 2000, "osl": 200, "precision": "fp8", "requests": 400}
"""The demo's model and workload when ``--compare`` is given alone."""


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None, help="a preset (llama3-8b, llama3-70b, llama3.1-405b, "
                        "mixtral-8x7b) or a transformers causal-LM model type (llama, gpt2, mixtral, ...)")
    parser.add_argument("--rack", default=None, help="a rack preset or spec, e.g. h100:8, trn3-ultraserver*4, "
                        "trn4:8+gb300:8")
    parser.add_argument("--isl", type=int, default=None, help="input tokens per request")
    parser.add_argument("--osl", type=int, default=None, help="output tokens per request")
    parser.add_argument("--requests", type=int, default=None, help="requests (default 1,000)")
    arrival = parser.add_mutually_exclusive_group()
    arrival.add_argument("--concurrency", type=int, default=None, help="requests in flight (a closed loop)")
    arrival.add_argument("--rate", type=float, default=None, help="Poisson arrivals, requests/s")
    for dim, text in (("tp", "tensor parallel"), ("pp", "pipeline stages"), ("ep", "expert parallel"),
                      ("replicas", "replicas (default: every chip)")):
        parser.add_argument(f"--{dim}", type=int, default=None, help=text)
    parser.add_argument("--precision", default="bfloat16",
                        help="bfloat16, fp8, fp4 or float32; a mixed checkpoint as NAME,experts=WEIGHTS[/ACTIVATIONS]"
                             "[,kv=DTYPE], e.g. bfloat16,experts=mxfp4/fp8,kv=fp8 (GPT-OSS on Blackwell)")
    parser.add_argument("--prefill", default=None, metavar="KIND:CHIPS[:TP]", help="the prefill pool")
    parser.add_argument("--decode", default=None, metavar="KIND:CHIPS[:TP]", help="the decode pool")
    parser.add_argument("--max-batch", type=int, default=None, help="most sequences in flight per instance")
    parser.add_argument("--head-padding", action="store_true",
                        help="pad attention heads a --tp does not cut, as NxD Inference (Trainium) does")
    parser.add_argument("--nxd-inference", choices=["auto", "on", "off"], default="auto",
                        help="the engine runs NxD Inference's models (vLLM Neuron, optimum-neuron): NxD's MoE "
                             "dispatch and the serving efficiencies fitted under it; auto (default): on Trainium pools")
    parser.add_argument("--static-decode", type=int, default=None, metavar="TOKENS",
                        help="a static-shape decode graph compiled for --max-batch lines of TOKENS cached tokens: "
                             "every step runs all of them (NxD Inference without bucketing)")
    parser.add_argument("--host-per-token", type=float, default=None, metavar="US",
                        help="a serving frontend's host time per streamed token, microseconds, overlapped with the "
                             "GPU (NVIDIA NIM 1.8.0: 67, fitted); default 0 (an in-process harness)")
    parser.add_argument("--slo-ttft", type=float, default=None, metavar="MS", help="TTFT objective, ms")
    parser.add_argument("--slo-tpot", type=float, default=None, metavar="MS", help="TPOT objective, ms")
    parser.add_argument("--search", action="store_true",
                        help="find the pools, parallelism and batch limit with the best objective within the SLO")
    parser.add_argument("--objective", default="time", choices=["time", "cost"],
                        help="search for output tokens/s per chip (time) or per dollar (cost)")
    parser.add_argument("--compare", nargs="*", metavar="RACK", default=None,
                        help="serve on several racks side by side (alone: a Trainium rack, a GPU rack and a "
                             "disaggregated hybrid)")
    parser.add_argument("--plot", default=None, metavar="PNG", help="latency against throughput as concurrency grows")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the estimate(s) as JSON")
    parser.add_argument("--trace", default=None, metavar="PATH", help="the simulated timeline as Chrome trace JSON")


def parse_pool(text: str, name: str) -> dict:
    """``KIND:CHIPS[:TP]`` as a pool dict."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise ValueError(f"--{name}: expected KIND:CHIPS[:TP] (e.g. trn4:8:4), got {text!r}")
    try:
        numbers = [int(p) for p in parts[1:]]
    except ValueError:
        raise ValueError(f"--{name}: CHIPS and TP must be integers, got {text!r}") from None
    pool = {"kind": parts[0].strip().lower(), "chips": numbers[0]}
    if len(numbers) == 2:
        pool["tp"] = numbers[1]
    return pool


def _arguments(args) -> dict:
    from planner.serving import Engine, Workload

    demo = args.compare is not None and not args.compare and args.model is None
    pick = lambda given, key: given if given is not None else (DEMO[key] if demo else None)  # noqa: E731
    model, isl, osl = pick(args.model, "model"), pick(args.isl, "isl"), pick(args.osl, "osl")
    if model is None or isl is None or osl is None:
        raise ValueError("--model, --isl and --osl: name the model and the request lengths "
                         "(or give --compare alone for the demo)")
    requests = pick(args.requests, "requests")
    workload = Workload(isl, osl, requests=requests, concurrency=args.concurrency, rate=args.rate)
    parallel = {k: getattr(args, k) for k in ("tp", "pp", "ep", "replicas") if getattr(args, k) is not None}
    if (args.prefill is None) != (args.decode is None):
        raise ValueError("--prefill and --decode: give both pools, or neither")
    slo = {}
    if args.slo_ttft is not None:
        slo["ttft"] = args.slo_ttft / 1e3
    if args.slo_tpot is not None:
        slo["tpot"] = args.slo_tpot / 1e3
    return dict(model=model, workload=workload, parallel=parallel or None,
                precision=DEMO["precision"] if demo and args.precision == "bfloat16" else args.precision,
                prefill=parse_pool(args.prefill, "prefill") if args.prefill else None,
                decode=parse_pool(args.decode, "decode") if args.decode else None, slo=slo or None,
                search=args.search, objective=args.objective,
                engine=Engine(max_batch=args.max_batch, head_padding=args.head_padding,
                              nxd_inference={"auto": None, "on": True, "off": False}[args.nxd_inference],
                              static_decode=args.static_decode,
                              host_per_token=0.0 if args.host_per_token is None else args.host_per_token / 1e6)
                if args.max_batch or args.head_padding or args.nxd_inference != "auto" or args.static_decode is not None
                or args.host_per_token is not None else None)


def main(args) -> int:
    from devices.text_table import paragraph
    from planner.serving import serving_whatif
    from planner.serving.report import compare_table

    kw = _arguments(args)
    if args.compare is None:
        racks = [args.rack] if args.rack else []
    else:
        racks = list(args.compare) or list(DEMO_RACKS)
    if not racks:
        raise ValueError("--rack or --compare: name at least one rack (a preset or a spec such as 'h100:8')")
    model = kw.pop("model")
    estimates, failures = [], []
    for rack in racks:
        mixed = "+" in rack
        try:
            est = serving_whatif(model, rack, **dict(kw, parallel=None if mixed else kw["parallel"],
                                                     prefill=kw["prefill"] if mixed or len(racks) == 1 else None,
                                                     decode=kw["decode"] if mixed or len(racks) == 1 else None))
            estimates.append(est)
        except ValueError as error:
            if len(racks) == 1:
                raise
            failures.append(f"{rack}: {error}")
    print(paragraph(f"hybrid serving: {model}, {kw['workload'].describe()}, {kw['precision']} "
                    f"(all figures modelled; projected chips marked)"))
    if len(estimates) == 1:
        print(estimates[0].table())
    elif estimates:
        print(compare_table(estimates))
    for line in failures:
        print(f"error: {line}", file=sys.stderr)
    if estimates and estimates[0].search is not None:
        print()
        print(estimates[0].search.summary())
    if args.json and estimates:
        import json

        with open(args.json, "w") as f:
            json.dump([json.loads(e.to_json()) for e in estimates], f, indent=2)
        print(f"json: {args.json}")
    if args.plot and estimates:
        print(f"plot: {estimates[0].plot(args.plot)}")
    if args.trace and estimates:
        print(f"trace: {estimates[0].export_trace(args.trace)}")
    return 0 if estimates and not failures else 1
