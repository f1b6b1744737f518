"""``hybrid racks``: the rack presets and every catalogue and fabric figure with its source."""

from __future__ import annotations

NAME = "racks"
HELP = "list rack presets and the chip catalogue with sources"
ORDER = 10


def add_arguments(parser) -> None:
    parser.add_argument("--kind", help="only this chip kind")


def main(args) -> int:
    import devices
    from interop.fmt import table

    print("== presets ==")
    rows = devices.presets_rows()
    print(table(["name", "slots", "kinds", "domains", "network", "description"],
                [[r["name"], r["slots"], r["kinds"], r["domains"], r["network"], r["description"]] for r in rows],
                align="lrllll"))
    print("\n== catalogue (dense figures; status: published / secondary / projected) ==")
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
    from interop.fmt import table

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
