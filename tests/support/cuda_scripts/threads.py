"""Threads driving devices as servers, prefetchers and nn.DataParallel do, against the same work done sequentially
on the CPU. No hybrid-interop in it: written for CUDA (run it under `hybrid run`); tests import it and call
`threaded("hybrid", ...)` to drive slots without the CUDA layer.

Each of N workers trains a small model with dropout (plain, feature and alpha dropout) on a device of its own,
its device's generator seeded with a seed of its own. Its batches come from a prefetch thread of its own, which
copies them to the device on a side stream and hands each over with an event that the worker's stream waits on;
all threads start together. The sequential run trains the same models on the same batches on the CPU, the CPU
generator seeded with each worker's seed before its model: each loss and parameter must be equal to the bit.
A prefetch thread also reports what a new thread sees: its current device and where `.cuda()` puts a tensor.

python threads.py --workers 4 --steps 3 --out out.json
"""

import argparse
import json
import queue
import threading

import torch
import torch.nn.functional as F
from torch import nn

SEED = 200
"""Worker i's device generator (and, in the sequential run, the CPU generator) is seeded with SEED + i."""
BATCH = 16


class Net(nn.Module):
    """A classifier head with every dropout form torch dispatches differently."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 4)
        self.drop, self.feature, self.alpha = nn.Dropout(0.25), nn.Dropout1d(0.25), nn.AlphaDropout(0.25)

    def forward(self, x):
        h = self.drop(F.relu(self.fc1(x)))
        h = self.feature(h.view(-1, 4, 8)).view(-1, 32)
        return self.fc2(self.alpha(torch.tanh(h)))


def build(index: int) -> Net:
    torch.manual_seed(100 + index)
    return Net()


def batches(index: int, steps: int):
    g = torch.Generator().manual_seed(1000 + index)
    return [(torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(steps)]


def train(model, source) -> dict:
    losses = []
    for x, y in source:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():  # plain SGD by hand: torch.optim's first use imports torch._dynamo (seconds)
            for p in model.parameters():
                p.sub_(p.grad, alpha=0.1)
                p.grad = None
        losses.append(loss.item())
    return {"losses": losses, "params": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}


def sequential_cpu(workers: int, steps: int) -> list:
    out = []
    for i in range(workers):
        model = build(i)
        torch.manual_seed(SEED + i)
        out.append(train(model, batches(i, steps)))
    return out


def threaded(device_type: str, workers: int, steps: int, together: bool = True) -> dict:
    """The workers on devices 0..workers-1 of `device_type` ("cuda", or "hybrid" for slots directly), all at
    once (or, with `together` False, one worker and its prefetcher after another)."""
    module = getattr(torch, device_type)
    models = [build(i) for i in range(workers)]
    cpu_state = torch.get_rng_state()
    barriers = [threading.Barrier(2 * workers)] * workers if together else [threading.Barrier(2) for _ in range(workers)]
    results, fresh, errors = [None] * workers, [None] * workers, []

    def guarded(fn, *args):
        def body():
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)
                for barrier in barriers:
                    barrier.abort()
        return threading.Thread(target=body)

    def prefetch(i, handoff):
        # A new thread: on device 0, as CUDA starts every thread.
        landed = torch.zeros(1).to(device_type).device
        fresh[i] = {"current_device": module.current_device(), "lands_on": module.get_device_name(landed)}
        barriers[i].wait()
        device = torch.device(device_type, i)
        with module.device(i):
            side = module.Stream()
            for x, y in batches(i, steps):
                with module.stream(side):
                    pair = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                ready = module.Event()
                ready.record(side)
                handoff.put((*pair, ready))

    def work(i, handoff):
        module.set_device(i)
        module.manual_seed(SEED + i)
        model = models[i].to(device_type)
        barriers[i].wait()

        def source():
            for _ in range(steps):
                x, y, ready = handoff.get(timeout=60)
                module.current_stream().wait_event(ready)
                yield x, y

        results[i] = train(model, source())

    pairs = []
    for i in range(workers):
        handoff = queue.Queue()
        pairs.append([guarded(prefetch, i, handoff), guarded(work, i, handoff)])
    for batch in [sum(pairs, [])] if together else pairs:
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    if errors:
        raise errors[0]
    return {"workers": results, "fresh_thread": fresh, "device_names": [module.get_device_name(i) for i in range(workers)],
            "cpu_generator_unmoved": torch.equal(cpu_state, torch.get_rng_state())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = {"cpu": sequential_cpu(args.workers, args.steps)}
    if torch.cuda.is_available():
        out["devices"] = threaded("cuda", args.workers, args.steps)
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
