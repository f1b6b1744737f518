"""One home per concept, kept: a concept that has its owner is not re-implemented beside it.

A duplicate-shape scan cannot see two spellings of one idea (a dtype name stripped of ``"torch."`` by hand
beside :func:`devices.dtype_name`); these checks read the source for the tell-tale forms and name each place
found, so the next copy fails here instead of drifting.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.support import ROOT

PACKAGES = ("devices", "collectives", "planner", "interop", "hybrid_cli", "benchmarks", "tests")
HERE = pathlib.Path(__file__).resolve()


def _sources(packages=PACKAGES, skip=()):
    root = pathlib.Path(ROOT)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if path.resolve() == HERE or any(rel == s or rel.startswith(s + "/") for s in skip):
                continue
            yield rel, path.read_text()


def _found(pattern: str, **kwargs) -> list[str]:
    regex = re.compile(pattern)
    return [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for rel, text in _sources(**kwargs) for m in regex.finditer(text)]


def test_dtype_names_come_from_devices_dtypes():
    # torch's spelling is the vocabulary; devices.dtype_name / dtype_label read it. The vocabulary's own test keeps
    # torch's text as its independent reference.
    found = _found(r"""\.(?:removeprefix|replace)\(\s*['"]torch\.['"]|len\(\s*['"]torch\.['"]\s*\)""",
                   skip=("devices/dtypes.py", "tests/devices/test_dtype_vocabulary.py"))
    assert not found, "dtype names stripped by hand (use devices.dtype_name / dtype_label):\n" + "\n".join(found)
    defined = _found(r"(?m)^\s*def dtype_name\(", skip=("devices/dtypes.py",))
    assert not defined, "another dtype_name:\n" + "\n".join(defined)


def test_launcher_variables_are_read_by_collectives_torchrun_env():
    # The scripts under tests/support/cuda_scripts are unmodified user code: they read their launcher themselves.
    found = _found(r"""environ(?:\.get)?[\[(]\s*['"](?:RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK)['"]""",
                   skip=("collectives/torchrun_env.py", "tests/support/cuda_scripts"))
    assert not found, "torchrun's variables read by hand (use collectives.torchrun_env):\n" + "\n".join(found)


RACK_NORMALISER = r"""hasattr\(\s*[\w.]+\s*,\s*['"]domains['"]\s*\)"""
OPTIMIZER_TABLE = r"STATE_TENSORS\s*=|OPTIMIZERS\s*=\s*\{"
PRECISION_TABLE = r"""_PEAK_DTYPE|\{\s*['"]bfloat16['"]\s*:\s*['"]bfloat16['"]\s*,\s*['"]fp8['"]"""


def test_rack_arguments_go_through_parse_rack():
    # devices.parse_rack returns a RackSpec unchanged: it is the one normaliser of a rack argument.
    found = _found(RACK_NORMALISER)
    assert not found, "rack arguments normalised by hand (use devices.parse_rack):\n" + "\n".join(found)


def test_optimizer_state_comes_from_planner_optimizers():
    # Kernel, state tensors, state and master bytes: planner.optimizers.OPTIMIZERS.
    found = _found(OPTIMIZER_TABLE, skip=("planner/optimizers.py",))
    assert not found, "an optimizer table beside planner.optimizers.OPTIMIZERS:\n" + "\n".join(found)


def test_precisions_come_from_planner_precision():
    # A training precision maps to the catalogue's peak key in planner.precision.PRECISIONS.
    found = _found(PRECISION_TABLE, skip=("planner/precision.py",))
    assert not found, "a precision table beside planner.precision.PRECISIONS:\n" + "\n".join(found)


def test_each_pattern_catches_its_copy():
    # The patterns themselves are tested: each matches the copy it was written against.
    copies = {RACK_NORMALISER: 'spec = rack if hasattr(rack, "domains") else parse(rack)',
              OPTIMIZER_TABLE: 'STATE_TENSORS = {"adamw": 2}',
              PRECISION_TABLE: '_PEAK_DTYPE = {"bfloat16": "bfloat16", "fp8": "float8"}'}
    for pattern, line in copies.items():
        assert re.search(pattern, line), line
