"""The hybrid device's own overhead over the CPU it emulates on.

Wall time of a GPT-style model's forward + backward on an emulated slot against the same on the CPU
(target: ratio <= 1.10). The per-op overhead of a one-element ``add_`` is :mod:`benchmarks.bench_training_loops`'s, with the
training loops and the checkout before. Measured with the timeline recording (its default), so the figures
include the cost of placing every op on the modelled timeline.
"""

from __future__ import annotations

import copy

import torch

from benchmarks.harness import Section, interleaved, median, spread, write_section

import interop  # noqa: F401  (registers the hybrid device)
from interop.models import GPT, GPTConfig, token_batch

COMMAND = "python -m benchmarks device"
BENCH_MODEL = GPTConfig(vocab_size=2048, seq_len=128, dim=256, heads=8, layers=4)
BATCH = 8


def fwd_bwd(model: torch.nn.Module, idx: torch.Tensor, tgt: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    logits = model(idx)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()


def run(repeats: int = 7, write: bool = True) -> Section:
    section = Section("device", "hybrid device overhead over the CPU (measured)", COMMAND)
    torch.manual_seed(0)
    model = GPT(BENCH_MODEL)
    idx, tgt = token_batch(BENCH_MODEL, BATCH)
    cpu_model = copy.deepcopy(model)
    hyb_model = copy.deepcopy(model).to("hybrid:4")
    h_idx, h_tgt = idx.to("hybrid:4"), tgt.to("hybrid:4")

    samples = interleaved(
        {"cpu": lambda: fwd_bwd(cpu_model, idx, tgt), "hybrid": lambda: fwd_bwd(hyb_model, h_idx, h_tgt)},
        repeats=repeats, warmup=2,
    )
    ratios = [h / c for h, c in zip(samples["hybrid"], samples["cpu"])]
    ratio = median(ratios)
    params = sum(p.numel() for p in model.parameters())
    section.add(
        "GPT fwd+bwd wall time, hybrid:4 (b200, emulated) / CPU", f"{ratio:.3f}x", "<= 1.10", ratio <= 1.10,
        f"median of {repeats} interleaved pairs; CPU {median(samples['cpu']) * 1e3:.1f} ms "
        f"({spread([s * 1e3 for s in samples['cpu']])} ms), hybrid {median(samples['hybrid']) * 1e3:.1f} ms; "
        f"model {params / 1e6:.1f} M params, batch {BATCH}x{BENCH_MODEL.seq_len}",
    )

    section.notes.append("Timeline recording on (the default); every op is also appended to the modelled timeline.")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
