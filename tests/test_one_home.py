"""One home per concept: spellings that re-implement a concept outside its owner fail here.

A duplicate-shape scan cannot see a concept copied in other words (issue 16, section 3), so each
concept that has one owner lists the spellings that mean "a second copy of it", and the files allowed
to use them. Every Python file of the project is read as text (comments and strings included: a
copy in a docstring example is a copy a reader will follow).
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("devices", "collectives", "planner", "interop", "hybrid_cli", "benchmarks", "tests", "examples")

RULES = {
    # A rack argument becomes a RackSpec in one place: devices.parse_rack returns a RackSpec unchanged.
    "rack normaliser": (re.compile(r"hasattr\(\s*\w+\s*,\s*['\"]domains['\"]\s*\)"), (),
                        "devices.parse_rack(rack) (it returns a RackSpec unchanged)"),
    # The optimizer's state lives in planner.optimizers.OPTIMIZERS (kernel, state tensors, state and master bytes).
    "optimizer table": (re.compile(r"STATE_TENSORS\s*=|OPTIMIZERS\s*=\s*\{"), ("planner/optimizers.py",),
                        "planner.optimizers.OPTIMIZERS"),
    # A training precision maps to the catalogue's peak key in planner.precision.PRECISIONS.
    "precision table": (re.compile(r"_PEAK_DTYPE|\{\s*['\"]bfloat16['\"]\s*:\s*['\"]bfloat16['\"]\s*,\s*['\"]fp8['\"]"),
                        ("planner/precision.py",), "planner.precision.PRECISIONS"),
}


def _files():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != "tests/test_one_home.py":
                yield rel, path


@pytest.mark.parametrize("concept", sorted(RULES))
def test_concept_has_one_home(concept):
    pattern, owners, use = RULES[concept]
    found = []
    for rel, path in _files():
        if rel in owners:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, f"{concept}: use {use} instead of:\n" + "\n".join(found)


def test_each_rule_catches_its_copy():
    # The patterns themselves are tested: each matches the copy it was written against.
    copies = {"rack normaliser": 'spec = rack if hasattr(rack, "domains") else parse(rack)',
              "optimizer table": 'STATE_TENSORS = {"adamw": 2}',
              "precision table": '_PEAK_DTYPE = {"bfloat16": "bfloat16", "fp8": "float8"}'}
    assert set(copies) == set(RULES)
    for concept, line in copies.items():
        assert RULES[concept][0].search(line), concept
