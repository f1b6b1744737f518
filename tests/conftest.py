"""Shared fixtures. Importing interop registers the `hybrid` device with the
embedded default rack (fusion-default: hybrid:0-3 trn4, hybrid:4-7 b200)."""

from __future__ import annotations

import gc
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_addoption(parser):
    parser.addoption("--exhaustive", action="store_true", default=False,
                     help="conformance sweeps run every sample (the ModuleInfo sweep runs the first few of each "
                          "module by default), and tests marked exhaustive run")


def pytest_collection_modifyitems(config, items):
    # An exhaustive sweep repeats, at every size or reduce op, what a smaller sibling checks by default; the
    # default suite must fit its time on 2 cores (README), the full sweep runs with --exhaustive.
    if config.getoption("--exhaustive"):
        return
    skip = pytest.mark.skip(reason="exhaustive sweep: run with --exhaustive")
    for item in items:
        if "exhaustive" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def use_rack():
    """Install a rack for one test and restore the previous one afterwards.

    Tensors left alive on the test's rack are retired with it (they keep their
    bytes and their accounting on that rack); garbage is collected around the
    switch so that what a test dropped is freed before the next one counts.
    """
    import interop

    previous = interop.current_rack()

    def install(spec, **kwargs):
        gc.collect()
        rack = spec if isinstance(spec, interop.Rack) else interop.Rack.from_spec(spec, **kwargs)
        interop.set_rack(rack)
        return rack

    yield install
    gc.collect()
    if previous is not None and interop.current_rack() is not previous:
        interop.set_rack(previous)


@pytest.fixture
def fresh_timeline():
    """Recording on and an empty timeline for one test, and again after it (a module opts in with
    ``pytestmark = pytest.mark.usefixtures("fresh_timeline")``)."""
    import interop

    interop.set_recording(True)
    interop.reset_timeline()
    yield
    interop.set_recording(True)
    interop.reset_timeline()
