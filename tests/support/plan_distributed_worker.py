"""One rank of tests/interop/live/test_plan_distributed.py (run under torchrun): the same small plan on 4 slots, exported to
torch.distributed.pipelining (+ FSDP2 or parallelize_module) on the "hybrid" backend. Writes the parameters, how
rank 0 holds them, each step's modelled seconds and the merged trace."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F


def main(out: str, variant: str) -> None:
    torch.set_num_threads(1)
    import interop
    from tests.support.plan_distributed_case import CFG, batches, layout_and_blocks, optimizer

    interop.set_rack(interop.Rack.from_spec("trn3:2+h100:2", backing="emulated"))
    dist.init_process_group("hybrid")
    from interop.models import GPT
    from interop.live.distributed import DistributedPlanRunner

    torch.manual_seed(0)
    model = GPT(CFG)
    layout, blocks = layout_and_blocks(model, variant)
    runner = DistributedPlanRunner(layout, blocks, model, optimizer)
    losses, seconds = [], []
    for x, y in batches():
        loss = runner.step(x, y, lambda o, t: F.cross_entropy(o.flatten(0, 1), t.flatten()))
        losses.append(None if loss is None else float(loss))
        seconds.append(runner.last_step.modelled_seconds)
    state = runner.state_dict()
    trace = runner.write_trace(os.path.join(out, "trace.json"))
    from torch.distributed.tensor import DTensor

    # How this rank holds its parameters (DTensor shards under tensor parallelism / FSDP2).
    held = {n: (str(p.placements), tuple(p.to_local().shape)) for m in runner.modules
            for n, p in m.named_parameters() if isinstance(p, DTensor)}
    if dist.get_rank() == 0:
        torch.save({"state": state, "trace": trace, "seconds": seconds, "held": held},
                   os.path.join(out, "result.pt"))
    if runner.last:
        torch.save(losses, os.path.join(out, f"losses{dist.get_rank()}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
