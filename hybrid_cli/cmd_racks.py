"""``hybrid racks``: the rack presets and every catalogue and fabric figure with its source."""

from __future__ import annotations

NAME = "racks"
HELP = "list rack presets and the chip catalogue with sources"
ORDER = 10


def add_arguments(parser) -> None:
    parser.add_argument("--kind", help="only this chip kind")


def main(args) -> int:
    import devices
    from devices.text_table import table

    print("== presets ==")
    rows = devices.presets_rows()
    print(table(["name", "slots", "kinds", "domains", "network", "description"],
                [[r["name"], r["slots"], r["kinds"], r["domains"], r["network"], r["description"]] for r in rows],
                align="lrllll"))
    print("\n== catalogue (dense figures; prices per chip-hour by basis; status: published / secondary / estimated / "
          "projected; unset: why) ==")
    kinds = [args.kind] if args.kind else None
    rows = devices.catalogue_rows(kinds)
    print(table(["kind", "figure", "value", "status", "source"],
                [[r["kind"], r["figure"], r["display"], r["status"], r["source"] + (f" [{r['note']}]" if r["note"] else "")]
                 for r in rows], align="llrll"))
    print("\n== fabrics (latencies, link and network figures, default layout sizes) ==")
    rows = devices.fabric_rows(kinds)
    print(table(["subject", "figure", "value", "status", "source"],
                [[r["subject"], r["figure"], r["display"], r["status"], r["source"] + (f" [{r['note']}]" if r["note"] else "")]
                 for r in rows], align="llrll"))
    from devices.sources import DOCUMENTS

    print(f"\nsources: {len(DOCUMENTS)} documents, listed in devices/SOURCES.md (title, publisher, URL, date read)")
    if args.kind:
        _print_capabilities(args.kind)
    return 0


def _print_capabilities(kind: str) -> None:
    """The kind's capability table: native dtypes per op class, then every exception with its source."""
    import devices
    from devices.text_table import table

    caps = devices.capabilities(kind)
    print(f"\n== capabilities of {caps.kind} (dtypes per op class; status: published / secondary / projected / "
          "assumption) ==")
    print(table(["op classes", "dtypes", "level", "status", "reason, instead, source"],
                [[r["op_classes"], r["dtypes"], r["level"], r["status"],
                  "; ".join(x for x in (r["reason"], f"instead: {r['instead']}" if r["instead"] else "", r["source"])
                            if x)]
                 for r in caps.rows()], align="lllll"))
    ident = caps.cuda
    l2 = "unset" if ident.l2_cache_size is None else f"{ident.l2_cache_size >> 20} MiB"
    print(f"\ntorch.cuda answers on a {caps.kind} slot: capability ({ident.major}, {ident.minor}), "
          f"multi_processor_count {ident.multi_processor_count}, L2 {l2} [{ident.status}: {ident.source}]"
          + (f"\n  note: {ident.note}" if ident.note else ""))
    for note in caps.notes:
        print(f"note: {note}")
    _print_numerics(caps)


def _print_numerics(caps) -> None:
    """The kind's numerics: rounding, block formats with their scale rules, matmul accumulation."""
    from devices.text_table import table

    r = caps.rounding
    if r is not None:
        stochastic = ("none" if r.stochastic_scope == "none"
                      else f"{r.stochastic_scope.replace('_', ' ')}: {', '.join(r.stochastic_dtypes)}")
        print(f"\n== numerics of {caps.kind} (used by device numerics mode) ==\n"
              f"rounding: default {r.default}; stochastic: {stochastic} [{r.status}: {r.source}]"
              + (f"\n  switch: {r.switch}" if r.switch else "") + f"\n  algorithm: {r.algorithm}")
    if caps.block_formats:
        print(table(["block format", "block", "element", "scale", "scale rule", "status", "source"],
                    [[b.format, b.block, b.element, b.scale, b.scale_rule, b.status,
                      b.source + (f" [{b.note}]" if b.note else "")] for b in caps.block_formats], align="lrlllll"))
    if caps.accumulation:
        print(table(["matmul operands", "accumulator", "outputs", "status", "source"],
                    [[", ".join(a.inputs), a.accumulator, ", ".join(a.outputs), a.status,
                      a.source + (f" [{a.note}]" if a.note else "")] for a in caps.accumulation], align="lllll"))
