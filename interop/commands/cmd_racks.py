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
    return 0
