"""OpInfo conformance: PyTorch's own op database on an emulated slot.

One test per (op, dtype): every sample input of the op is run on the CPU and
on hybrid:0 and compared (tests/support/opinfo_harness.py has the method). The test
passes when the outcomes are exactly those tests/support/opinfo_expectations.toml
lists: an unexpected failure fails it, and so does a listed failure that now
passes (so the file stays accurate).

    pytest -n 2 tests/conformance/test_opinfo_conformance.py        # about 2 minutes on 2 cores

Run it under pytest-xdist: a test that crashes the interpreter then takes down
only its worker, which xdist replaces, and is reported as failed. A test that
hangs is ended by faulthandler after OPINFO_TIMEOUT seconds (which also ends
its worker).
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

from tests.support import opinfo_harness as h

pytestmark = pytest.mark.slow

TIMEOUT_S = float(os.environ.get("OPINFO_TIMEOUT", "180"))
CASES = h.cases()
EXPECTED = h.load_expectations()
h.setup_process()


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_opinfo_sample_agrees_with_cpu(name, dtype):
    held = h.slot_bytes()
    faulthandler.dump_traceback_later(TIMEOUT_S, exit=True)
    try:
        with h.unpriced_records():
            outcomes = h.run_case(name, dtype)
    finally:
        faulthandler.cancel_dump_traceback_later()
    problems = h.check_against(outcomes, EXPECTED.get((name, dtype), []))
    leaked = h.leaked_since(held)
    if leaked:
        problems.append(f"hybrid:0 holds {leaked} more bytes after the samples than before")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        pytest.fail(f"{name} {dtype}: {len(problems)} difference(s) from "
                    "tests/support/opinfo_expectations.toml:\n  " + "\n  ".join(shown), pytrace=False)


def test_expectations_name_existing_cases():
    """Every entry of the expectations file names a case the sweep runs."""
    known = set(CASES)
    stale = sorted(f"{op} {dtype}" for op, dtype in EXPECTED if (op, dtype) not in known)
    assert not stale, f"expectations for cases the sweep does not run: {stale}"


def test_expectation_categories_have_reasons():
    for entries in EXPECTED.values():
        for e in entries:
            assert e.reason.strip(), f"{e.op} {e.dtype} {e.sample}: empty reason"
            if e.category == "nondeterministic":
                assert e.outcome == "any", f"{e.op} {e.dtype}: nondeterministic takes outcome any"
