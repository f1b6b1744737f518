"""The drift report: the same model, seed and data trained in float32 on the CPU and in each slot's
device numerics under a recipe; per-step loss difference, final-loss delta, per-layer gradient
error, overflow/underflow counts, and a PNG of the loss curves (``hybrid numerics``).

Every number here is computed (measured), none is modelled: each run really trains on its slot
with the slot in ``device`` numerics mode.
"""

from __future__ import annotations

import copy
import gc
import math
import time
from dataclasses import dataclass, field

import torch

import devices
from devices.output_files import atomic_path
from interop.numerics.drift.recipes import RECIPES, Quantizer, QuantStats, Recipe, quantize_gemms, recipe_named

MODELS = ("gpt2", "gpt")
"""Models the report trains: ``gpt2`` (Hugging Face GPT-2 from a tiny config, no download), ``gpt``
(interop.models.GPT)."""


@dataclass(frozen=True, slots=True)
class DriftConfig:
    """What one drift report trains."""

    model: str = "gpt2"
    """One of :data:`MODELS`."""
    rack: str = "trn3:1+b200:1"
    """Rack spec; every slot is trained on."""
    steps: int = 50
    """Optimizer steps per run."""
    recipes: tuple[str, ...] = tuple(RECIPES)
    """Recipes to run (names in :data:`interop.numerics.drift.recipes.RECIPES`)."""
    seed: int = 0
    """Seed of the model's initial weights and of the data."""
    batch: int = 8
    seq_len: int = 32
    lr: float = 3e-3
    strict: bool = False
    """Raise ValueError for a recipe a slot's kind does not support natively, instead of skipping it."""


@dataclass
class Run:
    """One training run: a slot (or the CPU reference) under a recipe."""

    label: str
    kind: str
    slot: int | None
    recipe: str
    losses: list[float]
    grad_errors: dict[str, float] = field(default_factory=dict)
    """Per layer: relative L2 error of the first step's gradients against float32 (same weights, same data)."""
    overflow: int = 0
    underflow: int = 0
    quantized: int = 0
    rounded_elements: int = 0
    """Elements device mode rounded stochastically."""
    scale_rule: str | None = None
    wall_s: float = 0.0
    """Measured wall time of the run."""
    numerics: str = ""
    """The slot's numerics label during the run."""


@dataclass
class Skipped:
    slot: int
    kind: str
    recipe: str
    reason: str


@dataclass
class DriftReport:
    config: DriftConfig
    reference: Run
    runs: list[Run]
    skipped: list[Skipped]

    def rows(self) -> list[dict]:
        ref = self.reference.losses
        out = []
        for run in self.runs:
            deltas = [a - b for a, b in zip(run.losses, ref)]
            worst = max(run.grad_errors.items(), key=lambda kv: kv[1]) if run.grad_errors else ("-", float("nan"))
            out.append({
                "slot": f"hybrid:{run.slot}", "kind": run.kind, "recipe": run.recipe,
                "final_loss": run.losses[-1], "final_delta": deltas[-1],
                "mean_abs_delta": sum(abs(d) for d in deltas) / len(deltas), "max_abs_delta": max(abs(d) for d in deltas),
                "worst_grad_layer": worst[0], "worst_grad_error": worst[1],
                "overflow": run.overflow, "underflow": run.underflow, "scale_rule": run.scale_rule or "-",
                "rounded": run.rounded_elements, "wall_s": run.wall_s,
            })
        return out

    def table(self) -> str:
        from devices.text_table import table

        c = self.config
        head = (f"drift of {c.model} over {c.steps} steps on {c.rack} (seed {c.seed}, batch {c.batch}x{c.seq_len}); "
                f"float32 CPU reference final loss {self.reference.losses[-1]:.4f} [measured]")
        body = table(
            ["slot", "kind", "recipe", "final loss", "final delta", "mean |delta|", "max |delta|", "worst grad err (layer)",
             "overflow", "underflow", "scale rule", "SR elements", "wall s"],
            [[r["slot"], r["kind"], r["recipe"], f"{r['final_loss']:.4f}", f"{r['final_delta']:+.4f}",
              f"{r['mean_abs_delta']:.4f}", f"{r['max_abs_delta']:.4f}",
              f"{r['worst_grad_error']:.2e} ({r['worst_grad_layer']})", r["overflow"], r["underflow"], r["scale_rule"],
              r["rounded"], f"{r['wall_s']:.1f}"] for r in self.rows()],
            align="lllrrrrlrrlrr")
        lines = [head, body]
        lines += [f"skipped: hybrid:{s.slot} {s.kind} {s.recipe}: {s.reason}" for s in self.skipped]
        return "\n".join(lines)

    def layer_table(self) -> str:
        from devices.text_table import table

        layers = list(self.reference.grad_errors) or sorted({k for r in self.runs for k in r.grad_errors})
        return table(["layer"] + [f"{r.kind}/{r.recipe}" for r in self.runs],
                     [[layer] + [f"{r.grad_errors.get(layer, float('nan')):.2e}" for r in self.runs] for layer in layers],
                     align="l" + "r" * len(self.runs))

    def plot(self, path: str) -> str:
        """PNG: loss curves (float32 reference and every run) and their difference from the reference."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 2]})
        steps = range(1, len(self.reference.losses) + 1)
        top.plot(steps, self.reference.losses, color="black", linewidth=2.4, label="float32 (CPU reference)")
        recipes = list(dict.fromkeys(run.recipe for run in self.runs))
        kinds = list(dict.fromkeys(run.kind for run in self.runs))
        colors = plt.get_cmap("tab10")
        styles = ["-", "--", ":", "-."]
        for run in self.runs:
            look = dict(color=colors(recipes.index(run.recipe) % 10), linestyle=styles[kinds.index(run.kind) % 4],
                        linewidth=1.3)
            top.plot(steps, run.losses, label=f"{run.recipe} on {run.kind}", **look)
            bottom.plot(steps, [a - b for a, b in zip(run.losses, self.reference.losses)], **look)
        bottom.axhline(0, color="black", linewidth=0.8)
        top.set_ylabel("training loss")
        bottom.set_ylabel("loss - float32 loss")
        bottom.set_xlabel("step")
        top.set_title(f"numerics drift: {self.config.model} on {self.config.rack} (measured, device numerics)")
        top.legend(fontsize="small", ncol=2)
        top.grid(alpha=0.3)
        bottom.grid(alpha=0.3)
        fig.tight_layout()
        with atomic_path(path, "path") as tmp:  # a whole picture or none
            fig.savefig(tmp, dpi=110)
        plt.close(fig)
        return path


def _model(name: str, cfg: DriftConfig) -> torch.nn.Module:
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=256, n_positions=cfg.seq_len, n_embd=64, n_layer=2, n_head=2,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                            attn_implementation="eager")
        return GPT2LMHeadModel(config)
    if name == "gpt":
        from interop.models import GPT, GPTConfig

        return GPT(GPTConfig(vocab_size=256, seq_len=cfg.seq_len, dim=64, heads=2, layers=2))
    raise ValueError(f"model: unknown model {name!r}; accepted: {', '.join(MODELS)}")


def _batches(cfg: DriftConfig, vocab: int = 256, count: int = 4) -> list[torch.Tensor]:
    """Learnable synthetic sequences: t[i+1] = (a * t[i] + b) mod vocab, a and b per sequence."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    out = []
    for _ in range(count):
        a = torch.randint(1, 8, (cfg.batch, 1), generator=gen)
        b = torch.randint(0, vocab, (cfg.batch, 1), generator=gen)
        t = torch.randint(0, vocab, (cfg.batch, 1), generator=gen)
        seq = [t]
        for _ in range(cfg.seq_len - 1):
            seq.append((a * seq[-1] + b) % vocab)
        out.append(torch.cat(seq, dim=1))
    return out


def _loss(model, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    logits = getattr(logits, "logits", logits)
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


def _layer_of(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "transformer" and len(parts) > 2 and parts[1] == "h":
        return ".".join(parts[:3])
    if parts[0] == "blocks" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0] if parts[0] != "transformer" else ".".join(parts[:2])


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}


def _grad_errors(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, float]:
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for name, ref in reference.items():
        layer = _layer_of(name)
        got = grads.get(name, torch.zeros_like(ref))
        num[layer] = num.get(layer, 0.0) + float((got - ref).double().pow(2).sum())
        den[layer] = den.get(layer, 0.0) + float(ref.double().pow(2).sum())
    return {layer: math.sqrt(num[layer] / den[layer]) if den[layer] else 0.0 for layer in num}


def _train(model, device, cfg: DriftConfig, batches, reference_grads=None) -> tuple[list[float], dict, dict]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0, foreach=False)
    losses, first_grads, errors = [], {}, {}
    for step in range(cfg.steps):
        tokens = batches[step % len(batches)].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = _loss(model, tokens)
        loss.backward()
        if step == 0:
            first_grads = _grads(model)
            if reference_grads is not None:
                errors = _grad_errors(first_grads, reference_grads)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, first_grads, errors


def supported(recipe: Recipe, kind: str) -> tuple[bool, str, str | None]:
    """(supported natively, why not, the kind's scale rule) for a recipe on a chip kind."""
    caps = devices.capabilities(kind)
    if recipe.stochastic and not caps.rounding.stochastic_outputs("bfloat16"):
        return False, (f"{kind} rounds op results to nearest (stochastic rounding: "
                       f"{caps.rounding.stochastic_scope.replace('_', ' ')})"), None
    if recipe.forward is None:
        return True, "", None
    if recipe.forward.startswith("float8"):
        dtypes = (recipe.forward, recipe.backward)
        missing = [d for d in dtypes if not (caps.support("matmul", d).native or caps.support("scaled_matmul", d).native)]
        if missing:
            return False, f"{kind} has no {', '.join(missing)} GEMM ({caps.support('matmul', missing[0]).reason})", None
        return True, "", "tensor"
    entry = caps.block_format(recipe.forward)
    if entry is None:
        have = ", ".join(b.format for b in caps.block_formats) or "none"
        return False, f"{kind} has no {recipe.forward} (its block formats: {have})", None
    return True, "", entry.scale_rule


def drift(config: DriftConfig | None = None, *, progress=None) -> DriftReport:
    """Train ``config.model`` in float32 on the CPU and on every slot of ``config.rack`` under each recipe."""
    from interop.numerics.slots.mode import counters, set_numerics
    from interop.rack import Rack, current_rack, set_rack

    cfg = config or DriftConfig()
    recipes = [recipe_named(name) for name in cfg.recipes]
    torch.manual_seed(cfg.seed)
    base = _model(cfg.model, cfg)
    batches = _batches(cfg)
    started = time.perf_counter()
    ref_losses, ref_grads, _ = _train(copy.deepcopy(base), "cpu", cfg, batches)
    reference = Run("float32 CPU", "cpu", None, "float32", ref_losses, {k: 0.0 for k in
                    _grad_errors(ref_grads, ref_grads)}, wall_s=time.perf_counter() - started)
    runs, skipped = [], []
    rack = Rack.from_spec(cfg.rack)
    plan = [(d, r) for d in rack.devices for r in recipes]
    previous = current_rack()
    set_rack(rack)
    try:
        for index, (device, recipe) in enumerate(plan):
            ok, why, rule = supported(recipe, device.kind)
            if not ok:
                if cfg.strict:
                    raise ValueError(f"recipe: {recipe.name} is not supported on {device.kind} (hybrid:{device.index}): "
                                     f"{why}; supported recipes there: "
                                     f"{', '.join(r for r in RECIPES if supported(RECIPES[r], device.kind)[0])}")
                skipped.append(Skipped(device.index, device.kind, recipe.name, why))
                continue
            if progress is not None:
                progress(index, len(plan), f"hybrid:{device.index} {device.kind} {recipe.name}")
            runs.append(_run_on_slot(base, batches, cfg, recipe, device, rule, ref_grads, set_numerics, counters))
            gc.collect()  # one run's slot tensors are freed before the next run allocates its own
    finally:
        if previous is not None:
            set_rack(previous)  # the run's tensors stay with the drift rack (racks switch; nothing to free first)
    return DriftReport(cfg, reference, runs, skipped)


def _run_on_slot(base, batches, cfg, recipe: Recipe, device, rule, ref_grads, set_numerics, counters) -> Run:
    slot = device.index
    model = copy.deepcopy(base).to(recipe.params_dtype).to(f"hybrid:{slot}")
    quantizer = None
    if recipe.quantized:
        generator = torch.Generator().manual_seed(cfg.seed + 17 + slot)  # quantization runs on host aliases
        quantizer = Quantizer(recipe, rule if rule != "tensor" else None, generator)
        quantize_gemms(model, quantizer, prefix="transformer.h" if cfg.model == "gpt2" else "blocks")
    stats = counters(slot)
    stats.rounded_ops = stats.rounded_elements = stats.overflow = stats.underflow = 0
    started = time.perf_counter()
    with set_numerics("device", slots=[slot], stochastic_rounding=recipe.stochastic, seed=cfg.seed) as settings:
        label = settings.slots[slot].label
        losses, _, errors = _train(model, f"hybrid:{slot}", cfg, batches, ref_grads)
        rounded, overflow, underflow = stats.rounded_elements, stats.overflow, stats.underflow
    q = quantizer.stats if quantizer is not None else QuantStats()
    del model
    return Run(f"hybrid:{slot}", device.kind, slot, recipe.name, losses, errors, overflow + q.overflow,
               underflow + q.underflow, q.quantized, rounded, rule, time.perf_counter() - started, label)
