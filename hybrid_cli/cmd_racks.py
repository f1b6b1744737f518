"""``hybrid racks``: the rack presets and every catalogue and fabric figure with its source.

The default view fits a 120-column terminal: each figure names its sources by number; ``--sources`` is the
sources' own view (every figure's full citation, then the numbered documents).
"""

from __future__ import annotations

NAME = "racks"
HELP = "list rack presets and the chip catalogue with sources"
ORDER = 10

WIDTH = 120
"""The terminal width the default view fits."""


def add_arguments(parser) -> None:
    parser.add_argument("--kind", help="only this chip kind")
    parser.add_argument("--sources", action="store_true",
                        help="the sources' view: every figure's full citation and the numbered documents")


def main(args) -> int:
    import devices

    kinds = [args.kind] if args.kind else None
    if args.sources:
        _print_sources(kinds)
        return 0
    from devices.text_table import table

    print("== presets ==")
    rows = devices.presets_rows()
    print(table(["name", "slots", "kinds", "domains", "network", "description"],
                [[r["name"], r["slots"], r["kinds"], r["domains"], r["network"], r["description"]] for r in rows],
                align="lrllll", wrap=[None, None, 14, 22, 18, 30]))
    print("\n== catalogue (dense figures; prices per chip-hour by basis; status: published / secondary / estimated / "
          "projected;\n   unset: why; sources: `hybrid racks --sources`) ==")
    print(table(["kind", "figure", "value", "status", "sources", "note"],
                [[r["kind"], r["figure"], r["display"], r["status"], _numbers(r["source"]), r["note"] or ""]
                 for r in devices.catalogue_rows(kinds)], align="llrlll", wrap=[None, None, None, None, 12, 46]))
    print("\n== fabrics (latencies, link and network figures, default layout sizes) ==")
    print(table(["subject", "figure", "value", "status", "sources", "note"],
                [[r["subject"], r["figure"], r["display"], r["status"], _numbers(r["source"]), r["note"] or ""]
                 for r in devices.fabric_rows(kinds)], align="llrlll", wrap=[None, None, None, None, 12, 34]))
    from devices.sources import DOCUMENTS

    print(f"\nsources: {len(DOCUMENTS)} documents, numbered in `hybrid racks --sources` (each figure's full "
          "citation)\nand listed in devices/SOURCES.md (title, publisher, URL, date read)")
    if args.kind:
        _print_capabilities(args.kind)
    return 0


def _numbers(source: str) -> str:
    from devices.sources import cited

    numbers = cited(source)
    return ", ".join(f"[{n}]" for n in numbers) if numbers else "-"


def _print_sources(kinds) -> None:
    """Every figure's citation in full, wrapped to the width, then the numbered documents."""
    import devices
    from devices.sources import DOCUMENTS
    from devices.text_table import paragraph

    # A URL longer than the width continues on the next line (split after a '/'); devices/SOURCES.md has it whole.
    print("== figures and their sources ==")
    for r in devices.catalogue_rows(kinds):
        print(paragraph(f"{r['kind']} {r['figure']} = {r['display']} [{r['status']}] {_numbers(r['source'])}: "
                        f"{r['source']}", WIDTH, "    "))
    for r in devices.fabric_rows(kinds):
        print(paragraph(f"{r['subject']} {r['figure']} = {r['display']} [{r['status']}] {_numbers(r['source'])}: "
                        f"{r['source']}", WIDTH, "    "))
    print("\n== documents ==")
    for i, doc in enumerate(DOCUMENTS, 1):
        via = f"; read through {', '.join(doc.via)}" if doc.via else ""
        print(paragraph(f"[{i}] {doc.title} ({doc.publisher}, {doc.url}; read {doc.read}{via}) [{doc.kind}]", WIDTH,
                        "    "))


def _print_capabilities(kind: str) -> None:
    """The kind's capability table: native dtypes per op class, then every exception with its source."""
    import devices
    from devices.text_table import paragraph, table

    caps = devices.capabilities(kind)
    print(f"\n== capabilities of {caps.kind} (dtypes per op class; status: published / secondary / projected / "
          "assumption) ==")
    print(table(["op classes", "dtypes", "level", "status", "reason, instead, source"],
                [[r["op_classes"], r["dtypes"], r["level"], r["status"],
                  "; ".join(x for x in (r["reason"], f"instead: {r['instead']}" if r["instead"] else "", r["source"])
                            if x)]
                 for r in caps.rows()], align="lllll", wrap=[22, 24, None, None, 45]))
    ident = caps.cuda
    l2 = "unset" if ident.l2_cache_size is None else f"{ident.l2_cache_size >> 20} MiB"
    print("\n" + paragraph(f"torch.cuda answers on a {caps.kind} slot: capability ({ident.major}, {ident.minor}), "
                            f"multi_processor_count {ident.multi_processor_count}, L2 {l2} [{ident.status}: "
                            f"{ident.source}]", WIDTH, "  "))
    for text in ([f"note: {ident.note}"] if ident.note else []) + [f"note: {n}" for n in caps.notes]:
        print(paragraph(text, WIDTH, "  "))
    _print_numerics(caps)


def _print_numerics(caps) -> None:
    """The kind's numerics: rounding, block formats with their scale rules, matmul accumulation."""
    from devices.text_table import paragraph, table

    r = caps.rounding
    if r is not None:
        stochastic = ("none" if r.stochastic_scope == "none"
                      else f"{r.stochastic_scope.replace('_', ' ')}: {', '.join(r.stochastic_dtypes)}")
        print(f"\n== numerics of {caps.kind} (used by device numerics mode) ==")
        for text in ([f"rounding: default {r.default}; stochastic: {stochastic} [{r.status}: {r.source}]"]
                     + ([f"  switch: {r.switch}"] if r.switch else []) + [f"  algorithm: {r.algorithm}"]):
            print(paragraph(text, WIDTH, "    "))
    if caps.block_formats:
        print(table(["block format", "block", "element", "scale", "scale rule", "status", "source"],
                    [[b.format, b.block, b.element, b.scale, b.scale_rule, b.status,
                      b.source + (f" [{b.note}]" if b.note else "")] for b in caps.block_formats],
                    align="lrlllll", wrap=[None, None, None, None, 28, None, 40]))
    if caps.accumulation:
        print(table(["matmul operands", "accumulator", "outputs", "status", "source"],
                    [[", ".join(a.inputs), a.accumulator, ", ".join(a.outputs), a.status,
                      a.source + (f" [{a.note}]" if a.note else "")] for a in caps.accumulation],
                    align="lllll", wrap=[24, None, 20, None, 44]))
