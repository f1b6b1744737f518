"""Data-parallel replicas held once (interop.live.shared_replicas): the run, each slot's accounting and the
timeline are those of replicas holding copies of their own (the runner with share_replicas=False, where every
replica's optimizer steps for itself), bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import interop
from interop.live.runner import PlanRunner
from interop.session import current_timeline
from interop.models import token_batch
from planner import Stage
from planner.layout import Layout

from interop.live.cut import cut
from interop.live.shared_replicas import release
from interop.models import GPT, GPTConfig
from tests.interop.live.test_plan_runner import CFG, model_and_blocks  # noqa: F401  (the same tiny GPT, cut once)
from tests.support.host_pages import linux_only, resident_pages, whole_pages
# Three replicas of the first two blocks on trn3, then two of the last two on h100: the tied embedding is
# held by both stages (its gradient summed over every copy), the rows re-split between them.
LAYOUT = Layout((Stage(chunks=(range(0, 2),), kind="trn3", slots=(0, 1, 2)),
                 Stage(chunks=(range(2, 4),), kind="h100", slots=(3, 4))), "1f1b", 2, 12)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def fused_adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, fused=True)  # the plan's default optimizer


def sgd(params):
    # Per tensor, unfused: its momentum buffers are made by copies within each slot (clones), which the replay
    # repeats like ops.
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False)


def _observe(use_rack, model, blocks, optimizer, share: bool, window: int) -> dict:
    """Two steps on a fresh rack (the first makes the optimizer's state, the second updates it): what the test
    compares between the two ways of holding replicas."""
    use_rack("trn3:3+h100:2", backing="emulated")
    interop.set_timeline_window(window)
    try:
        return _steps(PlanRunner(LAYOUT, blocks, model, optimizer, share_replicas=share))
    finally:
        interop.set_timeline_window()


def _steps(runner) -> dict:
    seen: dict = {"loss": [], "params": [], "allocated": [], "peak": [], "step_s": [], "step_peaks": [],
                  "grads": []}
    slots = range(5)
    for s in range(2):
        x, y = token_batch(CFG, 12, seed=s)
        seen["loss"].append(runner.step(x, y, loss_fn))
        seen["params"].append([[[p.detach().cpu() for p in rank.params] for rank in rep.ranks]
                               for reps in runner.replicas for rep in reps])
        seen["allocated"].append([torch.hybrid.memory_allocated(i) for i in slots])
        seen["peak"].append([torch.hybrid.max_memory_allocated(i) for i in slots])
        seen["step_s"].append(runner.last_step.modelled_seconds)
        seen["step_peaks"].append(dict(runner.last_step.peak_bytes))
        # The stage's gradients (replica 0's: the others give theirs back once reduced).
        seen["grads"].append([reps[0].ranks[0].grad_buffer.cpu() for reps in runner.replicas])
    seen["optimizer_state"] = [
        {k: {n: (v.cpu() if isinstance(v, torch.Tensor) else v) for n, v in st.items()}
         for k, st in rep.optimizer.state_dict()["state"].items()}
        for reps in runner.replicas for rep in reps]
    seen["timeline"] = sorted((r.kind, r.slot, -1 if r.peer is None else r.peer, r.op, r.in_shapes, r.out_shapes,
                               r.dtype, r.start_ps, r.duration_ps) for r in interop.timeline())
    seen["busy"] = current_timeline().busy_by_slot
    totals = current_timeline().totals()
    seen["totals"] = {name: getattr(totals, name) for name in type(totals).__slots__ if name != "per_op"}
    # Stream ids count on across racks: each slot's streams by the order they were made.
    streams = sorted({k[:2] for k in totals.per_op})
    seen["totals"]["per_op"] = {(slot, sum(1 for s, i in streams if s == slot and i < stream), *rest): stats
                                for (slot, stream, *rest), stats in totals.per_op.items()}
    seen["shared"] = sorted(runner.shared_stages)
    seen["aliases"] = [rep.ranks[0].params[0].data_ptr() for reps in runner.replicas for rep in reps]
    return seen


# With a window of no records (folded past its slack of 64), the per-tensor optimizer's step leaves it before
# it is replayed but for Timeline.holding; the totals are the same.
@pytest.mark.parametrize("optimizer,window", [(fused_adamw, 10_000), (sgd, 0)])
def test_shared_replicas_equal_independent_ones(model_and_blocks, use_rack, optimizer, window):
    model, blocks = model_and_blocks
    own = _observe(use_rack, model, blocks, optimizer, False, window)
    shared = _observe(use_rack, model, blocks, optimizer, True, window)
    assert own["shared"] == [] and shared["shared"] == [0, 1]
    # Replicas 1.. hold replica 0's bytes (stage 0: replicas 0-2; stage 1: replicas 3-4).
    assert len(set(shared["aliases"][:3])) == 1 and len(set(shared["aliases"][3:])) == 1
    assert len(set(own["aliases"])) == 5
    for k in range(2):
        assert torch.equal(shared["loss"][k], own["loss"][k])
        # Every replica's parameters after each step: those of its own optimizer's steps, bit for bit, which
        # are replica 0's (the premise: all-reduced gradients make the replicas' steps identical).
        for mine, theirs in zip(shared["params"][k], own["params"][k]):
            for a, b in zip(mine, theirs):
                assert all(torch.equal(p, q) for p, q in zip(a, b))
        for theirs in own["params"][k][1:3]:
            assert all(torch.equal(p, q) for p, q in zip(theirs[0], own["params"][k][0][0]))
        assert shared["allocated"][k] == own["allocated"][k]
        assert shared["peak"][k] == own["peak"][k]
        assert shared["step_s"][k] == own["step_s"][k]
        assert shared["step_peaks"][k] == own["step_peaks"][k]
        assert all(torch.equal(a, b) for a, b in zip(shared["grads"][k], own["grads"][k]))
    for mine, theirs in zip(shared["optimizer_state"], own["optimizer_state"]):
        assert mine.keys() == theirs.keys() and mine  # every replica's optimizer has state
        for key in mine:
            assert mine[key].keys() == theirs[key].keys()
            for name, value in mine[key].items():
                same = torch.equal(value, theirs[key][name]) if isinstance(value, torch.Tensor) else (
                    value == theirs[key][name])
                assert same, (key, name)
    # The timeline: every record, where and when, the same (replica 0's optimizer records repeated on the
    # other replicas' slots where their own steps were placed).
    assert shared["timeline"] == own["timeline"]
    assert shared["busy"] == own["busy"]
    assert shared["totals"] == own["totals"]


def test_shared_on_slot_charges_the_slot_and_refuses_bad_arguments(use_rack):
    use_rack("trn3:2+h100:1", backing="emulated")
    from interop import _C

    source = torch.arange(1000, dtype=torch.float32, device="hybrid:0")
    before = torch.hybrid.memory_allocated(1)
    view = _C._shared_on_slot(source, 1)
    assert view.device == torch.device("hybrid", 1) and view.data_ptr() == source.data_ptr()
    assert torch.hybrid.memory_allocated(1) - before == 4000
    source[0] = -1.0
    assert float(view[0].cpu()) == -1.0  # one set of bytes
    del source
    assert float(view[1].cpu()) == 1.0  # the view keeps them alive
    del view
    assert torch.hybrid.memory_allocated(1) == before
    with pytest.raises(RuntimeError, match="source must be a tensor on a slot"):
        _C._shared_on_slot(torch.zeros(3), 1)
    with pytest.raises(RuntimeError, match="slot 7 is not on the current rack"):
        _C._shared_on_slot(torch.zeros(3, device="hybrid:0"), 7)


def test_replay_refuses_slots_of_other_kinds(use_rack):
    use_rack("trn3:1+h100:1", backing="emulated")
    timeline = current_timeline()
    with pytest.raises(RuntimeError, match="different chip kinds"):
        timeline.replay(timeline.placed, timeline.placed, [0], [1])


@linux_only
def test_release_zeroes_and_gives_the_pages_back_but_keeps_the_charge(use_rack):
    use_rack("trn3:2", backing="emulated")
    x = torch.ones(1 << 20, device="hybrid:1")  # 4 MiB
    part = x[1000:900_000]  # page edges inside: zeroed in place, the whole pages between given back
    address, length = part.data_ptr(), part.numel() * 4
    charged = torch.hybrid.memory_allocated(1)
    release(part)
    assert resident_pages(address, length) == 0
    assert torch.hybrid.memory_allocated(1) == charged
    host = x.cpu()
    assert host[1000:900_000].eq(0).all() and host[:1000].eq(1).all() and host[900_000:].eq(1).all()
    with pytest.raises(ValueError, match="contiguous"):
        release(x.view(1024, 1024).t())


@linux_only
def test_a_shared_stage_holds_one_replicas_gradients_on_the_host(use_rack):
    """After a step, replicas 1.. of a shared stage hold none of their reduced gradients' pages (each bucket given
    back once all-reduced), though every slot stays charged for its buffer; replica 0 holds the stage's."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=512, seq_len=16, dim=128, heads=2, layers=2)  # 2 MB of gradients a replica
    model = GPT(cfg)
    blocks = cut(model, (token_batch(cfg, 2)[0],))
    use_rack("trn3:3", backing="emulated")
    layout = Layout((Stage(chunks=(range(0, len(blocks)),), kind="trn3", slots=(0, 1, 2)),), "1f1b", 1, 12)
    runner = PlanRunner(layout, blocks, model, fused_adamw)
    x, y = token_batch(cfg, 12, seed=0)
    runner.step(x, y, loss_fn)
    assert runner.shared_stages == {0}
    reps = runner.replicas[0]
    buffers = [rep.ranks[0].grad_buffer for rep in reps]
    length = buffers[0].numel() * 4
    assert resident_pages(buffers[0].data_ptr(), length) >= whole_pages(length)
    assert buffers[0].cpu().abs().sum() > 0
    for rep, buffer in zip(reps[1:], buffers[1:]):
        assert resident_pages(buffer.data_ptr(), length) <= 2 * len(blocks)  # at most each bucket's edge pages
        assert buffer.cpu().eq(0).all()
        assert torch.hybrid.memory_allocated(rep.home) >= length
