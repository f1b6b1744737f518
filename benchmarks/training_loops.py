"""Training loops users run, on an emulated slot against the same loop on the CPU (issue 29's rows).

Each loop's step is timed on the CPU and on ``hybrid:4`` (b200, emulated) in one process, interleaved, and
the median ratio reported; recording on (the default) and off. Run as a script it prints one JSON object,
so :mod:`benchmarks.bench_training_loops` can time an older checkout the same way (``--before``).

Torch runs one intra-op thread here: on a shared 2-core machine, oneDNN's and OpenMP's spinning threads made
the CPU's own times swing by 40x between runs, which no ratio survives.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time

import torch
from torch import nn

SLOT = "hybrid:4"


class LSTMLanguageModel(nn.Module):
    """PyTorch's word_language_model example at a small size: embedding 1000 x 64, a 2-layer LSTM of 128."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        self.rnn = nn.LSTM(64, 128, 2)
        self.head = nn.Linear(128, 1000)

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.embed(tokens), hidden)
        return self.head(out), hidden


class NormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.ReLU(), nn.Linear(512, 256),
                                 nn.LayerNorm(256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


def _lstm(device):
    torch.manual_seed(0)
    model = LSTMLanguageModel().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens, targets = (torch.randint(0, 1000, (35, 8)).to(device) for _ in range(2))

    def step():
        hidden = (torch.zeros(2, 8, 128, device=device), torch.zeros(2, 8, 128, device=device))
        opt.zero_grad()
        logits, _ = model(tokens, hidden)
        nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
    return step


def _mlp(device):
    torch.manual_seed(0)
    model = NormMLP().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x, y = torch.randn(64, 256).to(device), torch.randint(0, 10, (64,)).to(device)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def _gpt2(device):
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=8, vocab_size=2048, n_positions=128)
    model = transformers.GPT2LMHeadModel(config).to(device)
    ids = torch.randint(0, 2048, (4, 128)).to(device)

    def step():
        model.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()
    return step


LOOPS = {
    "lstm": ("2-layer nn.LSTM language model, SGD + clipping (35 x 8 tokens)", _lstm, 1.15),
    "mlp": ("MLP with LayerNorm, AdamW(foreach=False), batch 64", _mlp, 1.15),
    "gpt2": ("transformers GPT-2 (4 layers, 256 wide) forward + backward, 4 x 128 tokens", _gpt2, 1.05),
}


def measure(repeats: int, loops: dict | None = None, add_: bool = True) -> dict:
    """Per loop of ``loops`` (default :data:`LOOPS`): the slot/CPU ratio (recording on), and recording on/off on
    the slot; medians of interleaved steps. ``add_``: also the one-element ``add_`` overhead."""
    import interop

    torch.set_num_threads(1)
    out = {}
    for name, (_, build, _) in (LOOPS if loops is None else loops).items():
        cpu, slot = build("cpu"), build(SLOT)

        def slot_off(step=slot):
            interop.set_recording(False)
            try:
                step()
            finally:
                interop.set_recording(True)
        for step in (cpu, slot, slot_off, cpu, slot):
            step()  # warm: the cost table, the allocator's pools, oneDNN's primitives
        # Records of a key not yet priced wait in the log until 256 are pending; reading the timeline prices
        # them now, so no timed step pays the first pricing of the warm-up's keys.
        interop.timeline()
        times = {"cpu": [], "on": [], "off": []}
        order = [("cpu", cpu), ("on", slot), ("off", slot_off)]
        for i in range(repeats):
            # The order turns each repeat: a step that follows its own model's step finds that model's
            # weights in the cache, and a fixed order gave that edge to "off" every time.
            for key, step in order[i % 3:] + order[:i % 3]:
                start = time.perf_counter()
                step()
                times[key].append(time.perf_counter() - start)
        interop.timeline()
        out[name] = {
            "ratio": statistics.median(on / c for on, c in zip(times["on"], times["cpu"])),
            "recording": statistics.median(on / off for on, off in zip(times["on"], times["off"])),
            "cpu_ms": statistics.median(times["cpu"]) * 1e3,
        }
    if not add_:
        return out
    a, h = torch.ones(1), torch.ones(1, device="hybrid:0")
    inner = 20_000
    for x in (a, h):
        x.add_(1)
    overheads = []
    for i in range(repeats):
        took = {}
        for x in ((a, h) if i % 2 == 0 else (h, a)):  # each side first in every other repeat
            start = time.perf_counter()
            for _ in range(inner):
                x.add_(1)
            took[x.device.type] = time.perf_counter() - start
        overheads.append((took["hybrid"] - took["cpu"]) / inner * 1e6)
    interop.timeline()
    out["add_"] = {"overhead_us": statistics.median(overheads)}
    return out


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 7)))
