"""ModuleInfo conformance: PyTorch's own module database on an emulated slot.

One test per module (tests/support/moduleinfo_harness.py has the method): its float32 samples built,
run forward in training mode, backward, and (where training and evaluation differ) forward in
evaluation mode under no_grad, on the CPU and on hybrid:0, compared. The test passes when the outcomes
are exactly those tests/support/moduleinfo_expectations.toml lists.

    pytest -n 2 tests/conformance/test_moduleinfo_conformance.py                 # up to 64 samples per module
    pytest -n 2 tests/conformance/test_moduleinfo_conformance.py --exhaustive    # every sample (slow)
"""

from __future__ import annotations

import faulthandler
import os

import pytest

from tests.support import moduleinfo_harness as mh
from tests.support import opinfo_harness as oh

pytestmark = pytest.mark.slow

TIMEOUT_S = float(os.environ.get("OPINFO_TIMEOUT", "180"))
MODULES = mh.module_names()
EXPECTED = mh.load_expectations()
oh.setup_process()


@pytest.mark.parametrize("name", MODULES)
def test_module_samples_agree_with_cpu(name, request):
    every = request.config.getoption("--exhaustive")
    held = oh.slot_bytes()
    faulthandler.dump_traceback_later(TIMEOUT_S, exit=True)
    try:
        with oh.unpriced_records():
            outcomes = mh.run_case(name, all_samples=every)
    finally:
        faulthandler.cancel_dump_traceback_later()
    problems = mh.check_against(outcomes, EXPECTED.get((name, mh.DTYPE), []), every)
    leaked = oh.leaked_since(held)
    if leaked:
        problems.append(f"hybrid:0 holds {leaked} more bytes after the samples than before")
    if problems:
        pytest.fail(f"{name}: {len(problems)} difference(s) from tests/support/moduleinfo_expectations.toml:\n  "
                    + "\n  ".join(problems[:20]), pytrace=False)


def test_the_sweep_covers_the_recurrent_attention_and_convolution_modules():
    for name in ("nn_LSTM", "nn_GRU", "nn_LSTMCell", "nn_GRUCell", "nn_RNN", "nn_TransformerEncoderLayer",
                 "nn_MultiheadAttention", "nn_Conv2d", "nn_BatchNorm2d", "nn_LayerNorm", "nn_Embedding"):
        assert name in MODULES


def test_expectations_name_existing_modules():
    stale = sorted(f"{m} {d}" for m, d in EXPECTED if m not in MODULES or d != mh.DTYPE)
    assert not stale, f"expectations for modules the sweep does not run: {stale}"
