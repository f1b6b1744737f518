"""Every documented example runs: the fenced ```python blocks of README.md and docs/*.md.

The blocks of one document run in order, in one namespace, in a fresh Python
process (as a reader pastes them one after another into one session), in a
scratch directory, with a time limit. A block that raises fails the test with
the document's file and line; a document added later, or a block added to one,
is picked up without touching this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.readme_blocks import ROOT, blocks_of, documents

TIMEOUT_S = 300

# Blocks known to fail, by their exact code, with the reason. Each one must
# still be in a document and must still fail: an entry that no longer matches
# (the block was fixed or rewritten) fails the test until it is removed.
KNOWN_BROKEN: dict[str, str] = {}

# Runs in the child: every block in order in one namespace; one JSON line per block.
RUNNER = textwrap.dedent("""\
    import json, sys, traceback
    blocks = json.load(sys.stdin)
    namespace = {"__name__": "__main__"}
    for block in blocks:
        # Padding keeps the document's line numbers in tracebacks.
        code = compile("\\n" * (block["line"] - 1) + block["code"], block["path"], "exec")
        try:
            exec(code, namespace)
            outcome = {"line": block["line"], "ok": True}
        except BaseException:
            outcome = {"line": block["line"], "ok": False, "error": traceback.format_exc(limit=8)}
        print("@@block " + json.dumps(outcome), flush=True)
    """)


def run_blocks(path: str, cwd: str) -> tuple[list[dict], str]:
    blocks = blocks_of(path)
    payload = json.dumps([{"path": b.path, "line": b.line, "code": b.code} for b in blocks])
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=payload, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=TIMEOUT_S)
    outcomes = [json.loads(line[len("@@block "):]) for line in proc.stdout.splitlines()
                if line.startswith("@@block ")]
    return outcomes, proc.stdout + proc.stderr


def test_documents_have_examples():
    assert "README.md" in documents()
    assert len(blocks_of("README.md")) >= 1, "README.md's fenced python blocks were not found"


def test_block_extraction_keeps_lines_headings_and_indented_fences(tmp_path, monkeypatch):
    import tests.support.readme_blocks as rb

    doc = tmp_path / "doc.md"
    doc.write_text("# Top\n\n```python\na = 1\n```\n\n## Sub\n\n- item:\n\n  ```python\n  b = a + 1\n  if b:\n"
                   "      c = b\n  ```\n\n```bash\nnot python\n```\n~~~py\nd = 4\n~~~\n")
    monkeypatch.setattr(rb, "ROOT", str(tmp_path))
    blocks = rb.blocks_of("doc.md")
    assert [(b.line, b.heading, b.code) for b in blocks] == [
        (4, "Top", "a = 1\n"), (12, "Sub", "b = a + 1\nif b:\n    c = b\n"), (21, "Sub", "d = 4\n")]


@pytest.mark.parametrize("path", documents())
def test_every_python_block_runs(path, tmp_path):
    blocks = blocks_of(path)
    if not blocks:
        pytest.skip(f"{path} has no fenced python blocks")
    outcomes, output = run_blocks(path, str(tmp_path))
    assert len(outcomes) == len(blocks), f"{path}: the run stopped early:\n{output[-4000:]}"
    failures = []
    for block, outcome in zip(blocks, outcomes):
        broken = KNOWN_BROKEN.get(block.code)
        if broken is not None and outcome["ok"]:
            failures.append(f"{path}:{block.line} now runs; remove it from KNOWN_BROKEN ({broken})")
        elif broken is None and not outcome["ok"]:
            failures.append(f"{path}:{block.line} (under '{block.heading}') raised:\n{outcome['error']}")
    assert not failures, "\n\n".join(failures)


def test_known_broken_blocks_are_still_in_the_documents():
    codes = {b.code for path in documents() for b in blocks_of(path)}
    stale = [reason for code, reason in KNOWN_BROKEN.items() if code not in codes]
    assert not stale, f"KNOWN_BROKEN entries match no block any more; remove them: {stale}"


def test_a_failing_block_is_reported_with_its_document_line(tmp_path, monkeypatch):
    import tests.support.readme_blocks as rb

    (tmp_path / "doc.md").write_text("```python\nvalue = 41\n```\n\ntext\n\n```python\nvalue += 1\n"
                                     "assert value == 41, 'wrong'\n```\n```python\nprint(value)\n```\n")
    monkeypatch.setattr(rb, "ROOT", str(tmp_path))
    monkeypatch.setitem(globals(), "blocks_of", rb.blocks_of)
    outcomes, output = run_blocks("doc.md", str(tmp_path))
    assert [o["ok"] for o in outcomes] == [True, False, True]  # one namespace: the third still sees `value`
    assert 'File "doc.md", line 9' in outcomes[1]["error"] and "AssertionError: wrong" in outcomes[1]["error"]
    assert "42" in output
