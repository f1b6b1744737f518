"""``hybrid claims``: AWS's re:Invent 2025 Trn3 claims beside what the catalogue and the models give.

    hybrid claims                      # the catalogue's answer; serving, energy, throughput and the cost claim's
                                       # break-even modelled on llama3-70b (no torch: its profiles ship)
    hybrid claims --model llama3-8b    # the training rows on another model (one not shipped is traced once)
    hybrid claims --markdown           # one Markdown table, for a renderer (a document, an issue)
"""

from __future__ import annotations

NAME = "claims"
HELP = "AWS's Trn3 vs Trn2 claims (re:Invent 2025) beside the catalogue and the models, with verdicts"
ORDER = 65


def add_arguments(parser) -> None:
    from planner.claims import GPU, MODEL

    parser.add_argument("--model", default=MODEL,
                        help=f"the model of the training rows: FP8 training on both UltraServers and {GPU} (modelled "
                             f"energy per token, throughput per chip, and the Trn3 price per chip-hour at which the "
                             f"cost claim holds: a break-even); default {MODEL}")
    parser.add_argument("--price-basis", default=None, dest="price_basis",
                        help="price basis of the cost claim: on-demand (default), capacity-block or "
                             "reserved-effective")
    parser.add_argument("--markdown", action="store_true",
                        help="print one Markdown table (for a renderer) instead of the terminal's tables")


def main(args) -> int:
    from devices.chip_set import DEFAULT_BASIS, check_basis
    from devices.text_table import paragraph
    from planner.claims import GLOBAL_BATCH, SEQ_LEN, TRN2, TRN3, claims, table

    basis = check_basis(args.price_basis or DEFAULT_BASIS)
    rows = claims(args.model, price_basis=basis)
    print(paragraph(f"hybrid claims: AWS re:Invent 2025, Trn3 ({TRN3}) against Trn2 ({TRN2}); catalogue figures "
                    f"with their status in `hybrid racks`, model figures labelled modelled; the training rows: "
                    f"{args.model}, FP8, {GLOBAL_BATCH:,} x {SEQ_LEN:,} tokens a step, each rack's default "
                    f"configuration, prices {basis} (--model, --price-basis)"))
    print(table(rows, markdown=args.markdown))
    return 0
