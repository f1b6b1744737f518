"""Threads as CUDA has them: the current device and stream per thread, a generator per device, many threads
driving many slots at once. The standing stress test (tests/support/cuda_scripts/threads.py): N threads train
on N slots of mixed kinds with dropout seeded per device, each fed by a prefetch thread over a side stream and
an event, without and with the CUDA layer; every loss and parameter equals the same work done sequentially
on the CPU, to the bit (the same CPU kernels on the same bytes, the masks from identically seeded generators)."""

from __future__ import annotations

import collections
import os
import sys
import threading

import pytest
import torch

import interop
from interop import _C
from tests.interop.cuda_layer.test_cuda_layer import hybrid, load, script

sys.path.insert(0, os.path.dirname(script("threads.py")))
import threads as workload  # noqa: E402  (tests/support/cuda_scripts/threads.py)

WORKERS, STEPS = 4, 3


def _per_slot(records):
    """Each slot's ops in order and the copies to it counted by stream role: what the timeline must keep per
    slot whatever the threads' interleaving (copies to hybrid:0 come from every new thread, in any order; stream
    ids are handed out in creation order, so only the role counts)."""
    out = collections.defaultdict(list)
    copies = collections.Counter()
    for r in records:
        if r.kind == "op":
            out[r.slot].append(r.op)
        elif r.kind == "copy":
            copies[(r.slot, r.peer, "default" if r.stream == 0 else "side")] += 1
    return dict(out), copies


def test_threads_on_mixed_slots_equal_the_cpu_run_and_keep_every_record(use_rack, fresh_timeline):
    use_rack("trn4:2+b200:2")
    reference = workload.sequential_cpu(WORKERS, STEPS)
    interop.reset_timeline()
    together = workload.threaded("hybrid", WORKERS, STEPS)
    concurrent, concurrent_copies = _per_slot(interop.timeline())
    interop.reset_timeline()
    one_by_one = workload.threaded("hybrid", WORKERS, STEPS, together=False)
    alone, alone_copies = _per_slot(interop.timeline())

    assert together["workers"] == reference and one_by_one["workers"] == reference
    assert together["cpu_generator_unmoved"]
    assert together["device_names"][:2] != together["device_names"][2:]  # two kinds of chip
    # Each prefetch thread is new: on hybrid:0 (CUDA's device 0), until it chooses its worker's slot.
    assert together["fresh_thread"] == [{"current_device": 0, "lands_on": torch.hybrid.get_device_name(0)}] * WORKERS
    # Concurrent threads lose and mix no record: each slot's ops and copies are those of its worker alone.
    assert concurrent == alone and concurrent_copies == alone_copies
    for slot in range(WORKERS):
        assert len(concurrent[slot]) > 10 * STEPS
        assert concurrent_copies[(-1, slot, "side")] == 2 * STEPS  # the prefetcher's batches, on its side stream


def test_threads_under_the_cuda_layer_equal_the_cpu_run(tmp_path):
    # cuda:0 is a B200 slot, and the four devices alternate B200 and Trainium slots.
    layer = hybrid("--map", "0=hybrid:4,1=hybrid:0,2=hybrid:5,3=hybrid:1", script("threads.py"),
                   "--workers", str(WORKERS), "--steps", str(STEPS), "--out", "out.json", cwd=tmp_path)
    assert layer.returncode == 0, layer.stderr[-3000:]
    out = load(tmp_path / "out.json")
    got = out["devices"]
    assert got["workers"] == out["cpu"]
    assert got["cpu_generator_unmoved"]
    assert [n.split()[0] for n in got["device_names"]] == ["NVIDIA", "AWS", "NVIDIA", "AWS"]
    # A new thread is on cuda:0 (its B200 slot): torch.cuda.current_device() answers 0, .cuda() lands there.
    assert all(f == {"current_device": 0, "lands_on": got["device_names"][0]} for f in got["fresh_thread"])


def _in_new_thread(fn, *args):
    result, errors = [], []

    def body():
        try:
            result.append(fn(*args))
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread
            errors.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return result[0]


def test_a_thread_that_chose_no_slot_is_on_the_default_slot():
    torch.hybrid.set_device(torch.hybrid.current_device())  # this thread chooses: the default moves below
    assert _C._default_slot() == 0
    assert _in_new_thread(lambda: (torch.hybrid.current_device(), torch.ones(1).to("hybrid").device.index)) == (0, 0)
    chose = threading.Event()
    moved = threading.Event()
    seen = {}

    def chooses():
        torch.hybrid.set_device(2)
        chose.set()
        moved.wait(10)
        seen["chose"] = torch.hybrid.current_device()

    ran = threading.Event()

    def never_chooses():
        torch.ones(1, device="hybrid:0").add_(1)  # an op on the default slot: its device guard chooses nothing
        ran.set()
        chose.wait(10)
        moved.wait(10)
        seen["default"] = torch.hybrid.current_device()

    workers = [threading.Thread(target=chooses), threading.Thread(target=never_chooses)]
    for t in workers:
        t.start()
    try:
        chose.wait(10)
        # The op has finished: a device guard still open while the default moves restores the slot it found (0),
        # which pins its thread there (the CUDA layer moves the default once, before the script runs).
        ran.wait(10)
        _C._set_default_slot(5)  # what the CUDA layer does when cuda:0 is hybrid:5
        moved.set()
        for t in workers:
            t.join()
        assert seen == {"chose": 2, "default": 5}
        assert _in_new_thread(torch.hybrid.current_device) == 5
        with pytest.raises(RuntimeError, match=r"hybrid:99 is not a slot of the current rack \(8 slots"):
            _C._set_default_slot(99)
    finally:
        _C._set_default_slot(0)


def test_streams_are_per_thread_and_events_cross_threads(fresh_timeline):
    side = torch.hybrid.Stream(3)
    recorded = threading.Event()
    box = {}

    def producer():
        with torch.hybrid.stream(side):
            box["current"] = torch.hybrid.current_stream(3)
            box["x"] = torch.ones(4, device="hybrid:3") * 2
            box["event"] = torch.hybrid.Event()
            box["event"].record(side)
        recorded.set()

    t = threading.Thread(target=producer)
    t.start()
    t.join()
    assert box["current"] == side
    assert torch.hybrid.current_stream(3) == torch.hybrid.default_stream(3)  # the producer's stream was its own
    torch.hybrid.current_stream(3).wait_event(box["event"])
    assert box["event"].query()
    assert torch.equal((box["x"] + 1).cpu(), torch.full((4,), 3.0))
    records = [r for r in interop.timeline() if r.slot == 3 and r.kind == "op"]
    assert {r.stream for r in records if r.op == "aten::mul.Tensor"} == {side.stream_id}
    assert {r.stream for r in records if r.op == "aten::add.Tensor"} == {0}
