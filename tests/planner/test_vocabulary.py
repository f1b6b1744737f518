"""One table per vocabulary of the planner: training precisions, optimizers, progress reporting.

Each table is checked against something independent of it: the catalogue's peaks, torch's own optimizers'
state, argparse's parse of the CLI.
"""

from __future__ import annotations

import io
import warnings

import pytest

import devices
from planner import PRECISIONS, OPTIMIZERS, StepConfig, whatif
from planner.optimizers import GRAD_DTYPES, check_optimizer
from planner.precision import check_precision
from planner.progress import lines, reporter

pytest.importorskip("transformers", reason="what-if models are built from transformers configs")


@pytest.fixture(scope="module")
def small():
    from transformers import LlamaConfig

    from planner.decoder_blocks import DecoderBlocks

    return DecoderBlocks(LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                                     num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False),
                         name="vocab-llama")


def test_each_precision_names_a_catalogue_peak():
    for name, precision in PRECISIONS.items():
        assert precision.name == name
        for kind in ("h100", "b200", "trn2", "trn3"):
            assert devices.chip(kind).peak_for(precision.peak).value > 0
    assert PRECISIONS["fp8"].matmul_dtype == "float8_e4m3fn" and PRECISIONS["bfloat16"].matmul_dtype is None
    with pytest.raises(ValueError,
                       match="precision: unknown training precision .float8.; accepted: bfloat16, fp8, float32"):
        check_precision("float8")


def test_precision_replaces_dtype_which_still_works_with_a_warning(small):
    kw = dict(parallel={"dp": 8}, global_batch=8, seq_len=512, recompute="none")
    fp8 = whatif(small, "h100-node", precision="fp8", **kw)
    with pytest.warns(FutureWarning, match="dtype= is deprecated.*precision='fp8'"):
        old = whatif(small, "h100-node", dtype="fp8", **kw)
    assert old.seconds == fp8.seconds and old.precision == fp8.precision == "fp8"
    # MFU against the peak the table names (FP8 for fp8), from the catalogue.
    peak = devices.chip("h100").peak_for("float8").value
    assert fp8.mfu == pytest.approx(fp8.model_tflops_per_chip * 1e12 / peak)
    bf16 = whatif(small, "h100-node", **kw)
    assert bf16.precision == "bfloat16" and bf16.seconds != fp8.seconds  # FP8 matmuls and their casts priced
    with pytest.raises(ValueError, match="disagree"), pytest.warns(FutureWarning):
        whatif(small, "h100-node", precision="bfloat16", dtype="fp8", **kw)


def test_step_config_dtype_is_a_deprecated_spelling_of_precision():
    with pytest.warns(FutureWarning):
        config = StepConfig(global_batch=8, seq_len=128, microbatches=1, dtype="fp8")
    assert config.precision == "fp8"
    with pytest.warns(FutureWarning, match="StepConfig.precision"):
        assert config.dtype == "fp8"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert StepConfig(global_batch=8, seq_len=128, microbatches=1, precision="fp8").precision == "fp8"


def test_optimizer_table_matches_torchs_optimizers():
    torch = pytest.importorskip("torch")
    make = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam,
            "sgd": lambda p, **kw: torch.optim.SGD(p, momentum=0.9, **kw)}
    assert set(make) == set(OPTIMIZERS)
    for name, optimizer in OPTIMIZERS.items():
        p = torch.nn.Parameter(torch.zeros(7))
        opt = make[name]([p], lr=0.1, fused=False)
        p.grad = torch.ones(7)
        opt.step()
        per_parameter = [t for t in opt.state[p].values() if isinstance(t, torch.Tensor) and t.numel() == 7]
        assert optimizer.state_tensors == len(per_parameter), name
        assert optimizer.state_bytes(4) == sum(t.element_size() * t.numel() for t in per_parameter) / 7
        assert optimizer.step_counters == ("step" in opt.state[p] and "adam" in name)
        assert hasattr(torch.ops.aten, optimizer.kernel), optimizer.kernel
    assert GRAD_DTYPES == {"bfloat16": torch.bfloat16.itemsize, "float32": torch.float32.itemsize}
    with pytest.raises(ValueError, match="optimizer: unknown 'lion'; accepted: adamw, adam, sgd"):
        check_optimizer("lion")


def test_cli_choices_come_from_the_tables():
    import argparse

    from hybrid_cli import cmd_plan, cmd_whatif

    for module in (cmd_whatif, cmd_plan):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        choices = {a.dest: a.choices for a in parser._actions}
        assert list(choices["optimizer"]) == list(OPTIMIZERS)
    parser = argparse.ArgumentParser()
    cmd_whatif.add_arguments(parser)
    assert list({a.dest: a.choices for a in parser._actions}["precision"]) == list(PRECISIONS)
    new = parser.parse_args(["--model", "m", "--precision", "fp8", "--global-batch", "64"])
    old = parser.parse_args(["--model", "m", "--dtype", "fp8", "--gbs", "64"])
    assert (new.precision, new.global_batch) == (old.precision, old.global_batch) == ("fp8", 64)
    parser = argparse.ArgumentParser()
    cmd_plan.add_arguments(parser)
    assert parser.parse_args(["--batch", "6"]).global_batch == parser.parse_args(["--global-batch", "6"]).global_batch


def test_progress_protocol():
    out = io.StringIO()
    report = lines(out)
    for done in range(3):
        report(done, 3, f"item {done}")
    report(3, 3, "done")
    assert out.getvalue().splitlines() == ["[1/3] item 0", "[2/3] item 1", "[3/3] item 2"]
    seen = []
    assert reporter(lambda *a: seen.append(a), "x")(1, 2, "y") is None and seen == [(1, 2, "y")]
    reporter(False, "x")(0, 1, "nothing happens")
    with pytest.raises(TypeError, match="progress: expected None, True, False or a callable"):
        reporter("yes", "x")


def test_a_search_reports_progress_in_the_protocol(small):
    from planner.search import search

    calls = []
    found = search(small, devices.parse_rack("h100-node"), global_batch=16, seq_len=512,
                   progress=lambda done, total, what: calls.append((done, total)))
    assert found.best is not None and calls
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and calls[-1][0] == calls[-1][1]  # counts up, ends at its total
