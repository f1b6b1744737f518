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
            dist.barrier()
            samples = []
            for _ in range(iterations):
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
