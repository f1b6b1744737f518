"""The block profiles that ship with the package: those of the documented what-ifs, so that a new user's first
``interop.whatif`` / ``hybrid whatif`` on them neither imports transformers nor traces (issue 29: 2.5 s and
6.8 s before, against 0.1 s and 0.6 s once the profile cache was warm).

:data:`QUERIES` are the what-ifs of README.md, docs/whatif.md, ``benchmarks/bench_whatif.py`` and ``hybrid
claims``. :func:`build` runs them with an empty cache and the shipped file ignored, so every profile they need
is traced, and keeps each entry exactly as the on-disk cache stores it, under the cache's own key
(:func:`planner.profile_cache.key`: the model's architecture, the block's signature, the shard, and the hash
of the tracing code and of the torch and transformers versions). A key the file lacks, from another torch or
another query, is traced as before; a file built by other code holds keys nothing asks for.

``python -m planner.shipped_profiles`` rewrites the file; ``--check`` rebuilds it in memory and says whether
the shipped one is that (``tests/planner/test_shipped_profiles.py`` fails on a stale file).
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from typing import Any

from planner import claims, profile_cache

QUERIES: tuple[dict[str, Any], ...] = (
    # README.md's Python example and docs/whatif.md's
    dict(model="llama3-8b", rack="h100-node", parallel={"fsdp": True}, global_batch=128, seq_len=8192,
         precision="fp8"),
    # hybrid whatif --model llama3-70b --rack trn3-ultraserver*64 --tp 8 --pp 4 --gbs 1024 --seq 8192 --dtype fp8
    dict(model="llama3-70b", rack="trn3-ultraserver*64", parallel={"tp": 8, "pp": 4}, global_batch=1024,
         seq_len=8192, precision="fp8"),
    # hybrid whatif --model llama3.1-405b --rack trn3-ultraserver*7282 --search --dtype fp8 --gbs 16384
    dict(model="llama3.1-405b", rack="trn3-ultraserver*7282", parallel="search", global_batch=16384,
         seq_len=8192, precision="fp8"),
    # hybrid whatif --model llama3.1-405b --compare trn3-ultraserver*7282 gb300-nvl72*14563 (the CLI's default
    # batch: 16 Mi tokens of 8,192)
    dict(model="llama3.1-405b", rack="trn3-ultraserver*7282", parallel=None, global_batch=2048, seq_len=8192),
    dict(model="llama3.1-405b", rack="gb300-nvl72*14563", parallel=None, global_batch=2048, seq_len=8192),
    # hybrid whatif --model llama3-70b --rack trn3:144+gb300:72 --tp 8 --gbs 288
    dict(model="llama3-70b", rack="trn3:144+gb300:72", parallel={"tp": 8}, global_batch=288, seq_len=8192),
    # benchmarks/bench_whatif.py and issue 29's first-run query
    dict(model="llama3.1-405b", rack="trn3-ultraserver*7282", parallel={"tp": 16, "pp": 16, "cp": 4, "vp": 2},
         global_batch=16384, seq_len=8192, precision="fp8"),
    # hybrid claims: its training rows on planner.claims.MODEL (Trn3, Trn2 and the GPU rack)
    *claims.model_queries(),
)
"""The documented what-ifs whose profiles ship (each a dict of :func:`planner.whatif` arguments)."""


def build() -> dict:
    """The shipped file's contents, rebuilt: every profile :data:`QUERIES` ask for, traced afresh."""
    from planner import models
    from planner.whatif import whatif

    models._blocks_for_name.cache_clear()  # profiles held in memory would not reach the empty cache
    before = os.environ.get("HYBRID_INTEROP_CACHE")
    with tempfile.TemporaryDirectory(prefix="hybrid-shipped-profiles-") as root:
        os.environ["HYBRID_INTEROP_CACHE"] = root
        try:
            with profile_cache.without_shipped():
                for query in QUERIES:
                    query = dict(query)
                    whatif(query.pop("model"), query.pop("rack"), **query)
            where = profile_cache.directory()
            entries = {}
            for folder, _, files in os.walk(where):
                for name in files:
                    if not name.startswith("."):
                        entries[name] = profile_cache.read_entry(os.path.join(folder, name))
        finally:
            models._blocks_for_name.cache_clear()
            if before is None:
                os.environ.pop("HYBRID_INTEROP_CACHE", None)
            else:
                os.environ["HYBRID_INTEROP_CACHE"] = before
    return {"format": profile_cache.FORMAT, "code": profile_cache.code_version(),
            "entries": dict(sorted(entries.items()))}


def read() -> dict:
    """The shipped file's contents (no entries when there is none)."""
    return profile_cache.read_pack() or {"format": None, "code": None, "entries": {}}


def differences(built: dict, shipped: dict) -> list[str]:
    """What differs between a rebuilt and the shipped contents, in words (empty: the shipped file is current)."""
    out = []
    if shipped.get("format") != built["format"] or shipped.get("code") != built["code"]:
        out.append(f"built by other tracing code or torch/transformers (code {shipped.get('code')}, now "
                   f"{built['code']})")
    missing = sorted(set(built["entries"]) - set(shipped.get("entries", {})))
    extra = sorted(set(shipped.get("entries", {})) - set(built["entries"]))
    changed = sorted(k for k in set(built["entries"]) & set(shipped.get("entries", {}))
                     if profile_cache.unpack_entry(built["entries"][k]) != profile_cache.unpack_entry(shipped["entries"][k]))
    for what, keys in (("missing", missing), ("not asked for", extra), ("different", changed)):
        if keys:
            out.append(f"{len(keys)} profile(s) {what}: {', '.join(k[:12] for k in keys[:5])}")
    return out


def write(contents: dict) -> None:
    """Write ``contents`` as the shipped file (atomically)."""
    folder = os.path.dirname(profile_cache.SHIPPED)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(contents, f, protocol=4)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would ship a file only its builder can read
    os.replace(tmp, profile_cache.SHIPPED)


def main(argv: list[str] | None = None) -> int:
    """``python -m planner.shipped_profiles [--check]``."""
    argv = sys.argv[1:] if argv is None else argv
    built = build()
    if argv == ["--check"]:
        found = differences(built, read())
        print("\n".join(found) if found else f"{profile_cache.SHIPPED}: current ({len(built['entries'])} profiles)")
        return 1 if found else 0
    if argv:
        print("usage: python -m planner.shipped_profiles [--check]", file=sys.stderr)
        return 2
    write(built)
    print(f"wrote {profile_cache.SHIPPED}: {len(built['entries'])} profiles, "
          f"{os.path.getsize(profile_cache.SHIPPED):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["QUERIES", "build", "differences", "main", "read", "write"]
