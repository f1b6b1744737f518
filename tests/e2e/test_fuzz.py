"""A bounded, seeded fuzz of the public entry points (issue 17's reliability probe, kept): rack files and rack
specs, ``whatif``, ``plan``, ``quantize`` and the command line. Every case must finish within a hang guard and
either succeed or raise ValueError/TypeError naming the argument it refuses. About two hundred cases in all;
the seeds are fixed, so a failure reproduces."""

from __future__ import annotations

import contextlib
import random
import re
import signal
import threading

import pytest

HANG_S = 60
"""A case still running after this long has hung: generous for a cold profile cache on a loaded 2-core machine
(an idle one takes a few seconds at most; a real hang, such as a schedule expanded per microbatch, never returns)."""


class Hang(Exception):
    pass


@contextlib.contextmanager
def hang_guard(seconds: int = HANG_S):
    """SIGALRM raises :class:`Hang` in the main thread after ``seconds`` (elsewhere: no guard)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def names_one_of(error: Exception, names) -> bool:
    """The message starts with (or, past a ``where: `` prefix, contains) ``name:`` or ``name.`` for a name."""
    message = str(error)
    return any(re.search(rf"(^|[\s\[(']){re.escape(name)}(\[\d+\])?[:.]", message) for name in names)


def run_case(fn, names, description):
    """Call ``fn``; a ValueError/TypeError must name one of ``names``; anything else (or a hang) fails."""
    with hang_guard():
        try:
            return fn()
        except (ValueError, TypeError) as error:
            assert names_one_of(error, names), f"{description}: {type(error).__name__} names no argument: {error}"
            return error


# -- values ---------------------------------------------------------------------------------------------------

def odd_value(rng: random.Random):
    """A value of a random kind and size, the kind a probe throws at an argument."""
    return rng.choice([
        0, -1, 1, 2, 7, 2**31, 2**63, 10**30, -(10**20), 0.0, -0.5, 1.5, 1e300, float("inf"), float("nan"), True,
        False, None, "", "x", "8", "1e3", "-3", "a,b", "0-3", [], [1, 2], ["a"], {}, {"tp": 2}, (1,), b"8",
    ])


# -- rack files and specs -----------------------------------------------------------------------------------

RACK_FILE = """\
[rack]
name = "fuzz"
replicas = 1
numerics = "exact"
stochastic_rounding = false
stochastic_rounding_seed = 0

[[slots]]
kind = "trn3"
count = 4
capacity = "2GiB"

[[slots]]
kind = "h100"
count = 4
backing = "emulated"

[[domains]]
name = "nl0"
fabric = "neuronswitch"
slots = "0-3"

[[domains]]
name = "nv0"
fabric = "nvlink"
slots = "4-7"

[network]
fabric = "efa"
bandwidth = "25GB/s"

[[overrides]]
slots = "1"
capacity = "1GiB"
numerics = "device"
"""

RACK_KEYS = ["rack", "name", "replicas", "numerics", "stochastic_rounding", "stochastic_rounding_seed", "slots",
             "kind", "count", "capacity", "backing", "domains", "fabric", "shape", "link_bandwidth", "latency",
             "in_switch_reduction", "repeat", "network", "bandwidth", "overrides", "toml", "file", "x"]


def _toml_value(value) -> str:
    if value is None:
        return '"none"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(value, "nan" if value != value else repr(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bytes):
        return '"' + value.decode() + '"'
    if isinstance(value, str):
        return '"' + value + '"'
    return str(value)


def _mutated_rack_file(rng: random.Random) -> str:
    lines = RACK_FILE.splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        line = lines[i]
        action = rng.random()
        if "=" in line and action < 0.6:
            key = line.split("=")[0].strip()
            lines[i] = f"{key} = {_toml_value(odd_value(rng))}"
        elif action < 0.75:
            del lines[i]
        elif action < 0.9:
            lines.insert(i, f"{rng.choice(RACK_KEYS)} = {_toml_value(odd_value(rng))}")
        else:
            lines.insert(i, rng.choice(["[[slots]]", "[[overrides]]", "[rack]", "[network]", "[[domains]]", "[x]"]))
    return "\n".join(lines) + "\n"


def test_rack_files():
    from devices.rack.toml_file import loads

    rng = random.Random(17)
    outcomes = {"loaded": 0, "refused": 0}
    for case in range(60):
        text = _mutated_rack_file(rng)
        result = run_case(lambda: loads(text, source="file fuzz.toml"), RACK_KEYS, f"rack file {case}:\n{text}")
        outcomes["refused" if isinstance(result, Exception) else "loaded"] += 1
    assert outcomes["loaded"] and outcomes["refused"]  # the fuzz reaches both ends


def test_rack_specs():
    import devices

    rng = random.Random(18)
    kinds = ["trn2", "trn3", "trn4", "h100", "b200", "gb300", "tpu", ""]
    for case in range(40):
        parts = []
        for _ in range(rng.randint(1, 3)):
            count = rng.choice(["1", "8", "0", "-1", "x", str(10**12), "1e3", "", str(2**70)])
            parts.append(rng.choice([f"{rng.choice(kinds)}:{count}", rng.choice(["h100-node", "trn3-ultraserver"]) +
                                     rng.choice(["", "*2", "*0", "*x", "*" + str(10**9)])]))
        spec = rng.choice(["+", "+", ",", " + "]).join(parts)
        run_case(lambda: devices.parse_rack(spec), ["rack", "spec", "kind", "count", "replicas"], f"rack {spec!r}")


# -- whatif -------------------------------------------------------------------------------------------------

WHATIF_ARGS = ["model", "rack", "parallel", "global_batch", "seq_len", "dtype", "recompute", "optimizer", "tp", "pp",
               "cp", "ep", "vp", "dp", "fsdp", "zero", "microbatch", "order", "stages", "layers"]


def test_whatif():
    pytest.importorskip("transformers", reason="what-if models are built from transformers configs")
    from transformers import LlamaConfig

    from planner import whatif

    model = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2)
    rng = random.Random(19)
    for case in range(30):
        kwargs = dict(global_batch=8, seq_len=128)
        for name in rng.sample(["global_batch", "seq_len", "dtype", "recompute", "optimizer", "parallel"], 2):
            if name == "parallel":
                kwargs[name] = rng.choice([None, "search", "x", {rng.choice(WHATIF_ARGS[8:]): odd_value(rng)},
                                           {"tp": rng.choice([1, 2, 3, 4, 8])}])
            else:
                kwargs[name] = rng.choice([odd_value(rng), {"dtype": "fp8", "recompute": "full:2",
                                                            "optimizer": "sgd"}.get(name, 16)])
        rack = rng.choice(["h100:8", "trn3:4", "h100:4+trn3:4", "b200:2"])
        run_case(lambda: whatif(model, rack, **kwargs), WHATIF_ARGS, f"whatif({rack!r}, {kwargs})")


# -- plan ---------------------------------------------------------------------------------------------------

PLAN_ARGS = ["model", "example_inputs", "rack", "slots", "objective", "global_batch", "microbatches", "schedule",
             "optimizer", "recompute", "max_seconds", "split_spec", "loss_fn", "example_targets"]


@pytest.mark.usefixtures("use_rack")
def test_plan():
    import interop
    from interop.models import GPT, GPTConfig, token_batch

    cfg = GPTConfig(vocab_size=64, seq_len=8, dim=32, heads=2, layers=2)
    model = GPT(cfg)
    x = token_batch(cfg, 4)[0]
    rng = random.Random(20)
    ran = 0
    for case in range(24):
        name = rng.choice(PLAN_ARGS[3:12])
        value = odd_value(rng)
        if ran < 2 and case % 8 == 0:  # a couple that must succeed: the search itself is fuzzed too
            name, value = "microbatches", rng.choice([1, 2, None])
            ran += 1
        result = run_case(lambda: interop.plan(model, (x,), "trn3:1+h100:1", **{name: value}), PLAN_ARGS,
                          f"plan({name}={value!r})")
        if not isinstance(result, Exception):
            assert result.predicted.seconds > 0


# -- quantize -----------------------------------------------------------------------------------------------

QUANTIZE_ARGS = ["x", "fmt", "block", "scale_rule", "rounding", "generator", "amax"]


def test_quantize():
    import torch

    from interop.numerics import FORMATS, quantize

    rng = random.Random(21)
    shapes = [(), (0,), (3, 0), (0, 32), (5,), (2, 33), (4, 64), (1, 1, 16)]
    for case in range(60):
        fmt = rng.choice(list(FORMATS) + ["fp8", ""])
        shape = rng.choice(shapes)
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32])
        x = (torch.randn(shape) * rng.choice([1.0, 1e30, 1e-30])).to(dtype)
        kwargs = {}
        for name in rng.sample(QUANTIZE_ARGS[2:], rng.randint(0, 2)):
            kwargs[name] = rng.choice([odd_value(rng), {"block": 32, "rounding": "stochastic", "scale_rule": "tensor",
                                                        "generator": torch.Generator().manual_seed(case),
                                                        "amax": torch.tensor(3.0)}[name]])
        result = run_case(lambda: quantize(x, fmt, **kwargs), QUANTIZE_ARGS, f"quantize({shape}, {fmt!r}, {kwargs})")
        if not isinstance(result, Exception):
            assert result.shape == x.shape
            back = result.dequantize()
            assert back.shape == x.shape and back.dtype == x.dtype


# -- the command line ---------------------------------------------------------------------------------------

def test_command_line(capsys, tmp_path, monkeypatch):
    from hybrid_cli import main

    monkeypatch.chdir(tmp_path)
    rng = random.Random(22)
    options = {
        "whatif": ["--model", "--rack", "--gbs", "--seq", "--tp", "--pp", "--mbs", "--dtype", "--recompute",
                   "--optimizer", "--zero", "--compare", "--plot"],
        "racks": ["--kind", "--rack"],
        "plan": ["--batch", "--seq", "--slots", "--microbatches", "--schedule", "--objective", "--run", "--json"],
    }
    values = ["0", "-1", "x", "", "8", "1e9", "a,b", "99999999999999999999", "llama3-8b", "h100:8", "/proc/x.json",
              "trn3:0", "fp8", "full:x"]
    for case in range(30):
        command = rng.choice(list(options))
        argv = [command]
        for option in rng.sample(options[command], rng.randint(1, min(3, len(options[command])))):
            argv += [option, rng.choice(values)]
        if command == "whatif" and "--model" not in argv:
            argv += ["--model", "llama3-8b"]
        if command == "plan":
            argv += ["--model", "os:getcwd"]  # whatever else is wrong, no real plan runs in a fuzz case
        with hang_guard():
            try:
                code = main(argv)
            except SystemExit as exit_:  # argparse's refusals
                code = exit_.code
        assert code in (0, 1, 2), f"{argv}: exit {code}"
        err = capsys.readouterr().err
        assert "Traceback" not in err, f"{argv}:\n{err}"
