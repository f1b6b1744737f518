"""The hooks that record a training run for ``hybrid diverge``, installed without an edit to the script.

Every point is keyed by (step, module, call index, phase), ``step`` counted from 1 (the first optimizer step):

* ``init``: each parameter of a module when its outermost module is first called, before the first step;
* ``forward``: each tensor a module's call returns (after the module's own hooks: a row-wise parallel layer's
  output after its all-reduce), with the tensors it was given (to tell a module that computes wrong from one
  that is fed wrong);
* ``input_grad``: the gradient of each tensor input of a module call, as backward computes it;
* ``param_grad``: each parameter's gradient when the optimizer's step begins (after clipping);
* ``update``: what the optimizer's step changed each parameter by;
* the loss ``backward()`` is called on, as the ``forward`` of the module :data:`LOSS` (what the optimizer's
  gradients are the gradients of, after any rescaling the script does outside the model).

Module names are those of the outermost module's ``named_modules()``, with the wrappers that parallelism adds
(DDP's and DataParallel's ``module``, ``torch.compile``'s ``_orig_mod``, checkpoint and FSDP1 wrappers) taken
out, so the run under test and the reference name the same module alike. The main thread records, and
``nn.DataParallel``'s replicas, each in a thread of its own: a replica's module is named as the module it copies
and its points carry ``replica`` (its index: which slice of the batch it ran), its outermost module left out
(DataParallel's own output, the replicas' gathered, stands for it).

A module call that drew random numbers (its generator states changed: the CPU's, or the slot's under the CUDA
layer) is marked, so that a divergence there is reported as randomness. Every collective the ``hybrid``
backend issues is recorded in order with the points (its inputs when issued, its outputs once complete), so
that a point names the collective nearest before it.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict

import torch
import torch.nn as nn

from devices.dtypes import dtype_name
from interop import callsite, import_hooks
from interop.diverge.patches import ACTIVE, PIPELINE_STAGE, pause_metadata_inference, watch_replicas
from interop.diverge.tensors import summarise

PHASES = ("init", "forward", "input_grad", "param_grad", "update")
LOSS = "<loss>"
"""The module name of the loss ``backward()`` is called on (recorded as a ``forward`` point of its own)."""


class StepsDone(BaseException):
    """Raised after the last optimizer step to record: ends the script (a BaseException, as SystemExit is, so
    that a script's ``except Exception`` does not swallow it)."""


def _wrapper_types() -> tuple:
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    types = [DataParallel, DistributedDataParallel]
    try:
        from torch._dynamo.eval_frame import OptimizedModule

        types.append(OptimizedModule)
    except ImportError:  # pragma: no cover - dynamo is part of every supported torch
        pass
    try:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper

        types.append(ActivationWrapper)
    except ImportError:  # pragma: no cover
        pass
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        types.append(FullyShardedDataParallel)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


def module_names(root: nn.Module) -> dict[int, str]:
    """id(module) -> its name under ``root``, a wrapper's wrapped module named as the wrapper."""
    wrappers = _wrapper_types()
    names: dict[int, str] = {}

    def walk(module, name):
        if id(module) in names:
            return
        names[id(module)] = name
        for child_name, child in module.named_children():
            if isinstance(module, wrappers):
                walk(child, name)
            else:
                walk(child, f"{name}.{child_name}" if name else child_name)

    walk(root, "")
    return names


def _tensors(value, path=""):
    """(path, tensor) of every tensor in a module's output (tuples, lists, dicts, ModelOutputs)."""
    if isinstance(value, torch.Tensor):
        yield path or "output", value
    elif isinstance(value, dict) or hasattr(value, "items") and hasattr(value, "keys"):
        for key, item in value.items():
            yield from _tensors(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{path}[{i}]")


class Recorder:
    """The points and collectives of one process's run (see the module doc)."""

    def __init__(self, steps: int, rank: int = 0, world: int = 1):
        self.steps, self.rank, self.world = steps, rank, world
        self.points: list[dict] = []
        self.collectives: list[dict] = []
        self.completed: dict[int, int] = {}  # id(optimizer) -> its steps done
        self._seq = itertools.count()
        self._names: dict[int, str] = {}
        self._roots: list[nn.Module] = []
        self._calls: dict[tuple, int] = defaultdict(int)
        self._hooked: set[int] = set()
        self._local = threading.local()
        self._before: dict[int, torch.Tensor] = {}
        self._pending: list[tuple] = []
        self._main = threading.main_thread()
        self._replica_of: dict[int, tuple[str, int]] = {}  # id(a replica's module) -> (name, replica index)
        self._lock = threading.Lock()
        self._handles = []
        self.device_generators = False
        """Watch the current CUDA device's generator too (under the CUDA layer: the current slot's)."""
        self.paused = 0
        """Above 0 while a library runs the model on placeholders (not training): nothing is recorded."""

    # -- steps -----------------------------------------------------------------------------------------

    @property
    def step(self) -> int:
        return max(self.completed.values(), default=0) + 1

    def _point(self, phase, name, call_index, tensors, step=None, **extra):
        if self.paused:
            return
        summaries = []
        for path, t in tensors:
            if _recordable(t):
                summaries.append((path, summarise(t)))
        if summaries:
            with self._lock:  # DataParallel's replicas record from threads of their own
                self._complete_collectives()
                self.points.append(dict(seq=next(self._seq), step=step or self.step, module=name,
                                        call_index=call_index, phase=phase, tensors=summaries, **extra))

    # -- modules ---------------------------------------------------------------------------------------

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _name(self, module) -> str | None:
        name = self._names.get(id(module))
        if name is None and not self._stack():  # an outermost module seen for the first time
            self._roots.append(module)
            prefix = "" if not self._roots[:-1] else f"<{type(module).__name__}>"
            for key, value in module_names(module).items():
                self._names.setdefault(key, f"{prefix}.{value}".strip(".") if prefix else value)
            name = self._names[id(module)]
            if self.step == 1:
                self._record_params("init", module)
        return name

    def _record_params(self, phase, root, step=None):
        names = module_names(root)
        extra = {}
        if phase == "init":
            generators = self._generators()
            extra = dict(drew_since_seed=self._drew_since_seed(generators),
                         device_drew=len(generators) > 1 and self._drew_since_seed(generators[1:]))
        for module in root.modules():
            name = self._names.get(id(module), names.get(id(module)))
            params = [(n, p) for n, p in module.named_parameters(recurse=False)]
            if phase == "param_grad":
                params = [(n, p.grad) for n, p in params if p.grad is not None]
            if params:
                self._point(phase, name, 0, params, step=step, **extra)

    def replicas(self, module: nn.Module, replicas: list) -> None:
        """``nn.DataParallel`` made ``replicas`` of ``module``: name their modules as the modules they copy, and
        hook the originals now (a replica shares its original's hooks), before the replicas run in threads."""
        originals = dict(module.named_modules())
        self._replica_of = {}
        for name, original in originals.items():
            if name and self._names.get(id(original)) is not None:
                self._hook(original)
        for index, replica in enumerate(replicas):
            for name, copy in replica.named_modules():
                original = originals.get(name)
                if name and original is not None and self._names.get(id(original)) is not None:
                    self._replica_of[id(copy)] = (self._names[id(original)], index)

    def _hook(self, module) -> None:
        if id(module) not in self._hooked:  # after the module's own hooks, so it sees their output
            self._hooked.add(id(module))
            self._handles.append(module.register_forward_hook(self._forward, always_call=True))

    def _forward_pre(self, module, args):
        if self.paused:
            return None
        if threading.current_thread() is not self._main:
            replica = self._replica_of.get(id(module))
            if replica is not None:
                self._call(module, args, *replica)
            return None
        self._hook(module)
        name = self._name(module)
        stack = self._stack()
        if name is None or (stack and stack[-1][0] == name):  # unnamed, or a wrapper's wrapped module
            stack.append((name, None, None, None, None, None))
            return None
        self._call(module, args, name)
        return None

    def _call(self, module, args, name: str, replica: int | None = None) -> None:
        """A module call begins: its call index, inputs, generator states and call site, on this thread's stack."""
        key = (self.step, name, replica)
        with self._lock:
            call_index = self._calls[key]
            self._calls[key] += 1
        args = args if isinstance(args, tuple) else (args,)
        inputs = [(f"args[{i}]", summarise(t)) for i, t in enumerate(args) if _recordable(t)]
        self._stack().append((name, call_index, self._rng_states(), callsite.call_site(4), inputs, replica))
        if torch.is_grad_enabled():
            step = self.step
            for i, t in enumerate(args):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(self._input_grad_hook(step, name, call_index, f"args[{i}]", replica))

    def _input_grad_hook(self, step, name, call_index, path, replica):
        # Backward may run on the device's autograd thread: recorded whichever thread calls. Once only: a tensor
        # used again (a pipeline stage's receive buffer, next step) would fire this call's hook with another's.
        fired = []
        extra = {} if replica is None else dict(replica=replica)

        def hook(grad):
            if not fired:
                fired.append(True)
                self._point("input_grad", name, call_index, [(path, grad)], step=step, **extra)

        return hook

    def _forward(self, module, args, output):
        if self.paused:
            return None
        if threading.current_thread() is not self._main and id(module) not in self._replica_of:
            return None
        stack = self._stack()
        if not stack:
            return None
        name, call_index, rng, site, inputs, replica = stack.pop()
        if call_index is None or output is None:
            return None
        drew = any(not torch.equal(a, b) for a, b in zip(rng, self._rng_states()))
        extra = {} if replica is None else dict(replica=replica)
        self._point("forward", name, call_index, list(_tensors(output)), call_site=site, random=drew, inputs=inputs,
                    **extra)
        return None

    def _drew_since_seed(self, generators: list) -> bool:
        """Whether one of ``generators`` has drawn since it was last seeded (its state is not a fresh one's)."""
        for generator in generators:
            fresh = torch.Generator().manual_seed(generator.initial_seed()).get_state()
            state = generator.get_state()
            if state.shape == fresh.shape and not torch.equal(state, fresh):
                return True
        return False

    def _generators(self) -> list:
        generators = [torch.random.default_generator]
        if self.device_generators:
            generators.append(torch.cuda.default_generators[torch.cuda.current_device()])
        return generators

    def _rng_states(self):
        return tuple(g.get_state() for g in self._generators())

    # -- the optimizer ---------------------------------------------------------------------------------

    def _step_pre(self, optimizer, args, kwargs):
        step = self.step
        for root in self._roots:
            self._record_params("param_grad", root, step=step)
        self._before = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                self._before[id(p)] = _local_copy(p)

    def _step_post(self, optimizer, args, kwargs):
        step = self.step
        for root in self._roots:
            names = module_names(root)
            for module in root.modules():
                name = self._names.get(id(module), names.get(id(module)))
                deltas = [(n, _local_copy(p) - self._before[id(p)]) for n, p in module.named_parameters(recurse=False)
                          if id(p) in self._before]
                if deltas:
                    self._point("update", name, 0, deltas, step=step)
        self._before = {}
        self.completed[id(optimizer)] = self.completed.get(id(optimizer), 0) + 1
        if self.step > self.steps:
            raise StepsDone()

    # -- collectives -----------------------------------------------------------------------------------

    def collective(self, label: str, size: int, tensors, work) -> None:
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        self.collectives.append(dict(seq=next(self._seq), step=self.step, label=label, size=size,
                                     shapes=[list(t.shape) for t in tensors],
                                     dtypes=[dtype_name(t.dtype) for t in tensors],
                                     inputs=[_brief(t) for t in tensors], outputs=None))
        self._pending.append((self.collectives[-1], tensors, work))

    def _complete_collectives(self) -> None:
        still = []
        for entry, tensors, work in self._pending:
            try:
                done = work is None or work.is_completed()
            except Exception:  # a Work that cannot say: read it now
                done = True
            if done:
                entry["outputs"] = [_brief(t) for t in tensors]
            else:
                still.append((entry, tensors, work))
        self._pending = still

    # -- installing ------------------------------------------------------------------------------------

    def _backward(self, original):
        """``torch.autograd.backward`` recording the loss it is called on (a scalar and no gradient given: what the
        optimizer's gradients are of), as the point (step, ``LOSS``, call index, ``forward``)."""

        def backward(tensors, grad_tensors=None, *args, **kwargs):
            if grad_tensors is None and isinstance(tensors, torch.Tensor) and tensors.numel() == 1 and \
                    threading.current_thread() is self._main and not self.paused:
                key = (self.step, LOSS)
                call_index = self._calls[key]
                self._calls[key] += 1
                self._point("forward", LOSS, call_index, [("loss", tensors)], call_site=callsite.call_site(2))
            return original(tensors, grad_tensors, *args, **kwargs)

        return backward

    def install(self) -> None:
        from torch.nn.modules import module as module_hooks
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles += [module_hooks.register_module_forward_pre_hook(self._forward_pre),
                          register_optimizer_step_pre_hook(self._step_pre),
                          register_optimizer_step_post_hook(self._step_post)]
        ACTIVE[:] = [self]
        import_hooks.after_import(PIPELINE_STAGE, pause_metadata_inference)
        watch_replicas()
        self._autograd_backward = torch.autograd.backward
        torch.autograd.backward = self._backward(self._autograd_backward)

    def finish(self) -> dict:
        self._complete_collectives()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if getattr(self, "_autograd_backward", None) is not None:
            torch.autograd.backward = self._autograd_backward
            self._autograd_backward = None
        if ACTIVE and ACTIVE[0] is self:
            ACTIVE.clear()
        return dict(rank=self.rank, world=self.world, steps=self.step - 1, points=self.points,
                    collectives=self.collectives)


def _recordable(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_meta


def _local_copy(p: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    t = p.detach()
    if isinstance(t, DTensor):
        t = t.to_local()
    return t.to("cpu", copy=True)


def _brief(t: torch.Tensor) -> dict:
    """A collective's tensor, in brief: its magnitude, sum and whether any element is not finite."""
    cpu = t.detach().to("cpu")
    if not (cpu.is_floating_point() or cpu.is_complex()):
        cpu = cpu.double()
    finite = bool(torch.isfinite(cpu).all()) if cpu.numel() else True
    return dict(absmax=float(cpu.abs().max()) if cpu.numel() else 0.0, sum=float(cpu.double().sum()),
                finite=finite)
