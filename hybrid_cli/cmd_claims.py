"""``hybrid claims``: AWS's re:Invent 2025 Trn3 claims beside what the catalogue and the models give.

    hybrid claims                      # the catalogue's answer, and the serving claim modelled (no torch)
    hybrid claims --model llama3-8b    # plus the step model's energy, throughput and break-even price (modelled)
"""

from __future__ import annotations

NAME = "claims"
HELP = "AWS's Trn3 vs Trn2 claims (re:Invent 2025) beside the catalogue and the models, with verdicts"
ORDER = 65


def add_arguments(parser) -> None:
    parser.add_argument("--model", default=None,
                        help="also model FP8 training of this preset on both UltraServers and 144 H200 (modelled "
                             "energy per token, throughput per chip, the Trn3 price the cost claim needs)")
    parser.add_argument("--price-basis", default=None, dest="price_basis",
                        help="price basis of the cost claim: on-demand (default), capacity-block or "
                             "reserved-effective")


def main(args) -> int:
    from devices.chip_set import DEFAULT_BASIS, check_basis
    from planner.claims import GPU, TRN2, TRN3, claims, table

    basis = check_basis(args.price_basis or DEFAULT_BASIS)
    extra = {"price_basis": basis} if args.model else {}
    rows = claims(args.model, **extra)
    print(f"hybrid claims: AWS re:Invent 2025, Trn3 ({TRN3}) against Trn2 ({TRN2}); catalogue figures with their "
          f"status in `hybrid racks`, model figures labelled modelled")
    print(table(rows))
    if not args.model:
        print(f"the training cost claim's break-even (the Trn3 price per chip-hour at which it holds against "
              f"{GPU}, modelled): hybrid claims --model llama3-8b (any named model; traces it once)")
    return 0
