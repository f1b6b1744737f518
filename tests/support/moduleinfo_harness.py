"""The ModuleInfo conformance sweep: PyTorch's own module database
(``torch.testing._internal.common_modules.module_db``: RNN/LSTM/GRU and their
cells, Transformer layers, MultiheadAttention, convolutions, norms, pools,
embeddings, losses...) run on an emulated hybrid slot and compared with the CPU.

Shared by tests/conformance/test_moduleinfo_conformance.py (one test per
module) and tests/support/moduleinfo_report.py (the counts). For each of a
module's float32 ``ModuleInput`` samples (``module_inputs_func(..., "cpu",
float32, requires_grad=True, training=...)``, made from one seed):

- the module is built on the CPU from one seed (a lazy module is materialised
  by one CPU forward) and deep-copied onto ``hybrid:0``, so both hold the same
  parameters and buffers;
- ``train``: a forward in training mode on both, from the same seed (dropout
  draws alike), outputs and the buffers after it (running statistics) compared;
  then ``grad``: backward of the outputs against seeded cotangents, the
  gradients of every parameter and every input that requires grad compared;
- ``eval``: for modules whose training and evaluation differ, a forward in
  evaluation mode under ``torch.no_grad()``, which is what takes the
  Transformer and MultiheadAttention fast paths.

Outcomes and expectations are the OpInfo sweep's (tests/support/opinfo_harness.py):
``agree`` / ``raise-same`` / ``mismatch`` / ``raise``; every outcome other than
``agree`` is listed, with its reason, in tests/support/moduleinfo_expectations.toml
(keys ``"3:train"``, ``"3:grad"``, ``"3:eval"``).

By default each module runs its first :data:`FAST_SAMPLES` samples (every sample
of all but the largest loss modules: about a minute of samples on two cores, after
the database's import); ``--exhaustive`` (pytest) runs all of them.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch
from torch.testing._internal.common_modules import module_db

from tests.support import opinfo_harness as oh

DEVICE = oh.DEVICE
EXPECTATIONS = Path(__file__).with_name("moduleinfo_expectations.toml")
DTYPE = "float32"
FAST_SAMPLES = 64
"""Samples per module in the default sweep (LinearCrossEntropyLoss has 857, CrossEntropyLoss 105)."""

Outcome = oh.Outcome


def module_names() -> list[str]:
    """Every ModuleInfo with float32 samples, by its formatted name (``nn_LSTM``), in a stable order."""
    return sorted(m.formatted_name for m in module_db if torch.float32 in m.dtypes)


def module_named(name: str):
    return next(m for m in module_db if m.formatted_name == name)


def samples_of(info, training: bool) -> list:
    """The module's float32 samples on the CPU, made from one seed."""
    oh.seed()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                            training=training))


def _build(info, sample):
    """The module on the CPU from one seed, materialised, and its copy on the slot."""
    args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    oh.seed()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = info.module_cls(*args, **kwargs)
        if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in cpu.parameters()):
            f_args, f_kwargs = _forward_args(sample, "cpu")
            with torch.no_grad():
                cpu(*f_args, **f_kwargs)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def _forward_args(sample, device: str):
    copier = oh._Copier(device)
    fi = sample.forward_input
    return copier(list(fi.args)), copier(dict(fi.kwargs))


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, torch.nn.utils.rnn.PackedSequence):
        return [obj.data]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _forward(module, args, kwargs, training: bool, grad: bool):
    module.train(training)
    oh.seed()
    try:
        with torch.set_grad_enabled(grad):
            return None, module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  (any exception is an outcome)
        return e, None


def _compare(actual, expected, path: str) -> tuple[str, str]:
    try:
        oh.compare(_tensors(actual), _tensors(expected), path=path)
    except oh.Mismatch as e:
        return "mismatch", str(e)
    return "agree", ""


def _grads(module, args, kwargs, out, cotangents):
    leaves = [p for p in module.parameters() if p.requires_grad]
    leaves += [t for t in _tensors([args, kwargs]) if t.requires_grad and t.is_leaf]
    outs = [t for t in _tensors(out) if t.requires_grad]
    if not outs or not leaves:
        return None
    grads = torch.autograd.grad(outs, leaves, [c.to(t.device) for c, t in zip(cotangents, outs)],
                                allow_unused=True)
    return [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves)]


def _run_sample(info, sample, index: int, training: bool, eval_mode: bool) -> list[Outcome]:
    try:
        cpu, slot = _build(info, sample)
    except Exception as e:  # noqa: BLE001  (a module the CPU cannot build is not compared)
        return [Outcome(f"{index}:train", "raise-same", f"building: {oh._describe(e)}")]
    outcomes = []
    c_args, c_kwargs = _forward_args(sample, "cpu")
    h_args, h_kwargs = _forward_args(sample, DEVICE)
    c_exc, c_out = _forward(cpu, c_args, c_kwargs, training, True)
    h_exc, h_out = _forward(slot, h_args, h_kwargs, training, True)
    if c_exc is not None or h_exc is not None:
        outcome, detail = oh._exception_outcome(c_exc, h_exc)
        return [Outcome(f"{index}:train", outcome, detail)]
    outcome, detail = _compare(h_out, c_out, "output")
    if outcome == "agree":
        outcome, detail = _compare(list(slot.buffers()), list(cpu.buffers()), "buffers")
    outcomes.append(Outcome(f"{index}:train", outcome, detail))

    oh.seed()
    cotangents = [torch.randn(t.shape, dtype=t.dtype) for t in _tensors(c_out) if t.requires_grad]
    try:
        c_grads = _grads(cpu, c_args, c_kwargs, c_out, cotangents)
        c_exc = None
    except Exception as e:  # noqa: BLE001
        c_grads, c_exc = None, e
    try:
        h_grads = _grads(slot, h_args, h_kwargs, h_out, cotangents)
        h_exc = None
    except Exception as e:  # noqa: BLE001
        h_grads, h_exc = None, e
    if c_exc is not None or h_exc is not None:
        outcomes.append(Outcome(f"{index}:grad", *oh._exception_outcome(c_exc, h_exc)))
    elif c_grads is not None:
        outcomes.append(Outcome(f"{index}:grad", *_compare(h_grads, c_grads, "gradients")))

    if eval_mode:
        c_exc, c_out = _forward(cpu, c_args, c_kwargs, False, False)
        h_exc, h_out = _forward(slot, h_args, h_kwargs, False, False)
        if c_exc is not None or h_exc is not None:
            outcomes.append(Outcome(f"{index}:eval", *oh._exception_outcome(c_exc, h_exc)))
        else:
            outcomes.append(Outcome(f"{index}:eval", *_compare(h_out, c_out, "eval output")))
    return outcomes


def run_case(name: str, all_samples: bool = False) -> list[Outcome]:
    """Every (or the first :data:`FAST_SAMPLES`) sample of one module, on the CPU and on the slot."""
    info = module_named(name)
    outcomes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = samples_of(info, training=True)
        if not all_samples:
            samples = samples[:FAST_SAMPLES]
        for i, sample in enumerate(samples):
            outcomes += _run_sample(info, sample, i, True, info.train_and_eval_differ)
    return outcomes


def load_expectations():
    """The expectations file, keyed by (module name, "float32")."""
    return oh.load_expectations(EXPECTATIONS)


def check_against(outcomes: list[Outcome], expected: list, all_samples: bool) -> list[str]:
    """Problems with a module's outcomes under its expectations; in the fast sweep, expectations for samples
    it does not run are not stale."""
    if not all_samples:
        ran = {o.key for o in outcomes}
        expected = [e for e in expected if e.sample == "all" or e.sample in ran]
    return oh.check_against(outcomes, expected)
