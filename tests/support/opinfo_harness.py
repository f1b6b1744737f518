"""The OpInfo conformance sweep: PyTorch's own op database run on an emulated
hybrid slot and compared with the CPU.

Shared by tests/conformance/test_opinfo_conformance.py (one pytest test per op and dtype)
and tests/support/opinfo_report.py (the counts). The samples are the op's own
``op.sample_inputs("cpu", dtype)``, made from one seed. Each sample is copied
twice, geometry and storage sharing kept (so non-contiguous and overlapping
samples reach the device as they are): once for the CPU run, once onto
``hybrid:0``. Both runs start from the same seed, so random ops draw the same
numbers (an emulated slot's generator is a CPU generator seeded alike). The
results, and every sample tensor after the run (which catches lost in-place
writes), are compared with ``torch.testing.assert_close`` under the op's own
tolerance overrides; so are the results' strides and which inputs each result
aliases (a view must stay a view).

Variants, each sample for each (keys "3", "3:inplace", "3:out", ...):

- ``op``: the op itself (every dtype);
- ``inplace``: its in-place variant (every dtype);
- ``out``: its ``out=`` variant given empty ``out`` tensors, so the kernel has
  to resize them (every dtype);
- ``noncontig``: the sample made non-contiguous (float32);
- ``grad``: backward through the op under seeded cotangents, gradients with
  respect to every floating-point sample tensor compared (float32).

An outcome is one of

- ``agree``: same values (``empty*`` ops: same shape, dtype and device);
- ``raise-same``: the CPU raises and so does the slot, with the same type;
- ``mismatch``: both ran, results differ (or the slot did not raise where the
  CPU did, or returned a tensor that is not on the slot);
- ``raise``: the slot raised where the CPU did not (or another type);

and a case crashing the interpreter is ``crash`` (seen only from outside).
``tests/support/opinfo_expectations.toml`` lists every outcome other than ``agree``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import tomllib
import torch
from torch.testing._internal.common_device_type import toleranceOverride
from torch.testing._internal.common_methods_invocations import op_db

import interop

DEVICE = "hybrid:0"
SEED = 20260602
EXPECTATIONS = Path(__file__).with_name("opinfo_expectations.toml")

# The dtypes swept: every op whose CPU dtypes include one is run in it. float32
# runs every variant; the bfloat16 and int64 subsets leave out the two costliest
# (noncontig, grad), which keeps the sweep near two minutes on two idle cores.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int64": torch.int64}
VARIANTS_FOR = {
    "float32": ("op", "inplace", "out", "noncontig", "grad"),
    "bfloat16": ("op", "inplace", "out"),
    "int64": ("op", "inplace", "out"),
}

# Ops whose result is uninitialised memory: compared by shape, dtype, device.
SHAPE_ONLY = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
    "new_empty_strided",
})

# The expectation categories, and which outcomes each admits.
CATEGORIES = {
    "cpu-kernel-raises-same-error": {"raise-same"},
    "nondeterministic": {"agree", "mismatch", "raise", "raise-same"},
    "hybrid-bug": {"mismatch", "raise"},
    "backend-difference": {"mismatch", "raise"},
}
# Outcomes counted as agreeing.
AGREEING = {"agree", "raise-same"}


def case_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def cases() -> list[tuple[str, str]]:
    """Every (case name, dtype name) the sweep runs, in a stable order."""
    out = []
    by_dtype = {name: [] for name in DTYPES}
    for op in op_db:
        supported = op.supported_dtypes("cpu")
        for name, dtype in DTYPES.items():
            if dtype in supported:
                by_dtype[name].append(case_name(op))
    for name, names in by_dtype.items():
        out.extend((n, name) for n in sorted(set(names)))
    return out


_OPS = None


def op_named(name: str):
    global _OPS
    if _OPS is None:
        _OPS = {case_name(op): op for op in op_db}
    return _OPS[name]


# --------------------------------------------------------------------------
# Moving samples, geometry kept


class _Copier:
    """Copies a sample's tensors onto one device, keeping sizes, strides,
    offsets and which tensors share a storage."""

    def __init__(self, device: str):
        self.device = torch.device(device)
        self.storages: dict[int, torch.Tensor] = {}

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "cpu":
            return t
        if t.layout != torch.strided:  # sparse and the like: as `.to()` makes them
            return t.clone() if self.device.type == "cpu" else t.to(self.device)
        src = t.detach()
        storage = src.untyped_storage()
        key = storage.data_ptr() if storage.nbytes() else None
        base = self.storages.get(key) if key is not None else None
        if base is None:
            raw = torch.empty(0, dtype=torch.uint8).set_(storage)
            base = torch.empty(storage.nbytes(), dtype=torch.uint8, device=self.device)
            base.copy_(raw)
            if key is not None:
                self.storages[key] = base
        out = torch.empty(0, dtype=src.dtype, device=self.device)
        out.set_(base.untyped_storage(), src.storage_offset(), src.size(), src.stride())
        if t.is_conj():
            out = out.conj()
        if t.requires_grad:
            out.requires_grad_(True)
        return out

    def __call__(self, obj):
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        if isinstance(obj, torch.device) and obj.type == "cpu":
            return self.device
        if isinstance(obj, str) and obj == "cpu":  # a device named by string (`x.to("cpu")`)
            return str(self.device)
        if isinstance(obj, list):
            return [self(o) for o in obj]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self(v) for k, v in obj.items()}
        return obj


# Arguments that OpInfo keeps on the CPU when it makes samples for a device,
# because the op requires them there (as CUDA does): by op name, the positions
# in `sample.args`.
KEEP_ON_CPU = {
    "tensor_split": {0},  # tensor_indices_or_sections must be a CPU tensor
}


def copy_sample(sample, device: str, op_name: str = ""):
    c = _Copier(device)
    keep = KEEP_ON_CPU.get(op_name, ()) if device != "cpu" else ()
    args = [a if i in keep and isinstance(a, torch.Tensor) else c(a)
            for i, a in enumerate(sample.args)]
    return c(sample.input), args, c(dict(sample.kwargs))


def _tensors(obj) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


# --------------------------------------------------------------------------
# Comparing


class Mismatch(AssertionError):
    pass


def tolerances(op, dtype: torch.dtype) -> dict:
    """assert_close's defaults for `dtype`, widened by the op's own
    toleranceOverride decorators that apply to the CPU (any test)."""
    atol = rtol = None
    for info in getattr(op, "decorators", ()):
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        dtypes = getattr(info, "dtypes", None)
        if dtypes is not None and dtype not in dtypes:
            continue
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                tol = dec.d[dtype]
                atol = max(atol or 0.0, tol.atol)
                rtol = max(rtol or 0.0, tol.rtol)
    if atol is None:
        return {}
    from torch.testing._comparison import default_tolerances

    d_rtol, d_atol = default_tolerances(dtype)
    return {"atol": max(atol, d_atol), "rtol": max(rtol, d_rtol)}


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if b.layout != torch.strided:
        return False
    try:
        return torch.equal(a, b)
    except (RuntimeError, NotImplementedError):  # no equal kernel for the dtype (chalf)
        return False


def compare(actual, expected, *, shape_only=False, tol=None, path="result", on_slot=True):
    """Raises Mismatch when the slot's `actual` differs from the CPU's `expected`.
    `on_slot`: where the CPU gave a CPU tensor the slot must give a slot tensor."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        if on_slot and expected.device.type == "cpu" and actual.device.type != "hybrid":
            raise Mismatch(f"{path}: the slot returned a tensor on {actual.device}")
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            raise Mismatch(f"{path}: {actual.dtype}{tuple(actual.shape)} != "
                           f"{expected.dtype}{tuple(expected.shape)}")
        if shape_only:
            return
        actual = actual.cpu()
        if _bitwise_equal(actual, expected):
            return  # the common case: the same kernel ran on the same bytes
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False,
                                       **(tol or {}))
        except AssertionError as e:
            lines = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
            raise Mismatch(f"{path}: " + " ".join(lines[:3])) from None
        return
    if isinstance(expected, (list, tuple)) and not isinstance(expected, torch.Size):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected a sequence of {len(expected)}, got {actual!r:.80}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, shape_only=shape_only, tol=tol, path=f"{path}[{i}]", on_slot=on_slot)
        return
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isnan(expected) and math.isnan(actual):
            return
        if not math.isclose(actual, expected, rel_tol=(tol or {}).get("rtol", 1e-5),
                            abs_tol=(tol or {}).get("atol", 1e-8)):
            raise Mismatch(f"{path}: {actual} != {expected}")
        return
    if type(actual) is not type(expected) or actual != expected:
        raise Mismatch(f"{path}: {actual!r:.80} != {expected!r:.80}")


# --------------------------------------------------------------------------
# Running


@dataclasses.dataclass
class Outcome:
    key: str        # sample index, with ":inplace", ":out", ... for the other variants
    outcome: str    # agree | raise-same | mismatch | raise
    detail: str = ""


_SLOT_GENERATOR = interop._C._default_generator(int(DEVICE.split(":")[1]))


def seed(value: int = SEED) -> None:
    """What torch.manual_seed does for the two generators the sweep draws from
    (the CPU's and the slot's), without its lazy CUDA/XPU/MTIA seeding, which
    records a stack trace per call and would take half the sweep's time."""
    torch.default_generator.manual_seed(value)
    _SLOT_GENERATOR.manual_seed(value)


def _call(fn, args, kwargs):
    seed()
    try:
        return None, fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  (any exception is an outcome)
        return e, None


def _exception_outcome(c_exc, h_exc) -> tuple[str, str]:
    """The outcome when the CPU run, the slot run, or both raised."""
    if c_exc is not None and h_exc is not None:
        if type(c_exc) is type(h_exc):
            return "raise-same", _describe(c_exc)
        return "raise", f"cpu {_describe(c_exc)}; hybrid {_describe(h_exc)}"
    if h_exc is not None:
        return "raise", _describe(h_exc)
    return "mismatch", f"the slot did not raise; the CPU raised {_describe(c_exc)}"


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def _empty_like_result(result, device):
    if isinstance(result, torch.Tensor):
        return torch.empty(0, dtype=result.dtype, device=device)
    return type(result)(torch.empty(0, dtype=r.dtype, device=device) for r in result)


def _run_variant(op, variant, sample, cpu_result, shape_only, tol):
    """One variant of one sample on both devices; returns (outcome, detail) or
    None when the variant does not apply to this sample."""
    if variant == "op":
        fn = op
    elif variant == "noncontig":
        fn = op
        try:
            sample = sample.noncontiguous()
        except RuntimeError:  # no strided form (sparse samples)
            return None
    elif variant == "inplace":
        fn = op.get_inplace()
        if fn is None or not isinstance(sample.input, torch.Tensor):
            return None
    else:  # out
        if not op.supports_out or cpu_result is None:
            return None
        if not (isinstance(cpu_result, torch.Tensor) or (
                isinstance(cpu_result, tuple) and cpu_result
                and all(isinstance(r, torch.Tensor) for r in cpu_result))):
            return None
        fn = op

    c_in, c_args, c_kwargs = copy_sample(sample, "cpu")
    try:
        h_in, h_args, h_kwargs = copy_sample(sample, DEVICE, op.name)
    except Exception as e:  # noqa: BLE001  (e.g. a sparse sample cannot live on the slot)
        return "raise", f"moving the sample to the slot: {_describe(e)}"
    if variant == "out":
        c_kwargs["out"] = _empty_like_result(cpu_result, "cpu")
        h_kwargs["out"] = _empty_like_result(cpu_result, DEVICE)

    c_exc, c_res = _call(fn, [c_in, *c_args], c_kwargs)
    if variant == "out" and (isinstance(c_exc, TypeError)
                             or "failed to match any schema" in str(c_exc)):
        return None  # the op takes no out= of this form: nothing to compare
    # A sample without tensors is a factory call: made under the slot as the
    # default device, it creates its result there.
    factory = not any(True for _ in _tensors([h_in, h_args, h_kwargs]))
    with torch.device(DEVICE) if factory else contextlib.nullcontext():
        h_exc, h_res = _call(fn, [h_in, *h_args], h_kwargs)

    if c_exc is not None or h_exc is not None:
        return _exception_outcome(c_exc, h_exc)
    try:
        compare(h_res, c_res, shape_only=shape_only, tol=tol)
        if not shape_only:  # the same kernel on the same geometry lays out alike
            for a, e in zip(_tensors(h_res), _tensors(c_res)):
                if a.layout == torch.strided and a.numel() > 1 and a.stride() != e.stride():
                    raise Mismatch(f"result strides {a.stride()} != {e.stride()} on the CPU")
        h_alias = _alias_map(h_res, list(_tensors([h_in, h_args, h_kwargs])))
        c_alias = _alias_map(c_res, list(_tensors([c_in, c_args, c_kwargs])))
        if h_alias != c_alias:
            raise Mismatch(f"result aliases inputs {h_alias}, on the CPU {c_alias}")
        if variant == "out":
            compare(h_kwargs["out"], c_kwargs["out"], shape_only=shape_only, tol=tol, path="out")
        if not shape_only:
            compare(list(_tensors([h_in, h_args, h_kwargs])),
                    list(_tensors([c_in, c_args, c_kwargs])), tol=tol, path="inputs after",
                    on_slot=False)
    except Mismatch as e:
        return "mismatch", str(e)
    return "agree", ""


def _gradients(op, sample, device: str):
    """The gradients of the op's (processed) differentiable outputs, under seeded
    random cotangents, with respect to every floating-point sample tensor; None
    when the op has no differentiable output for this sample."""
    inp, args, kwargs = copy_sample(sample, device, op.name)
    leaves = [t for t in _tensors([inp, args, kwargs])
              if t.is_floating_point() and t.layout == torch.strided]
    for t in leaves:
        t.requires_grad_(True)
    seed()
    out = sample.output_process_fn_grad(op(inp, *args, **kwargs))
    outs = [t for t in _tensors(out) if t.requires_grad]
    if not outs:
        return None
    seed(SEED + 1)
    cotangents = [torch.randn(t.shape, dtype=t.dtype).to(device) for t in outs]
    return list(torch.autograd.grad(outs, leaves, cotangents, allow_unused=True))


def _run_grad(op, sample, tol):
    """The `grad` variant: backward through the op on both devices."""
    if not op.supports_autograd:
        return None
    try:
        c_exc, c_res = None, _gradients(op, sample, "cpu")
    except Exception as e:  # noqa: BLE001
        c_exc, c_res = e, None
    if c_exc is None and c_res is None:
        return None
    try:
        h_exc, h_res = None, _gradients(op, sample, DEVICE)
    except Exception as e:  # noqa: BLE001
        h_exc, h_res = e, None
    if c_exc is not None or h_exc is not None:
        return _exception_outcome(c_exc, h_exc)
    try:
        compare(h_res, c_res, tol=tol, path="gradients")
    except Mismatch as e:
        return "mismatch", str(e)
    return "agree", ""


def _alias_map(result, inputs: list[torch.Tensor]) -> list[tuple[int, ...]]:
    """For each tensor of `result`, the positions of the inputs whose storage
    it shares: a view must stay a view, a new tensor must not alias."""
    def ptr(t):
        if t.layout != torch.strided or t.untyped_storage().nbytes() == 0:
            return None
        return t.untyped_storage().data_ptr()
    ins = [ptr(t) for t in inputs]
    out = []
    for t in _tensors(result):
        p = ptr(t)
        out.append(tuple(i for i, q in enumerate(ins) if p is not None and q == p))
    return out


def samples_of(op, dtype: torch.dtype):
    """The op's sample inputs on the CPU: what op.sample_inputs("cpu", dtype)
    yields, made by its sample function directly (the wrapper only tracks
    inputs for unittest failures, inspecting the stack for every call) from
    one seed."""
    seed()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(op.sample_inputs_func(op, "cpu", dtype, False))


def run_case(name: str, dtype_name: str) -> list[Outcome]:
    """Every sample of one (op, dtype) on the CPU and on the slot."""
    op = op_named(name)
    dtype = DTYPES[dtype_name]
    shape_only = op.name in SHAPE_ONLY
    tol = tolerances(op, dtype)
    outcomes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, sample in enumerate(samples_of(op, dtype)):
            cpu_result = None
            for variant in VARIANTS_FOR[dtype_name]:
                if variant == "out" and cpu_result is None:
                    continue
                if variant == "op":
                    c_in, c_args, c_kwargs = copy_sample(sample, "cpu")
                    _, cpu_result = _call(op, [c_in, *c_args], c_kwargs)
                if variant == "grad":
                    r = None if shape_only else _run_grad(op, sample, tol)
                else:
                    r = _run_variant(op, variant, sample, cpu_result, shape_only, tol)
                if r is None:
                    continue
                key = str(i) if variant == "op" else f"{i}:{variant}"
                outcomes.append(Outcome(key, r[0], r[1]))
    return outcomes


# --------------------------------------------------------------------------
# Expectations


@dataclasses.dataclass
class Expectation:
    op: str
    dtype: str
    sample: str     # a key as in Outcome.key, or "all"
    category: str
    outcome: str    # the outcome expected ("any" for nondeterministic)
    reason: str


def load_expectations(path: Path = EXPECTATIONS) -> dict[tuple[str, str], list[Expectation]]:
    out: dict[tuple[str, str], list[Expectation]] = {}
    if not path.exists():
        return out
    with open(path, "rb") as f:
        data = tomllib.load(f)
    for row in data.get("expect", []):
        if row["category"] not in CATEGORIES:
            raise ValueError(f"{path}: unknown category {row['category']!r} for {row['op']}")
        samples = row["samples"]
        for sample in [samples] if isinstance(samples, str) else samples:
            e = Expectation(row["op"], row["dtype"], str(sample), row["category"],
                            row.get("outcome", "any"), row["reason"])
            out.setdefault((e.op, e.dtype), []).append(e)
    return out


def check_against(outcomes: list[Outcome], expected: list[Expectation]) -> list[str]:
    """Problems with a case's outcomes under its expectations (empty: as expected)."""
    by_key = {e.sample: e for e in expected}
    wildcard = by_key.get("all")
    problems = []
    used = set()
    for o in outcomes:
        e = by_key.get(o.key) or wildcard
        if e is None:
            if o.outcome != "agree":
                problems.append(f"sample {o.key}: unexpected {o.outcome}: {o.detail}")
            continue
        used.add(e.sample)
        allowed = CATEGORIES[e.category]
        if e.outcome != "any":
            allowed = allowed & {e.outcome}
        if o.outcome not in allowed:
            if o.outcome == "agree":
                problems.append(f"sample {o.key}: now agrees; remove its expectation "
                                f"({e.category}: {e.reason})")
            else:
                problems.append(f"sample {o.key}: {o.outcome} ({o.detail}), but expected "
                                f"{e.outcome} ({e.category}: {e.reason})")
    for e in expected:
        if e.sample not in used:
            problems.append(f"expectation for sample {e.sample} matched no sample (stale)")
    return problems


def expectation_for(key: str, expected: list[Expectation]) -> Expectation | None:
    by_key = {e.sample: e for e in expected}
    return by_key.get(key) or by_key.get("all")


def is_deterministic(key: str, expected: list[Expectation]) -> bool:
    e = expectation_for(key, expected)
    return e is None or e.category != "nondeterministic"


def setup_process() -> None:
    """Per-process settings of the sweep: one intra-op thread (the CPUs are
    shared by the workers; OPINFO_THREADS overrides)."""
    torch.set_num_threads(int(os.environ.get("OPINFO_THREADS", "1")))


def slot_bytes() -> int:
    """Bytes hybrid:0 holds now."""
    return torch.hybrid.memory_allocated(0)


def leaked_since(held: int) -> int:
    """Bytes hybrid:0 holds beyond `held` once garbage is collected (a case
    must give back all it drew). The full collection, slow with op_db loaded,
    runs only when the plain count is up."""
    import gc
    import time

    for attempt in range(5):  # finalizers run in one pass may free more in the next
        if slot_bytes() <= held:
            return 0
        gc.collect()
        if attempt >= 2:
            # A thread an earlier test left behind (a DataLoader's pin-memory thread, a store's heartbeat) may
            # hold a tensor on the slot for a moment: a leak of this case's is still there after it.
            time.sleep(0.05)
    return max(0, slot_bytes() - held)


@contextlib.contextmanager
def unpriced_records():
    """The timeline stays on (its recording is part of every op's path), but within a case the records the
    runtime's cost table does not know wait in the log, unpriced, and are dropped after it: a sweep of thousands
    of shapes would otherwise price each one."""
    from interop import session

    interop._C._set_drain_hook(session.drain, 0)
    try:
        yield
    finally:
        interop._C._timeline_discard_pending()
        interop._C._set_drain_hook(session.drain, session.DRAIN_BATCH)
