"""Measured torch.distributed all_reduce across processes on this machine: plain Gloo, and the "hybrid" backend.

Both spawn ``world_size`` processes that rendezvous on a FileStore and
all-reduce (SUM) a float32 tensor of ``nbytes`` bytes; ``repeats`` times, all
ranks line up on a barrier, then each times its all_reduce (wall clock,
``time.perf_counter``).  A repeat's figure is the slowest rank's time (the
collective is done when the last rank is); with ``iterations`` > 1 each rank
times that many back-to-back calls and contributes their median.  One
untimed warm-up call comes first (connection set-up, first-touch of pages).

* :func:`gloo_allreduce_seconds`: CPU tensors on ``init_process_group("gloo")``.
* :func:`hybrid_backend_allreduce_seconds`: tensors on ``hybrid:<rank>`` on
  ``init_process_group("hybrid")`` (collectives.distributed): the same Gloo
  underneath plus the backend's checks, peer descriptor exchange and timeline
  placement, so the difference is the backend's overhead.

The processes are started with ``spawn``: a script calling these must guard
its entry point with ``if __name__ == "__main__":``.

* :func:`gloo_interleaved`: the Gloo measurement taken in turns with a measurement of this process (the
  in-process collectives' benchmark puts its own all_reduce there), so both sides see the same machine:
  the workers stay up between repeats, blocked on the store, while this process measures.

Every timed all_reduce starts from fresh inputs (the tensor is refilled, untimed, before each call), on
both sides of a comparison.

These are measurements (seconds of wall time), not modelled figures.  Run
``python -m benchmarks.gloo_baseline [world_size] [MiB] [repeats]`` to print both.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from typing import Callable

COMMAND = "python -m benchmarks.gloo_baseline"


def _worker(rank: int, world: int, store_path: str, out_path: str, backend: str, nbytes: int, repeats: int,
            iterations: int, rack: str | None) -> None:
    import torch
    import torch.distributed as dist

    # Several processes share the cores: keep each to one intra-op thread so
    # that the measurement is the collective, not oversubscription.
    torch.set_num_threads(1)
    if backend == "hybrid":
        import interop

        if rack is not None:
            interop.set_rack(rack)
        device = torch.device("hybrid", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, store=dist.FileStore(store_path, world), rank=rank, world_size=world,
                            timeout=timedelta(minutes=5))
    try:
        x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        dist.all_reduce(x)  # warm-up
        mine = []
        for _ in range(repeats):
            samples = []
            for _ in range(iterations):
                x.fill_(1.0)  # fresh inputs, untimed
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(x)
                samples.append(time.perf_counter() - start)
            mine.append(statistics.median(samples))
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            slowest = [max(per_rank[i] for per_rank in everyone) for i in range(repeats)]
            with open(out_path, "w") as f:
                json.dump(slowest, f)
    finally:
        dist.destroy_process_group()


def _measure(backend: str, world_size: int, nbytes: int, repeats: int, iterations: int,
             rack: str | None) -> list[float]:
    import torch.multiprocessing as mp

    if world_size < 1 or repeats < 1 or iterations < 1 or nbytes < 4:
        raise ValueError("world_size, repeats and iterations must be >= 1 and nbytes >= 4")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "seconds.json")
        mp.spawn(_worker, args=(world_size, os.path.join(tmp, "store"), out, backend, nbytes, repeats, iterations,
                                rack), nprocs=world_size, join=True)
        with open(out) as f:
            return [float(s) for s in json.load(f)]


def gloo_allreduce_seconds(world_size: int = 8, nbytes: int = 64 << 20, repeats: int = 5, *,
                           iterations: int = 1) -> list[float]:
    """Measured seconds of a Gloo all_reduce (float32, SUM) of ``nbytes`` over ``world_size`` CPU processes.

    One figure per repeat: the slowest rank's time (median of ``iterations``
    back-to-back calls per rank).  Spawns the processes (FileStore rendezvous).
    """
    return _measure("gloo", world_size, nbytes, repeats, iterations, None)


def hybrid_backend_allreduce_seconds(world_size: int = 8, nbytes: int = 64 << 20, repeats: int = 5, *,
                                     iterations: int = 1, rack: str | None = None) -> list[float]:
    """The same measurement through the ``hybrid`` backend, rank r's tensor on ``hybrid:r``.

    ``rack``: a rack spec to install in every process (default: the embedded
    rack; it must have ``world_size`` slots).
    """
    return _measure("hybrid", world_size, nbytes, repeats, iterations, rack)


def _turn_worker(rank: int, world: int, port: int, nbytes: int, repeats: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(minutes=10))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=world,
                            timeout=timedelta(minutes=10))
    try:
        x = torch.empty(max(nbytes // 4, 1), dtype=torch.float32)
        x.fill_(1.0)
        dist.all_reduce(x)  # warm-up
        store.set(f"ready/{rank}", "1")
        for k in range(repeats):
            store.get(f"go/{k}")  # blocks (no CPU) while the other side measures
            x.fill_(1.0)  # fresh inputs, untimed
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            elapsed = time.perf_counter() - start
            wrong = int((x != world).sum()) if k == repeats - 1 else 0
            store.set(f"t/{k}/{rank}", json.dumps([elapsed, wrong]))
    finally:
        dist.destroy_process_group()


def gloo_interleaved(mine: Callable[[], float], world_size: int = 8, nbytes: int = 64 << 20, repeats: int = 7
                     ) -> tuple[list[float], list[float], int]:
    """Gloo all_reduce (float32, SUM, ``world_size`` CPU processes) and ``mine()`` measured in turns.

    Repeat k runs ``mine()`` (which returns its own measured seconds) in this process, then one Gloo
    all_reduce (fresh inputs, all ranks released together, the slowest rank's time).  Returns (Gloo seconds,
    ``mine()`` seconds, wrong elements in Gloo's last result).
    """
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if world_size < 1 or repeats < 1 or nbytes < 4:
        raise ValueError("world_size and repeats must be >= 1 and nbytes >= 4")
    store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(minutes=10), wait_for_workers=False)
    ctx = mp.start_processes(_turn_worker, args=(world_size, store.port, nbytes, repeats), nprocs=world_size,
                             join=False, start_method="spawn")
    gloo, ours, wrong = [], [], 0
    try:
        store.wait([f"ready/{r}" for r in range(world_size)])
        for k in range(repeats):
            ours.append(mine())
            store.set(f"go/{k}", "1")
            keys = [f"t/{k}/{r}" for r in range(world_size)]
            store.wait(keys)
            results = [json.loads(store.get(key)) for key in keys]
            gloo.append(max(seconds for seconds, _ in results))
            wrong += sum(w for _, w in results)
    finally:
        while not ctx.join():
            pass
    return gloo, ours, wrong


def main(argv: list[str] | None = None) -> None:
    """Print both measurements: ``[world_size] [MiB] [repeats]``."""
    args = (argv if argv is not None else sys.argv[1:]) + [None] * 3
    world = int(args[0] or 8)
    nbytes = int(float(args[1] or 64) * (1 << 20))
    repeats = int(args[2] or 5)
    for name, fn in [("gloo", gloo_allreduce_seconds), ("hybrid backend", hybrid_backend_allreduce_seconds)]:
        seconds = fn(world, nbytes, repeats)
        ms = ", ".join(f"{s * 1e3:.1f}" for s in seconds)
        print(f"{name}: all_reduce {nbytes / (1 << 20):g} MiB x {world} processes: median "
              f"{statistics.median(seconds) * 1e3:.1f} ms (measured; repeats {ms} ms)", flush=True)


if __name__ == "__main__":
    main()
