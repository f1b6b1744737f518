"""The block profiles that ship with the package (planner/shipped_profiles.bin, issue 29): built by this code, a
fresh trace's bytes, and enough for the documented what-ifs to run in a fresh process without transformers, torch
or a trace. A stale file fails here; ``python -m planner.shipped_profiles`` rebuilds it (``--check`` compares every
entry with a fresh trace: ~15 s of CPU, so here one query's entries are rebuilt)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from planner import profile_cache, shipped_profiles

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REBUILD = "rebuild it: python -m planner.shipped_profiles"


def test_the_shipped_profiles_were_built_by_this_code():
    shipped = shipped_profiles.read()
    # The key of every entry hashes the tracing code and the torch and transformers versions: a file built by
    # other code holds keys nothing asks for, so each documented what-if would trace again.
    assert shipped["format"] == profile_cache.FORMAT and shipped["code"] == profile_cache.code_version(), REBUILD
    assert shipped["entries"]


def test_the_documented_whatifs_run_from_the_shipped_profiles_alone():
    # A fresh process with no cache directory: every query's profiles must come from the file, so neither
    # transformers nor torch is imported (the first run of a paper command costs what the second does).
    # The search (~10 s of step models) is left to `python -m planner.shipped_profiles --check`.
    code = (
        "import sys\n"
        "import planner.decoder_blocks as d\n"
        "def refuse(self, index, shard):\n"
        "    raise AssertionError(f'traced {self.name} block {index} at {shard}: not shipped')\n"
        "d.DecoderBlocks._trace = refuse\n"
        "from planner.shipped_profiles import QUERIES\n"
        "from planner.whatif import whatif\n"
        "for q in QUERIES:\n"
        "    if q['parallel'] == 'search':\n"
        "        continue\n"
        "    q = dict(q)\n"
        "    whatif(q.pop('model'), q.pop('rack'), **q)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    env = dict(os.environ, PYTHONPATH=ROOT, HYBRID_INTEROP_CACHE="off")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert out.returncode == 0, f"{REBUILD}\n{out.stderr[-3000:]}"
    assert out.stdout.strip() == "[]"


def test_shipped_entries_equal_a_fresh_trace(tmp_path, monkeypatch):
    pytest.importorskip("transformers", reason="tracing builds the model from its transformers config")
    from planner import models
    from planner.whatif import whatif

    # The query of fewest profiles (three: embedding, layer, head), traced into an empty cache.
    query = dict(shipped_profiles.QUERIES[0])
    monkeypatch.setenv("HYBRID_INTEROP_CACHE", str(tmp_path))
    models._blocks_for_name.cache_clear()
    try:
        with profile_cache.without_shipped():
            whatif(query.pop("model"), query.pop("rack"), **query)
    finally:
        models._blocks_for_name.cache_clear()
    traced = {name: profile_cache.read_entry(os.path.join(folder, name))
              for folder, _, files in os.walk(tmp_path) for name in files if not name.startswith(".")}
    shipped = shipped_profiles.read()["entries"]
    assert len(traced) == 3 and set(traced) <= set(shipped), REBUILD
    for name, packed in traced.items():
        assert profile_cache.unpack_entry(packed) == profile_cache.unpack_entry(shipped[name]), REBUILD


def test_a_stale_or_missing_file_is_told_apart():
    shipped = shipped_profiles.read()
    assert shipped_profiles.differences(shipped, shipped) == []
    stale = dict(shipped, code="0" * 16)
    assert "other tracing code" in shipped_profiles.differences(shipped, stale)[0]
    first = next(iter(shipped["entries"]))
    short = dict(shipped, entries={k: v for k, v in shipped["entries"].items() if k != first})
    assert shipped_profiles.differences(shipped, short) == [f"1 profile(s) missing: {first[:12]}"]
