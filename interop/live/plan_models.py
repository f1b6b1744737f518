"""Models ``hybrid plan`` builds by name, with their example batch and loss.

Names come from the one registry, :data:`planner.models.MODELS` (torch-free): this module builds them.

* this project's modules (``gpt``: the planner's demo, a GPT-style decoder big enough that compute, not op
  launches, sets the step; ``gpt-tiny``: the small GPT of ``hybrid demo``; ``cnn``: a LeNet-sized CNN), from
  the class and configuration the registry names;
* the named transformers architectures (``llama3-8b`` ...) and any transformers causal-LM model type (``gpt2``,
  ``llama``, ...: its default config, :func:`planner.models.transformers_config`), built from the config (no
  weights, no download), dropout off so a run can be compared with the single-device run bit for bit;
* ``module:factory``: ``factory()`` returns an ``nn.Module`` taking token ids, or a tuple
  ``(model, example_inputs[, example_targets[, loss_fn]])``.

A model is built on the meta device when it will only be planned (shape-only), for real when it will run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from planner.models import MODELS, ModelEntry, lookup, transformers_config


@dataclass(slots=True)
class PlanModel:
    """A model with what one training step of it takes."""

    name: str
    model: Any
    inputs: tuple
    targets: Any
    loss_fn: Callable | None
    """None: cross-entropy over the outputs' last dimension (the planner's default)."""
    description: str = ""

    def batch(self, seed: int) -> tuple[tuple, Any]:
        """A fresh (inputs, targets) of the same shapes, for step ``seed``."""
        import torch

        g = torch.Generator().manual_seed(seed)

        def like(t):
            if not isinstance(t, torch.Tensor):
                return t
            if t.is_floating_point():
                return torch.randn(t.shape, generator=g, dtype=t.dtype)
            high = int(t.max()) + 1 if t.numel() else 2
            return torch.randint(0, max(high, 2), t.shape, generator=g, dtype=t.dtype)

        return tuple(like(t) for t in self.inputs), like(self.targets)


def _tokens(vocab: int, batch: int, seq: int, device: str):
    import torch

    g = torch.Generator().manual_seed(0)
    if device == "meta":
        return (torch.zeros(batch, seq, dtype=torch.long, device="meta"),
                torch.zeros(batch, seq, dtype=torch.long, device="meta"))
    data = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def build(name: str, *, real: bool, batch: int | None = None, seq: int | None = None,
          dtype: str | None = None) -> PlanModel:
    """The model ``name`` (see the module doc), on the meta device unless ``real``."""
    import torch

    device = "cpu" if real else "meta"
    torch.manual_seed(0)
    if ":" in name:
        return _factory(name, device)
    entry = lookup(name)
    if entry is not None and entry.module is not None:
        return _own(entry, device, batch, seq, dtype)
    return _transformers(name, device, batch or 8, seq or 64, dtype)


def _own(entry: ModelEntry, device: str, batch: int | None, seq: int | None, dtype: str | None) -> PlanModel:
    """One of this project's modules, built as the registry says."""
    import torch

    path, _, cls = entry.module.partition(":")
    module = importlib.import_module(path)
    arch = dict(entry.arch)
    if seq is not None and "seq_len" in arch:
        arch["seq_len"] = seq
    batch, dt = batch or entry.batch, getattr(torch, dtype or entry.dtype or "float32")
    with torch.device(device):
        model = getattr(module, cls)(getattr(module, entry.module_config)(**arch)) if entry.module_config else \
            getattr(module, cls)()
        model = model.to(dt)
    if entry.inputs == "images":
        x = torch.zeros(batch, 1, 28, 28, device=device, dtype=dt)
        y = torch.zeros(batch, dtype=torch.long, device=device)
        if device != "meta":
            g = torch.Generator().manual_seed(0)
            x = torch.randn(batch, 1, 28, 28, generator=g, dtype=dt)
            y = torch.randint(0, 10, (batch,), generator=g)
        return PlanModel(entry.name, model, (x,), y, None, entry.description)
    x, y = _tokens(model.cfg.vocab_size, batch, model.cfg.seq_len, device)
    return PlanModel(entry.name, model, (x,), y, None, entry.description)


def _transformers(name: str, device: str, batch: int, seq: int, dtype: str | None) -> PlanModel:
    import torch

    try:
        import transformers
    except ImportError as e:  # pragma: no cover - transformers is a test dependency
        raise ValueError(f"model: {name!r} needs transformers, which is missing; this project's own models: "
                         f"{', '.join(n for n, m in MODELS.items() if m.module)}") from e
    try:
        config = transformers_config(name)
    except ValueError as error:
        raise ValueError(f"{error}; or module:factory") from None
    for key, value in list(config.to_dict().items()):
        if isinstance(value, float) and ("dropout" in key or "pdrop" in key):
            setattr(config, key, 0.0)  # a run is compared with the single-device run bit for bit
    config.use_cache = False
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config)
    if dtype:
        model = model.to(getattr(torch, dtype))
    vocab = getattr(config, "vocab_size", 32000)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or seq
    x, y = _tokens(vocab, batch, min(seq, limit), device)
    params = sum(p.numel() for p in model.parameters())
    return PlanModel(name, model, (x,), y, None,
                     f"transformers {type(model).__name__} from its default config ({params / 1e6:.1f} M parameters, "
                     f"dropout off), batch {batch} x {x.shape[1]} tokens")


def _factory(spec: str, device: str) -> PlanModel:
    import torch

    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"model: cannot load {spec!r} ({e}); expected module:factory") from None
    if not callable(factory):
        raise ValueError(f"model: {spec} is a {type(factory).__name__}, not a factory; expected module:factory, "
                         "a function returning (model, example_inputs[, example_targets[, loss_fn]])")
    with torch.device(device):
        made = factory()
    if isinstance(made, torch.nn.Module):
        raise ValueError(f"model: {spec} returned a module without inputs; return (model, example_inputs"
                         "[, example_targets[, loss_fn]])")
    if not isinstance(made, (tuple, list)) or not 2 <= len(made) <= 4 or not isinstance(made[0], torch.nn.Module):
        raise ValueError(f"model: {spec}() returned {type(made).__name__} {str(made)[:60]!r}; expected "
                         "(model, example_inputs[, example_targets[, loss_fn]]) with an nn.Module first")
    model, inputs, *rest = made
    targets = rest[0] if rest else None
    loss_fn = rest[1] if len(rest) > 1 else None
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return PlanModel(spec, model, inputs, targets, loss_fn, f"{spec}()")
