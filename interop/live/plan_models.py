"""Models ``hybrid plan`` knows by name, with their example batch and loss.

* ``gpt``: the planner's demo, a GPT-style decoder big enough that compute, not op
  launches, sets the step (2048 wide, 8 layers, 1024 tokens, bfloat16, batch 64);
* ``gpt-tiny``: the small GPT of ``hybrid demo`` (float32), quick to run for real;
* ``cnn``: a LeNet-sized CNN on 1x28x28 inputs (float32);
* a transformers model type (``gpt2``, ``llama``, ...): its default config, built
  from the config (no weights, no download), dropout off so a run can be compared
  with the single-device run bit for bit;
* ``module:factory``: ``factory()`` returns an ``nn.Module`` taking token ids, or a
  tuple ``(model, example_inputs[, example_targets[, loss_fn]])``.

A model is built on the meta device when it will only be planned (shape-only), for
real when it will run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

BUILTIN = {
    "gpt": "GPT-style decoder, 2048 wide, 8 layers, 1024 tokens, bfloat16, batch 64 (the planner's demo)",
    "gpt-tiny": "the small GPT of `hybrid demo` (128 wide, 2 layers, 64 tokens), float32, batch 8",
    "cnn": "a LeNet-sized CNN on 1x28x28 inputs, float32, batch 32",
}


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
    from interop.models import GPT, GPTConfig, SmallCNN

    if name in ("gpt", "gpt-tiny"):
        if name == "gpt":
            cfg = GPTConfig(vocab_size=32768, seq_len=seq or 1024, dim=2048, heads=16, layers=8)
            batch, dt = batch or 64, dtype or "bfloat16"
        else:
            cfg = GPTConfig(seq_len=seq or 64)
            batch, dt = batch or 8, dtype or "float32"
        with torch.device(device):
            model = GPT(cfg).to(getattr(torch, dt))
        x, y = _tokens(cfg.vocab_size, batch, cfg.seq_len, device)
        return PlanModel(name, model, (x,), y, None, BUILTIN[name])
    if name == "cnn":
        batch = batch or 32
        with torch.device(device):
            model = SmallCNN().to(getattr(torch, dtype or "float32"))
        x = torch.zeros(batch, 1, 28, 28, device=device, dtype=getattr(torch, dtype or "float32"))
        y = torch.zeros(batch, dtype=torch.long, device=device)
        if real:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(batch, 1, 28, 28, generator=g, dtype=x.dtype)
            y = torch.randint(0, 10, (batch,), generator=g)
        return PlanModel(name, model, (x,), y, None, BUILTIN[name])
    return _transformers(name, device, batch or 8, seq or 64, dtype)


def _transformers(name: str, device: str, batch: int, seq: int, dtype: str | None) -> PlanModel:
    import torch

    try:
        import transformers
    except ImportError as e:  # pragma: no cover - transformers is a test dependency
        raise ValueError(f"model: {name!r} is not built in ({', '.join(BUILTIN)}) and transformers is missing") from e
    try:
        config = transformers.AutoConfig.for_model(name)
    except ValueError:
        raise ValueError(f"model: unknown model {name!r}; built in: {', '.join(BUILTIN)}; or a transformers model "
                         "type (gpt2, llama, ...), or module:factory") from None
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
    with torch.device(device):
        made = factory()
    if isinstance(made, torch.nn.Module):
        raise ValueError(f"model: {spec} returned a module without inputs; return (model, example_inputs"
                         "[, example_targets[, loss_fn]])")
    model, inputs, *rest = made
    targets = rest[0] if rest else None
    loss_fn = rest[1] if len(rest) > 1 else None
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return PlanModel(spec, model, inputs, targets, loss_fn, f"{spec}()")
