"""The torch.distributed backend "hybrid" (collectives.distributed), in real multi-process groups.

Each multi-process test spawns 2-3 processes that rendezvous on a FileStore,
each owning hybrid:<rank>.  Every result is compared with a reference computed
independently from the (deterministic) inputs of all ranks; a worker failure
fails the test with the worker's traceback, and every launch has a deadline.
"""

from __future__ import annotations

import operator
import os
import tempfile
import time
from datetime import timedelta
from functools import reduce

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with Gloo is needed")

TIMEOUT = timedelta(seconds=15)


# -- launching ----------------------------------------------------------------------------------


def _entry(rank, fn, world, path, args):
    torch.set_num_threads(1)  # 2-3 processes share the test machine's cores
    import interop  # noqa: F401  (registers the device and the backend)

    if fn.__name__.startswith("_raw_"):  # builds its own groups
        fn(rank, world, path, *args)
        return
    dist.init_process_group("hybrid", store=dist.FileStore(path, world), rank=rank, world_size=world,
                            timeout=TIMEOUT)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def _start_method() -> str:
    # A fork server imports torch and interop once and forks every worker from
    # that clean state: a fresh interpreter per worker would import torch
    # again each time, most of a test's run time on a small machine.
    if "forkserver" in mp.get_all_start_methods():
        mp.set_forkserver_preload(["torch", "torch.distributed", "interop", "numpy", "pytest"])
        return "forkserver"
    return "spawn"


def launch(fn, world: int, *args, deadline: float = 60.0) -> None:
    """Run ``fn(rank, world, *args)`` in ``world`` new processes under the hybrid backend."""
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(_entry, args=(fn, world, os.path.join(tmp, "store"), args), nprocs=world,
                                 join=False, start_method=_start_method())
        end = time.monotonic() + deadline
        while not ctx.join(timeout=0.5):
            if time.monotonic() > end:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                pytest.fail(f"{fn.__name__}: workers still running after {deadline:.0f} s")


def _dev(rank):
    return torch.device("hybrid", rank)


def _collectives(rank, since=0):
    import interop

    return [r for r in interop.timeline()[since:] if r.kind == "collective"]


def _eq(actual, expected, what):
    actual = actual.cpu() if isinstance(actual, torch.Tensor) else torch.as_tensor(actual)
    expected = torch.as_tensor(expected)
    assert actual.dtype == expected.dtype or expected.dtype == torch.float64, (what, actual.dtype, expected.dtype)
    assert torch.equal(actual, expected.to(actual.dtype)), f"{what}: got {actual}, expected {expected}"


# -- every op against an independent reference --------------------------------------------------


def _x(r, n=6, dtype=torch.float32):
    """Rank r's input: exact in every dtype used here (small integers)."""
    return (torch.arange(n) % 5 + r + 1).to(dtype)


def _ops_worker(rank, world):
    import interop
    from collectives.distributed import ProcessGroupHybrid

    pg = dist.group.WORLD
    assert isinstance(pg, ProcessGroupHybrid) and pg.slot == rank and pg.slots == tuple(range(world))
    assert dist.get_backend() == "hybrid" and torch.hybrid.current_device() == rank
    d = _dev(rank)
    xs = [_x(r).numpy().astype(np.float64) for r in range(world)]

    # all_reduce, every reduce op, against numpy
    refs = {dist.ReduceOp.SUM: sum(xs), dist.ReduceOp.PRODUCT: reduce(operator.mul, xs),
            dist.ReduceOp.MIN: np.minimum.reduce(xs), dist.ReduceOp.MAX: np.maximum.reduce(xs),
            dist.ReduceOp.AVG: sum(xs) / world}
    for op, ref in refs.items():
        t = _x(rank).to(d)
        dist.all_reduce(t, op=op)
        _eq(t, torch.from_numpy(ref).float(), f"all_reduce {op}")
    t = _x(rank).to(d)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    _eq(t, torch.from_numpy(sum(xs) * 0.5).float(), "all_reduce premul_sum")
    t = _x(rank).to(d)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([2.0], device=d)))
    _eq(t, torch.from_numpy(sum(xs) * 2).float(), "all_reduce premul_sum (tensor factor)")
    bits = [np.array([r | 4, r * 3, 7 - r], dtype=np.int32) for r in range(world)]
    for op, fn in [(dist.ReduceOp.BAND, np.bitwise_and), (dist.ReduceOp.BOR, np.bitwise_or),
                   (dist.ReduceOp.BXOR, np.bitwise_xor)]:
        t = torch.from_numpy(bits[rank].copy()).to(d)
        dist.all_reduce(t, op=op)
        _eq(t, torch.from_numpy(fn.reduce(bits)), f"all_reduce {op}")
    for dtype in (torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int8, torch.uint8):
        t = _x(rank, dtype=dtype).to(d)
        dist.all_reduce(t)
        _eq(t, torch.from_numpy(sum(xs)).to(dtype), f"all_reduce sum {dtype}")
    # The one rule (collectives.ops.REDUCE_RULES), as NCCL defines it: integer AVG truncates toward zero,
    # integer PREMUL_SUM multiplies by an integer; bool SUM is a logical or.
    signed = [np.array([-7, 7, 3, -2]) * (r + 1) for r in range(world)]
    t = torch.from_numpy(signed[rank]).int().to(d)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    _eq(t, torch.from_numpy(np.trunc(sum(signed) / world)).int(), "all_reduce avg int32 (truncated)")
    t = torch.from_numpy(signed[rank]).long().to(d)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(3.0))
    _eq(t, torch.from_numpy(sum(signed) * 3).long(), "all_reduce premul_sum int64")
    flags = torch.tensor([rank == 0, False, True]).to(d)
    dist.all_reduce(flags)
    _eq(flags, torch.tensor([True, False, True]), "all_reduce sum bool (or)")
    c = torch.complex(_x(rank), -_x(rank)).to(d)
    dist.all_reduce(c)
    _eq(c, torch.complex(torch.from_numpy(sum(xs)).float(), -torch.from_numpy(sum(xs)).float()), "complex sum")
    cpu = _x(rank)  # CPU tensors pass straight through
    dist.all_reduce(cpu)
    _eq(cpu, torch.from_numpy(sum(xs)).float(), "all_reduce on CPU")
    sparse = torch.sparse_coo_tensor([[rank, 3]], [1.0, float(rank + 1)], (4,))  # CPU sparse: through Gloo
    dist.all_reduce(sparse)
    dense = torch.zeros(4)
    for r in range(world):
        dense += torch.sparse_coo_tensor([[r, 3]], [1.0, float(r + 1)], (4,)).to_dense()
    _eq(sparse.to_dense(), dense, "sparse all_reduce")
    two_d = _x(rank, 12).reshape(3, 4).to(d)
    dist.all_reduce(two_d)
    _eq(two_d, torch.from_numpy(sum(_x(r, 12).numpy().astype(np.float64) for r in range(world))).float()
        .reshape(3, 4), "2-D all_reduce")

    # all_gather (list and single tensor), also of a dtype Gloo has no arithmetic for (moved as bytes)
    for dtype in (torch.float32, torch.int16, torch.float8_e4m3fn):
        outs = [torch.empty(6, dtype=dtype, device=d) for _ in range(world)]
        dist.all_gather(outs, _x(rank, dtype=dtype).to(d))
        for r in range(world):
            _eq(outs[r].view(torch.uint8) if dtype.itemsize == 1 else outs[r],
                _x(r, dtype=dtype).view(torch.uint8) if dtype.itemsize == 1 else _x(r, dtype=dtype),
                f"all_gather {dtype} [{r}]")
    out = torch.empty(world * 6, device=d)
    dist.all_gather_into_tensor(out, _x(rank).to(d))
    _eq(out, torch.cat([_x(r) for r in range(world)]), "all_gather_into_tensor")

    # reduce_scatter (list and single tensor): rank i keeps block i of the sum
    blocks = lambda r: [_x(r) * (j + 1) for j in range(world)]  # noqa: E731
    out = torch.empty(6, device=d)
    dist.reduce_scatter(out, [b.to(d) for b in blocks(rank)])
    _eq(out, sum(blocks(r)[rank] for r in range(world)), "reduce_scatter")
    for op, scale in [(dist.ReduceOp.SUM, 1.0), (dist.ReduceOp.AVG, 1.0 / world)]:
        inp = torch.cat(blocks(rank)).to(d)
        before = inp.clone()
        out = torch.empty(6, device=d)
        dist.reduce_scatter_tensor(out, inp, op=op)
        _eq(out, (sum(blocks(r)[rank].double() for r in range(world)) * scale).float(), f"reduce_scatter_tensor {op}")
        _eq(inp, before.cpu(), "reduce_scatter input untouched")
    inp = torch.cat(blocks(rank)).to(d)
    out = torch.empty(6, device=d)
    dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(3.0))
    _eq(out, sum(blocks(r)[rank] * 3 for r in range(world)), "reduce_scatter_tensor premul_sum")
    _eq(inp, torch.cat(blocks(rank)), "premul_sum leaves the input alone")

    # broadcast, reduce (non-roots untouched), gather, scatter
    root = world - 1
    t = _x(rank).to(d)
    dist.broadcast(t, src=root)
    _eq(t, _x(root), "broadcast")
    t = _x(rank).to(d)
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    _eq(t, torch.from_numpy(np.maximum.reduce(xs)).float() if rank == 0 else _x(rank), "reduce")
    t = _x(rank).to(d)
    dist.reduce(t, dst=0, op=dist.ReduceOp.AVG)
    _eq(t, torch.from_numpy(sum(xs) / world).float() if rank == 0 else _x(rank), "reduce avg")
    gl = [torch.empty(6, device=d) for _ in range(world)] if rank == root else None
    dist.gather(_x(rank).to(d), gl, dst=root)
    if rank == root:
        for r in range(world):
            _eq(gl[r], _x(r), f"gather [{r}]")
    out = torch.empty(6, device=d)
    dist.scatter(out, [(_x(r) * 10).to(d) for r in range(world)] if rank == 0 else None, src=0)
    _eq(out, _x(rank) * 10, "scatter")

    # all_to_all: even, uneven (rows), list
    rows = lambda r: torch.arange(world * 2 * 3, dtype=torch.float32).reshape(world * 2, 3) + 100 * r  # noqa: E731
    out = torch.empty(world * 2, 3, device=d)
    dist.all_to_all_single(out, rows(rank).to(d))
    _eq(out, torch.cat([rows(r)[2 * rank:2 * rank + 2] for r in range(world)]), "all_to_all_single even")
    send = lambda r: [(r + j) % 3 + 1 for j in range(world)]  # noqa: E731  rows r sends to j
    inp = torch.arange(sum(send(rank)) * 2, dtype=torch.int64).reshape(-1, 2) + 1000 * rank
    recv = [send(r)[rank] for r in range(world)]
    out = torch.empty(sum(recv), 2, dtype=torch.int64, device=d)
    dist.all_to_all_single(out, inp.to(d), output_split_sizes=recv, input_split_sizes=send(rank))
    expect = []
    for r in range(world):
        src = torch.arange(sum(send(r)) * 2, dtype=torch.int64).reshape(-1, 2) + 1000 * r
        start = sum(send(r)[:rank])
        expect.append(src[start:start + send(r)[rank]])
    _eq(out, torch.cat(expect), "all_to_all_single uneven")
    outs = [torch.empty(r + 1, device=d) for r in range(world)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(10 * rank + j), device=d) for j in range(world)])
    for r in range(world):
        _eq(outs[r], torch.full((r + 1,), float(10 * r + rank)), f"all_to_all [{r}]")

    # point to point: a ring with isend/irecv, then a receive from any source
    right, left = (rank + 1) % world, (rank - 1) % world
    buf = torch.empty(6, device=d)
    reqs = [dist.isend(_x(rank).to(d), right), dist.irecv(buf, left)]
    for q in reqs:
        q.wait()
    _eq(buf, _x(left), "isend/irecv ring")
    if rank == 0:
        got = torch.empty(6, device=d)
        q = dist.irecv(got)  # any source
        q.wait()
        assert q.source_rank() == 1
        _eq(got, _x(1), "irecv from any source")
        assert dist.recv(got) == 1  # blocking, any source: returns the sender
        _eq(got, _x(1) * 2, "recv from any source")
    elif rank == 1:
        dist.send(_x(1).to(d), 0)
        dist.send((_x(1) * 2).to(d), 0)

    # coalesced: all_reduce, all_gather_into_tensor, reduce_scatter_tensor as one launch each
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [_x(rank, 3).to(d), _x(rank, 5).to(d)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    _eq(ts[0], torch.from_numpy(sum(_x(r, 3).double().numpy() for r in range(world))).float(), "coalesced ar")
    outs = [torch.empty(world * 3, device=d), torch.empty(world * 2, device=d)]
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], _x(rank, 3).to(d))
        dist.all_gather_into_tensor(outs[1], _x(rank, 2).to(d))
    cm.wait()
    _eq(outs[1], torch.cat([_x(r, 2) for r in range(world)]), "coalesced all_gather_into_tensor")
    outs = [torch.empty(2, device=d), torch.empty(1, device=d)]
    with _coalescing_manager(async_ops=True) as cm:
        dist.reduce_scatter_tensor(outs[0], _x(rank, 2 * world).to(d))
        dist.reduce_scatter_tensor(outs[1], _x(rank, world).to(d))
    cm.wait()
    _eq(outs[0], sum(_x(r, 2 * world)[2 * rank:2 * rank + 2] for r in range(world)), "coalesced reduce_scatter")

    # the list form of a coalesced all_gather: output_lists[r][j] is rank r's input j
    lists = [[torch.empty(2, device=d), torch.empty(3, device=d)] for _ in range(world)]
    pg.allgather_coalesced(lists, [_x(rank, 2).to(d), _x(rank, 3).to(d)]).wait()
    for r in range(world):
        _eq(lists[r][0], _x(r, 2), "allgather_coalesced [r][0]")
        _eq(lists[r][1], _x(r, 3), "allgather_coalesced [r][1]")

    # async works: get_future() carries the caller's tensors; is_completed / exception after wait
    t = _x(rank).to(d)
    w = dist.all_reduce(t, async_op=True)
    value = w.get_future().wait()
    assert value[0] is t and w.is_completed() and w.exception() is None
    w = dist.reduce_scatter_tensor(torch.empty(3, device=d), _x(rank, 3 * world).to(d), async_op=True)
    fut = w.get_future()  # a Gloo reduce_scatter has no future of its own
    fut.wait()
    assert w.is_completed()
    dist.barrier()

    # every collective over hybrid tensors is on this rank's timeline, with every slot listed
    recs = _collectives(rank)
    names = {r.op.split(" ")[0] for r in recs}
    for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
                 "all_to_all", "send_recv", "barrier"):
        assert name in names, (name, sorted(names))
    for r in recs:
        assert r.involves(rank) and r.duration_ps >= 0 and r.link.startswith("collective")
        if not r.op.startswith("send_recv"):
            assert r.participants == tuple(range(world)), r
    assert all(r.duration_ps > 0 for r in recs if r.op.startswith("all_reduce"))
    n = len(recs)
    dist.all_reduce(_x(rank))  # CPU only: host traffic, not placed
    assert len(_collectives(rank)) == n
    # The placed price is collectives.plan's, for the group's slots.
    import collectives

    dist.all_reduce(torch.ones(1 << 16, device=d))
    last = _collectives(rank)[-1]
    est = collectives.plan(interop.current_rack().spec, "all_reduce", 1 << 16, 4, list(range(world)),
                           build=False).estimate
    assert last.op == f"all_reduce ({est.algorithm})" and abs(last.duration - est.seconds) < 1e-12


def test_every_op_matches_its_reference_on_2_ranks():
    launch(_ops_worker, 2)


def _three_worker(rank, world):
    # The same reference checks on an odd group size, then sub-groups keep each process's slot.
    _ops_worker(rank, world)
    sub = dist.new_group([0, 2])
    if rank in (0, 2):
        assert sub.slots == (0, 2) and sub.slot == rank
        t = torch.full((4,), float(rank + 1), device=_dev(rank))
        dist.all_reduce(t, group=sub)
        _eq(t, torch.full((4,), 4.0), "sub-group all_reduce")
        rec = _collectives(rank)[-1]
        assert rec.participants == (0, 2)
    # Without peer checks or timeline placement: same results, nothing placed.
    from collectives.distributed import Options

    fast = dist.new_group(pg_options=Options(check_peers=False, timeline=False))
    assert not fast.check_peers and fast.slot == rank
    placed = len(_collectives(rank))
    t = _x(rank).to(_dev(rank))
    dist.all_reduce(t, group=fast)
    _eq(t, sum(_x(r) for r in range(world)), "all_reduce without peer checks")
    buf = torch.empty(6, device=_dev(rank))
    reqs = [dist.isend(_x(rank).to(_dev(rank)), (rank + 1) % world, group=fast),
            dist.irecv(buf, (rank - 1) % world, group=fast)]
    for q in reqs:
        q.wait()
    _eq(buf, _x((rank - 1) % world), "ring without peer checks")
    assert len(_collectives(rank)) == placed
    pair = dist.new_group([1, 2])
    if rank in (1, 2):
        got = torch.empty(3, device=_dev(rank))
        dist.broadcast(got if rank == 1 else torch.full((3,), 7.0, device=_dev(rank)), group_src=1, group=pair)
        if rank == 1:
            _eq(got, torch.full((3,), 7.0), "broadcast from group rank 1")


def test_three_ranks_and_sub_groups():
    launch(_three_worker, 3)


# -- bad input: refused on every rank before anything is written, and the group survives ----------


def _raises(fn, *fragments):
    try:
        fn()
    except (ValueError, TypeError) as e:
        msg = str(e)
        for f in fragments:
            assert f in msg, f"{f!r} not in {msg!r}"
        return msg
    raise AssertionError(f"no error; expected one mentioning {fragments}")


def _errors_worker(rank, world):
    from collectives.distributed import ArgumentError

    d = _dev(rank)
    other = _dev(1 - rank)
    # A tensor on another rank's slot: that rank refuses, the peer learns it and refuses too.
    t = _x(rank).to(d)
    if rank == 0:
        _raises(lambda: dist.all_reduce(torch.ones(3, device=other)), "hybrid:1", "owns hybrid:0")
    else:
        _raises(lambda: dist.all_reduce(t), "rank(s) 0 refused")
    _eq(t, _x(rank), "untouched after a refusal")
    # Mismatched sizes, dtypes, ops, roots, reduce ops across ranks: every rank raises, nothing written.
    t = _x(rank, 6 + rank).to(d)
    _raises(lambda: dist.all_reduce(t), "disagree on the elements", "rank 0: 6", "rank 1: 7")
    _eq(t, _x(rank, 6 + rank), "untouched after a size mismatch")
    t = _x(rank, dtype=torch.float32 if rank == 0 else torch.float64).to(d)
    _raises(lambda: dist.all_reduce(t), "disagree on the dtype", "float32", "float64")
    t = _x(rank).to(d)
    if rank == 0:
        _raises(lambda: dist.all_reduce(t), "different collectives", "all_reduce", "broadcast")
    else:
        _raises(lambda: dist.broadcast(t, 0), "different collectives")
    _raises(lambda: dist.broadcast(t, rank), "disagree on the root")
    _raises(lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX if rank else dist.ReduceOp.MIN), "reduce op")
    _eq(t, _x(rank), "untouched after op mismatches")
    bad = [4, 2] if rank == 0 else [3, 3]  # rank 0 sends 2 rows to rank 1, which expects 3
    _raises(lambda: dist.all_to_all_single(torch.empty(6, device=d), torch.ones(6, device=d),
                                           output_split_sizes=[4 if rank == 0 else 2, 2 if rank == 0 else 4],
                                           input_split_sizes=bad), "split sizes do not match")
    # A reduce op the dtype does not take (collectives.ops.REDUCE_RULES) or Gloo cannot carry, refused before
    # writing; so is a premul_sum factor the dtype cannot hold.
    b = torch.ones(4, dtype=torch.bool, device=d)
    _raises(lambda: dist.all_reduce(b, op=dist.ReduceOp.AVG), "'avg' is not defined on bool")
    _raises(lambda: dist.all_reduce(torch.ones(3, device=d), op=dist.ReduceOp.BAND), "'band' is not defined on float32")
    s = torch.ones(3, dtype=torch.int16, device=d)
    _raises(lambda: dist.all_reduce(s), "cannot reduce int16")
    i = torch.arange(4, dtype=torch.int32, device=d)
    _raises(lambda: dist.all_reduce(i, op=dist._make_nccl_premul_sum(0.5)), "factor", "integer")
    _eq(i, torch.arange(4, dtype=torch.int32), "untouched int tensor")
    _eq(b, torch.ones(4, dtype=torch.bool), "untouched bool tensor")
    # Local shape and layout checks.
    _raises(lambda: dist.all_gather_into_tensor(torch.empty(5, device=d), torch.ones(3, device=d)),
            "2 x 3")
    _raises(lambda: dist.all_reduce(torch.ones(4, 4, device=d).t()), "not contiguous")
    _raises(lambda: dist.all_gather([torch.empty(3, device=d)], torch.ones(3, device=d)), "2 tensors")
    # A receive whose buffer does not fit the message: refused, buffer untouched, sender unaffected.
    if rank == 0:
        dist.send(torch.ones(5, device=d), 1)
        dist.send(torch.ones(4, dtype=torch.int32, device=d), 1)
    else:
        small = torch.zeros(4, device=d)
        _raises(lambda: dist.recv(small, 0), "float32[5]", "float32[4]", "untouched")
        _raises(lambda: dist.recv(small, 0), "int32[4]", "float32[4]")
        _eq(small, torch.zeros(4), "receive buffer untouched")
    # After all that the group is in step: a normal collective still works.
    t = _x(rank).to(d)
    dist.all_reduce(t)
    _eq(t, _x(0) + _x(1), "all_reduce after errors")
    assert issubclass(ArgumentError, ValueError)
    # A collective only one rank calls fails after the group's timeout instead of hanging: the error names the
    # operation and the peer that never called it, and the engine's wait was the group's 2 s.
    short = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    patient = dist.new_group([0, 1], timeout=timedelta(seconds=120))
    if rank == 0:
        with pytest.raises(dist.DistBackendError) as err:
            dist.all_reduce(torch.ones(2, device=d), group=short)
        for f in ("all_reduce (operation #", "rank 1 (hybrid:1)", "has not called this one", "Timed out waiting 2000ms"):
            assert f in str(err.value), (f, str(err.value))
        # A call's own timeout beats the group's: the engine waited the call's 1 s, not the group's 120 s.
        with pytest.raises(dist.DistBackendError) as err:
            dist.barrier(group=patient, timeout=timedelta(seconds=1))
        for f in ("barrier (operation #", "rank 1 (hybrid:1)", "Timed out waiting 1000ms"):
            assert f in str(err.value), (f, str(err.value))
    dist.barrier()


def test_bad_input_is_refused_on_every_rank_without_writing():
    launch(_errors_worker, 2)


# -- a peer that stops: the error names it (rank and slot), within the group's timeout ------------


def _peer_failure_worker(rank, world):
    import signal

    short = timedelta(seconds=1.5)
    d = _dev(rank)

    def fails(group, *fragments):
        # The failed operation, the peer it waited for and why: behaviour, not seconds (the engine's own report of
        # its wait is the group's timeout where the peer is silent).
        with pytest.raises(dist.DistBackendError) as err:
            dist.all_reduce(torch.ones(2, device=d), group=group)
        msg = str(err.value)
        for f in ("all_reduce (operation #", "on rank 0 (hybrid:0) failed") + fragments:
            assert f in msg, f"{f!r} not in {msg!r}"
        return msg

    # Alive, but never calls: named as such (its heartbeat moves, its operation count does not).
    from collectives.distributed import Options

    quiet = dist.new_group([0, 1], timeout=short)
    unchecked = dist.new_group([0, 1], timeout=short, pg_options=Options(check_peers=False))  # the engine's wait
    if rank == 0:
        fails(quiet, "rank 1 (hybrid:1) is alive but has issued 0 operations by its last heartbeat", "not #1",
              "has not called", "waiting 1500ms")
        fails(unchecked, "rank 1 (hybrid:1) is alive but has issued 0 operations by its last heartbeat", "not #1",
              "Timed out waiting 1500ms")
    dist.barrier()
    # Frozen (SIGSTOP): no heartbeat; on this host its process is seen stopped.
    frozen = dist.new_group([0, 1], timeout=short)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # rank 0 resumes us once it has named us
    else:
        msg = fails(frozen, "rank 1 (hybrid:1) stopped responding", "is stopped", "Timed out waiting 1500ms")
        assert "rank 0 (hybrid:0)" in msg  # and where it was seen
        os.kill(frozen._peers.pids[1], signal.SIGCONT)
    dist.barrier()
    # Gone (the process exits): the closed connection is named too.
    gone = dist.new_group([0, 1], timeout=short)
    if rank == 1:
        os._exit(0)
    fails(gone, "rank 1 (hybrid:1) stopped responding", "has exited")


def test_a_peer_that_stops_is_named_within_the_timeout():
    launch(_peer_failure_worker, 2, deadline=45)


def test_group_timeouts():
    from collectives.distributed import DEFAULT_TIMEOUT, Options, group_timeout
    from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout

    assert DEFAULT_TIMEOUT <= (default_pg_nccl_timeout or timedelta(minutes=10)) == timedelta(minutes=10)
    assert group_timeout(default_pg_timeout) == DEFAULT_TIMEOUT  # torch's "none given" for other backends
    assert group_timeout(None) == DEFAULT_TIMEOUT
    assert group_timeout(timedelta(seconds=3)) == timedelta(seconds=3)
    assert group_timeout(default_pg_timeout, Options(timeout=timedelta(minutes=30))) == timedelta(minutes=30)
    with pytest.raises(ValueError, match="Options.timeout"):
        group_timeout(None, Options(timeout=5))


def _raw_creation_worker(rank, world, path):
    from collectives.distributed import Options, create

    store = dist.FileStore(path, world)
    # Two ranks claiming one slot: both refuse, naming the clash.
    _raises(lambda: create(dist.PrefixStore("a/", store), rank, world, TIMEOUT, Options(slot=5, set_device=False)),
            "share a slot", "rank 0 -> hybrid:5", "rank 1 -> hybrid:5")
    # One rank's slot is not in the rack: the other learns it from the exchange (rank 0's reason, not a timeout
    # of its own wait).
    bad = Options(slot=40 if rank == 0 else 1, set_device=False)
    msg = _raises(lambda: create(dist.PrefixStore("b/", store), rank, world, TIMEOUT, bad),
                  *(("has 8 slots",) if rank == 0 else ("rank 0 refused to create the group", "has 8 slots")))
    assert "imed out" not in msg
    # A group is made on every rank together, as ncclCommInitRank is: rank 0 does not return (and so cannot
    # destroy the group, closing sockets a slower peer is still reading) before rank 1's engine has connected.
    def slow_engine(store, rank, size, timeout):
        engine = dist.ProcessGroupGloo(store, rank, size, timeout)
        if rank == 1:
            time.sleep(1.5)
        return engine

    start = time.monotonic()
    pg = create(dist.PrefixStore("c/", store), rank, world, TIMEOUT, Options(slot=rank, set_device=False,
                                                                            gloo=slow_engine))
    waited = time.monotonic() - start
    pg.shutdown()
    if rank == 0:
        assert waited >= 1.4, f"rank 0 returned after {waited:.2f} s, before its peer had connected"


def test_group_creation_refusals_reach_every_rank():
    launch(_raw_creation_worker, 2)


# -- DDP: same parameters as single-process training on the averaged gradient ------------------


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _batch(step, r):
    g = torch.Generator().manual_seed(1000 + 10 * step + r)
    return torch.randn(5, 4, generator=g)


def _ddp_worker(rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps = 3
    # DDP over hybrid slots, on the hybrid backend
    model = _model().to(_dev(rank))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(steps):
        opt.zero_grad()
        ddp(_batch(step, rank).to(_dev(rank))).pow(2).sum().backward()
        opt.step()
    got = [p.detach().cpu() for p in model.parameters()]
    # Reference 1: one process, gradients of every rank's batch averaged as DDP does (each /world, summed).
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(steps):
        grads = []
        for r in range(world):
            ref.zero_grad()
            ref(_batch(step, r)).pow(2).sum().backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] / world for g in grads)
        ref_opt.step()
    for a, b in zip(got, ref.parameters()):
        torch.testing.assert_close(a, b.detach(), rtol=1e-6, atol=1e-7)
    # Reference 2: the same DDP on plain Gloo over CPU tensors.
    gloo = dist.new_group(backend="gloo")
    cpu = _model()
    cddp = DDP(cpu, process_group=gloo)
    copt = torch.optim.SGD(cddp.parameters(), lr=0.05)
    for step in range(steps):
        copt.zero_grad()
        cddp(_batch(step, rank)).pow(2).sum().backward()
        copt.step()
    for a, b in zip(got, cpu.parameters()):
        assert torch.equal(a, b.detach()), "hybrid DDP and Gloo DDP differ"
    names = [r.op.split(" ")[0] for r in _collectives(rank)]
    assert names.count("all_reduce") >= steps and "broadcast" in names, names


def test_ddp_on_hybrid_slots_matches_single_process_and_gloo():
    launch(_ddp_worker, 2)


# -- FSDP2 and DTensor functional collectives --------------------------------------------------


def _fsdp_worker(rank, world, device_type):
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(device_type, (world,))
    dev = _dev(rank) if device_type == "hybrid" else torch.device("cpu")
    t = _x(rank, 4).to(dev)
    _eq(funcol.all_reduce(t, "sum", mesh), sum(_x(r, 4) for r in range(world)), "funcol all_reduce")
    _eq(funcol.all_gather_tensor(t, 0, mesh), torch.cat([_x(r, 4) for r in range(world)]), "funcol all_gather")
    _eq(funcol.reduce_scatter_tensor(t, "sum", 0, mesh), sum(_x(r, 4) for r in range(world))[2 * rank:2 * rank + 2],
        "funcol reduce_scatter")
    _eq(funcol.all_to_all_single(t, None, None, mesh), torch.cat([_x(r, 4)[2 * rank:2 * rank + 2]
                                                                  for r in range(world)]), "funcol all_to_all")
    _eq(funcol.broadcast(t, 1, mesh), _x(1, 4), "funcol broadcast")
    torch.manual_seed(0)
    full = torch.randn(4, 6)
    dt = distribute_tensor(full.to(dev), mesh, [Shard(0)])
    _eq(dt.redistribute(mesh, [Replicate()]).to_local(), full, "DTensor Shard -> Replicate")
    # FSDP2 (fully_shard) for 2 steps = single-process training on the mean loss gradient
    model = _model().to(dev)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(2):
        opt.zero_grad()
        model(_batch(step, rank).to(dev)).pow(2).sum().backward()
        opt.step()
    got = [p.full_tensor().detach().cpu() for p in model.parameters()]
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(2):
        ref_opt.zero_grad()
        (sum(ref(_batch(step, r)).pow(2).sum() for r in range(world)) / world).backward()
        ref_opt.step()
    for a, b in zip(got, ref.parameters()):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
    if device_type == "hybrid":
        names = {r.op.split(" ")[0] for r in _collectives(rank)}
        assert {"all_gather", "reduce_scatter", "all_to_all", "broadcast", "all_reduce"} <= names, names


def test_fsdp2_and_dtensor_on_cpu_through_the_hybrid_backend():
    launch(_fsdp_worker, 2, "cpu")


def test_fsdp2_and_dtensor_on_hybrid_slots():
    launch(_fsdp_worker, 2, "hybrid")


def _dtensor_hybrid_worker(rank, world):
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("hybrid", (world,))
    d = _dev(rank)
    t = _x(rank, 4).to(d)
    out = funcol.all_gather_tensor(t, 0, mesh)
    assert out.device == d
    _eq(out, torch.cat([_x(r, 4) for r in range(world)]), "funcol all_gather on hybrid")
    _eq(funcol.reduce_scatter_tensor(t, "avg", 0, mesh),
        (sum(_x(r, 4) for r in range(world)) / world)[2 * rank:2 * rank + 2], "funcol reduce_scatter avg")
    full = torch.arange(24.).reshape(4, 6)
    dt = distribute_tensor(full.to(d), mesh, [Shard(1)])
    assert dt.to_local().device == d
    _eq(dt.redistribute(mesh, [Replicate()]).to_local(), full, "DTensor on hybrid")
    _eq((dt * 2).sum().full_tensor(), full.sum() * 2, "DTensor reduction")
    assert {"all_gather", "reduce_scatter"} <= {r.op.split(" ")[0] for r in _collectives(rank)}


def test_dtensor_and_functional_collectives_on_hybrid_slots():
    launch(_dtensor_hybrid_worker, 2)


# -- one modelled clock across processes --------------------------------------------------------


def _clock(rank):
    from interop.session import current_timeline

    return current_timeline().stream_clock(rank)


def _busy(d, n=6):
    """Modelled work on ``d``'s slot (256 x 256 matmuls): what makes a rank slow."""
    a = torch.full((256, 256), 1e-3, device=d)
    for _ in range(n):
        a = a @ a
    return a


def _last(rank, name):
    import interop

    return [r for r in interop.timeline() if r.kind == "collective" and r.op.startswith(name)][-1]


def _clock_worker(rank, world, check_peers):
    import tempfile

    import interop
    from collectives.distributed import Options

    group = dist.group.WORLD if check_peers else dist.new_group(pg_options=Options(check_peers=False))
    d = _dev(rank)
    interop.reset_timeline()
    # Rank 0 is slow (modelled work first); the collective starts on every rank when rank 0 arrives.
    x = torch.ones(1 << 12, device=d)
    if rank == 0:
        _busy(d)
    arrival = _clock(rank)
    dist.all_reduce(x, group=group)
    rec = _last(rank, "all_reduce")
    arrivals = [None] * world
    dist.all_gather_object(arrivals, arrival)  # CPU objects: host traffic, not placed
    assert arrivals[0] > arrivals[1] > -1, arrivals
    assert rec.start_ps == arrivals[0], (rank, rec.start_ps, arrivals)
    assert _clock(rank) == rec.end_ps  # the collective held this rank's stream until it ended
    seen = [None] * world
    dist.all_gather_object(seen, (rec.op, rec.start_ps, rec.duration_ps, rec.participants))
    assert seen[0] == seen[1], seen
    y = x * 2
    op = [r for r in interop.timeline() if r.kind == "op"][-1]
    assert op.start_ps >= rec.end_ps

    # A transfer starts when the sender's data is ready; only the receiver's stream waits for its arrival.
    for slow in (0, 1):
        if rank == slow:
            _busy(d)
        if rank == 0:
            ready = _clock(0)
            dist.send(y, 1, group=group)
            sent = _last(0, "send_recv")
            assert sent.start_ps >= ready and _clock(0) == ready  # the sender's stream does not wait
        else:
            before = _clock(1)
            buf = torch.empty_like(y)
            dist.recv(buf, 0, group=group)
            sent = _last(1, "send_recv")
            assert _clock(1) == max(before, sent.end_ps), (before, sent)
            _eq(buf, torch.full((1 << 12,), 4.0), "received payload")
        seen = [None] * world
        dist.all_gather_object(seen, (sent.start_ps, sent.duration_ps, sent.participants))
        assert seen[0] == seen[1] and seen[0][2] == (0, 1), seen
        if slow == 1:  # the receiver arrived after the data: it did not wait
            assert seen[0][0] + seen[0][1] < _clock(1) if rank == 1 else True

    # One merged report and trace, on rank 0: every rank's ops, each collective once, one clock.
    out = tempfile.mkdtemp() if rank == 0 else None
    report = interop.report(all_ranks=True)
    path = interop.export_trace(os.path.join(out, "trace.json") if out else "unused", all_ranks=True)
    if rank != 0:
        assert report is None and path is None
        return
    import json

    assert report.slot(0).busy_s > report.slot(1).busy_s > 0
    events = json.load(open(path))["traceEvents"]
    ar = [e for e in events if e.get("ph") == "X" and e["name"].startswith("all_reduce") and e["cat"] == "collective"]
    assert sorted(e["pid"] for e in ar) == [0, 1] and len({e["ts"] for e in ar}) == 1  # once, on both slots
    sends = [e for e in events if e.get("ph") == "X" and e["name"].startswith("send_recv") and e["cat"] == "collective"]
    assert len(sends) == 2 * 2  # two transfers, each drawn on its two slots
    assert {e["pid"] for e in events if e.get("ph") == "X" and e["cat"] == "op"} == {0, 1}


@pytest.mark.parametrize("check_peers", [True, False])
def test_one_modelled_clock_across_processes(check_peers):
    launch(_clock_worker, 2, check_peers)


# -- in-process pieces: registration, engine choice, checks, slot options ------------------------


def test_backend_is_registered_on_import():
    import interop  # noqa: F401

    assert "hybrid" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["hybrid"] == ["hybrid", "cpu"]
    assert dist.Backend.default_device_backend_map["hybrid"] == "hybrid"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # not taken over


def test_single_rank_group_in_process():
    import interop
    from collectives.distributed import Options, create

    store = dist.HashStore()
    pg = create(store, 0, 1, timedelta(seconds=5), Options(slot=3, set_device=False))
    assert pg.slot == 3 and pg.slots == (3,) and pg.engine == "gloo" and pg.name() == "hybrid"
    t = torch.arange(5., device="hybrid:3")
    since = len(interop.timeline())
    work = pg.allreduce([t])
    work.wait(timedelta(seconds=5))
    assert work.is_completed() and work.exception() is None and work.get_future().value()[0] is t
    _eq(t, torch.arange(5.), "allreduce of one rank")
    rec = [r for r in interop.timeline()[since:] if r.kind == "collective"]
    assert len(rec) == 1 and rec[0].participants == (3,)
    with pytest.raises(ValueError, match="owns hybrid:3"):
        pg.allreduce([torch.ones(2, device="hybrid:2")])
    with pytest.raises(ValueError, match="rack 'fusion-default' has 8 slots"):
        create(dist.HashStore(), 0, 1, timedelta(seconds=5), Options(slot=8, set_device=False))
    pg.shutdown()


def test_engine_choice():
    from collectives.distributed._engine import choose
    from devices import Backing

    def b(*texts):  # the chooser takes parsed backings (None: a rank without a slot)
        return [None if t == "host" else Backing.parse(t) for t in texts]

    assert choose(b("emulated", "emulated"), ["a", "a"], "auto", True) == "gloo"
    assert choose(b("cuda:0", "cuda:1"), ["a", "a"], "auto", True) == "nccl"
    assert choose(b("cuda:0", "cuda:0"), ["a", "a"], "auto", True) == "gloo"  # one GPU shared: NCCL refuses
    assert choose(b("cuda:0", "cuda:0"), ["a", "b"], "auto", True) == "nccl"  # two hosts
    assert choose(b("cuda:0", "emulated"), ["a", "a"], "auto", True) == "gloo"  # mixed: staged through host
    assert choose(b("cuda:0", "cuda:1"), ["a", "a"], "auto", False) == "gloo"
    assert choose(b("cuda:0", "host"), ["a", "a"], "auto", True) == "gloo"
    with pytest.raises(ValueError, match="real GPU"):
        choose(b("emulated", "cuda:0"), ["a", "a"], "nccl", True)
    with pytest.raises(ValueError, match="engine"):
        choose(b("emulated"), ["a"], "mpi", True)


def test_reduce_checks():
    from collectives.distributed._checks import ArgumentError, check_reduce, reduce_spec

    assert reduce_spec(dist.ReduceOp.SUM) == ("sum", None)
    assert reduce_spec(dist._make_nccl_premul_sum(0.25)) == ("premul_sum", 0.25)
    assert reduce_spec(dist.ReduceOp.AVG) == ("avg", None)
    check_reduce("x", "bxor", torch.bool)
    check_reduce("x", "sum", torch.complex64)
    assert check_reduce("x", "avg", torch.int64) is None  # NCCL's integer average
    assert check_reduce("x", "premul_sum", torch.int32, 2.0) == 2 and isinstance(check_reduce(
        "x", "premul_sum", torch.float32, torch.tensor([0.5])), float)
    for name, dtype, msg in [("avg", torch.bool, "not defined on bool"), ("band", torch.bfloat16, "not defined"),
                             ("max", torch.complex64, "complex"), ("sum", torch.uint16, "cannot reduce"),
                             ("sum", torch.float8_e5m2, "cannot reduce"), ("premul_sum", torch.float32, "factor")]:
        with pytest.raises((ArgumentError, TypeError), match=msg):
            check_reduce("x", name, dtype)
    with pytest.raises(TypeError, match="integer factor"):
        check_reduce("x", "premul_sum", torch.int32, 0.5)


def test_descriptors_agree_and_disagree():
    from collectives.distributed._checks import Call, describe, disagreement

    a = Call("all_reduce", torch.float32, "sum", count=4, itemsize=4)
    rows = torch.stack([describe(a, None, 2), describe(a, None, 2)])
    assert disagreement(rows, 0, a) is None
    b = Call("all_to_all", torch.float32, send=(1, 2), recv=(1, 3))
    c = Call("all_to_all", torch.float32, send=(3, 1), recv=(2, 1))
    assert disagreement(torch.stack([describe(b, None, 2), describe(c, None, 2)]), 0, b) is None
    c2 = Call("all_to_all", torch.float32, send=(2, 1), recv=(2, 1))
    assert "rank 1 sends 2 elements to rank 0" in disagreement(
        torch.stack([describe(b, None, 2), describe(c2, None, 2)]), 0, b)
    err = torch.stack([describe(a, None, 2), describe(None, ValueError("x"), 2)])
    assert "rank(s) 1 refused" in disagreement(err, 0, a)
    # One vocabulary (collectives.ops.OPS): a coalesced call is told apart from a plain one.
    co = Call("all_reduce", torch.float32, "sum", count=4, itemsize=4, sizes=(1, 3), coalesced=True)
    assert "rank 1: all_reduce (coalesced)" in disagreement(torch.stack([describe(a, None, 2),
                                                                          describe(co, None, 2)]), 0, a)


def test_slot_options(monkeypatch):
    import collectives.distributed as cd

    assert cd._resolve_slot(cd.Options(slot=5), 0, None) == 5
    assert cd._resolve_slot(cd.Options(slot="rank"), 1, [4, 6]) == 6
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert cd._resolve_slot(cd.Options(slot="local_rank"), 0, None) == 2
    monkeypatch.delenv("LOCAL_RANK")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        cd._resolve_slot(cd.Options(slot="local_rank"), 0, None)
    with pytest.raises(ValueError, match="Options.slot"):
        cd._resolve_slot(cd.Options(slot=1.5), 0, None)


def test_work_helpers():
    from collectives.distributed._work import combined, finished

    w = finished("x", 0, [torch.ones(1)])
    assert w.wait() and w.is_completed() and w.exception() is None and w.is_success()
    both = combined("c", 0, [w, finished("y", 0, [torch.zeros(1)])])
    assert both.wait(timedelta(seconds=1)) and len(both.get_future().value()) == 2

