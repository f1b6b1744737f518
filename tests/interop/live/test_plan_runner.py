"""The in-process plan runner (interop.live.runner): the schedule's order on the plan's slots,
checked against the same model trained on one slot."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import interop
from interop.models import GPT, GPTConfig, token_batch
from planner import Stage
from interop.live.cut import cut
from planner.layout import Layout
from interop.live.runner import PlanRunner

CFG = GPTConfig(vocab_size=128, seq_len=16, dim=32, heads=2, layers=2)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@pytest.fixture(scope="module")
def model_and_blocks():
    torch.manual_seed(0)
    model = GPT(CFG)
    x, _ = token_batch(CFG, 2)
    return model, cut(model, (x,))


def _layout(stages, schedule, microbatches, batch, kind="trn3"):
    """``stages``: (block ranges, slots) per physical stage; several ranges = interleaved chunks."""
    return Layout(tuple(Stage(chunks=tuple(range(a, b) for a, b in ranges), kind=kind, slots=slots)
                        for ranges, slots in stages), schedule, microbatches, batch)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2)


def sgd(params):
    # Linear in the gradients: a float-rounding difference in a gradient stays that size in the parameters
    # (Adam divides near-zero gradients by their own magnitude and turns rounding noise into whole steps).
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def _reference(model, batches, optimizer=adamw):
    """The single-device run: the whole model on hybrid:0 (emulated)."""
    ref = copy.deepcopy(model).to("hybrid:0")
    opt = optimizer(list(ref.parameters()))
    out = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ref(x.to("hybrid:0")), y.to("hybrid:0"))
        loss.backward()
        out.append((loss.detach().cpu(), {n: p.grad.cpu() for n, p in ref.named_parameters()}))
        opt.step()
    params = {n: t.cpu() for n, t in ref.state_dict().items()}
    return out, params


def _run(layout, model, blocks, batches, optimizer=adamw):
    runner = PlanRunner(layout, blocks, model, optimizer)
    out = [(runner.step(x, y, loss_fn), runner.gradients()) for x, y in batches]
    return runner, out


def test_one_microbatch_is_bit_for_bit_the_single_device_run(model_and_blocks, use_rack):
    use_rack("trn3:2+h100:2", backing="emulated")
    model, blocks = model_and_blocks
    batches = [token_batch(CFG, 4, seed=s) for s in range(3)]
    layout = _layout([([(0, 2)], (0,)), ([(2, 4)], (2,))], "1f1b", 1, 4)
    runner, got = _run(layout, model, blocks, batches)
    want, params = _reference(model, batches)
    for (loss, grads), (ref_loss, ref_grads) in zip(got, want):
        assert torch.equal(loss, ref_loss)
        assert grads.keys() == ref_grads.keys()
        for name in grads:
            assert torch.equal(grads[name], ref_grads[name]), name
    state = runner.state_dict()
    assert state.keys() == params.keys()
    for name in state:
        assert torch.equal(state[name], params[name]), name
    # Tied names stay one tensor in the gathered state, as in the model.
    assert state["head.weight"] is state["tok.weight"]


@pytest.mark.parametrize("schedule,stages,microbatches", [
    # asymmetric data parallelism: 2 replicas, then 1, then 2 (rows re-split between stages)
    ("1f1b", [([(0, 1)], (0, 1)), ([(1, 3)], (2,)), ([(3, 4)], (3, 4))], 4),
    ("gpipe", [([(0, 2)], (0,)), ([(2, 4)], (3,))], 2),
    # two chunks per stage; the tied embedding sits on both stages
    ("interleaved", [([(0, 1), (2, 3)], (0,)), ([(1, 2), (3, 4)], (3,))], 4),
])
def test_microbatches_and_replicas_match_within_float_tolerance(model_and_blocks, use_rack, schedule, stages,
                                                               microbatches):
    use_rack("trn3:3+h100:3", backing="emulated")
    model, blocks = model_and_blocks
    batches = [token_batch(CFG, 8, seed=s) for s in range(3)]
    runner, got = _run(_layout(stages, schedule, microbatches, 8), model, blocks, batches, sgd)
    want, params = _reference(model, batches, sgd)
    for (loss, grads), (ref_loss, ref_grads) in zip(got, want):
        torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
        for name in ref_grads:
            torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6)
    state = runner.state_dict()
    for name in params:  # after 3 optimizer steps
        torch.testing.assert_close(state[name], params[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stages,microbatches", [
    # one stage, its linear layers split over two slots (q|k|v and the MLP by output features, the projections
    # by input features)
    ([(range(0, 4), (0, 1), 2)], 1),
    # two pipeline stages of two tensor ranks each, then two data-parallel replicas of a tensor-parallel pair
    ([(range(0, 2), (0, 1), 2), (range(2, 4), (3, 4), 2)], 2),
    ([(range(0, 4), (0, 1, 3, 4), 2)], 2),
])
def test_tensor_parallel_stages_match_the_single_device_run(model_and_blocks, use_rack, stages, microbatches):
    use_rack("trn3:3+h100:3", backing="emulated")
    model, blocks = model_and_blocks
    layout = Layout(tuple(Stage(chunks=chunk, kind="trn3" if slots[0] < 3 else "h100", slots=slots, tp=tp)
                          for chunk, slots, tp in stages), "1f1b", microbatches, 8)
    batches = [token_batch(CFG, 8, seed=s) for s in range(3)]
    runner, got = _run(layout, model, blocks, batches)  # AdamW
    from interop.live.tensor_parallel import TensorParallelChunk

    # the stages ran as tensor ranks, each holding half of a column-parallel weight
    assert all(isinstance(rep.module, TensorParallelChunk) for reps in runner.replicas for rep in reps)
    qkv = [p for rep in runner.replicas[0] for rank in rep.ranks for p, n in zip(rank.params, rank.names)
           if n.endswith("attn.qkv.weight")]
    assert qkv and all(p.shape == (3 * CFG.dim // 2, CFG.dim) for p in qkv)
    want, params = _reference(model, batches)
    for (loss, grads), (ref_loss, ref_grads) in zip(got, want):
        torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
        assert grads.keys() == ref_grads.keys()
        for name in ref_grads:
            torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    state = runner.state_dict()
    for name in params:  # after 3 AdamW steps
        got, ref = state[name], params[name]
        if name.endswith("attn.qkv.bias"):
            # The key bias's gradient is zero in exact arithmetic (softmax ignores a shift shared by every key);
            # Adam divides its rounding noise by its own size, so that third moves by noise-sized whole steps.
            q, k, v = got.chunk(3)
            rq, rk, rv = ref.chunk(3)
            torch.testing.assert_close(k, rk, rtol=0, atol=1e-4, msg=name)
            got, ref = torch.cat([q, v]), torch.cat([rq, rv])
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5, msg=name)


def test_the_step_is_on_the_timeline_with_its_pipeline(model_and_blocks, use_rack):
    use_rack("trn3:2+h100:2", backing="emulated")
    model, blocks = model_and_blocks
    layout = _layout([([(0, 2)], (0,)), ([(2, 4)], (2,))], "1f1b", 4, 8)
    runner = PlanRunner(layout, blocks, model, lambda ps: torch.optim.SGD(ps, lr=0.1))
    x, y = token_batch(CFG, 8)
    runner.step(x, y, loss_fn)
    record = runner.last_step
    records = [r for r in interop.timeline() if r.start >= record.start_s]
    # Every microbatch's activations cross 0 -> 2 and its gradients 2 -> 0, as real copies.
    forward = [r for r in records if r.kind == "copy" and r.slot == 0 and r.peer == 2]
    backward = [r for r in records if r.kind == "copy" and r.slot == 2 and r.peer == 0]
    assert len(forward) == 4 and len(backward) == 4
    on_rack = [r for r in records if r.slot >= 0 and (r.peer is None or r.peer >= 0)]  # not the loss's D2H
    assert record.modelled_seconds == pytest.approx(max(r.end_ps for r in on_rack) / 1e12 - record.start_s,
                                                    rel=1e-9)
    # The pipeline overlaps: slot 2 starts on microbatch 0 before slot 0 has run microbatch 3's forward.
    slot2_first = min(r.start for r in records if r.slot == 2 and r.kind == "op")
    assert slot2_first < forward[-1].start
    assert set(record.peak_bytes) == {0, 2} and all(v > 0 for v in record.peak_bytes.values())


def test_bad_input(model_and_blocks, use_rack):
    use_rack("trn3:2+h100:2", backing="emulated")
    model, blocks = model_and_blocks
    layout = _layout([([(0, 2)], (0,)), ([(2, 4)], (2,))], "1f1b", 2, 4)
    runner = PlanRunner(layout, blocks, model)
    x, y = token_batch(CFG, 6)
    with pytest.raises(ValueError, match="global batch of 4 rows, got \\[6\\]"):
        runner.step(x, y, loss_fn)
    with pytest.raises(ValueError, match="uses slots \\[7\\]"):
        PlanRunner(_layout([([(0, 2)], (0,)), ([(2, 4)], (7,))], "1f1b", 2, 4), blocks, model)
    with pytest.raises(ValueError, match="does not split over stage 0's 3"):
        _layout([([(0, 2)], (0, 1, 2)), ([(2, 4)], (3,))], "1f1b", 2, 4).validate(len(blocks))
    with pytest.raises(ValueError, match="starts at block 3, expected 2"):
        _layout([([(0, 2)], (0,)), ([(3, 4)], (1,))], "1f1b", 2, 4).validate(len(blocks))


def test_a_parameter_two_blocks_hold_adds_into_one_gradient_and_holds_no_sum(use_rack):
    """An LM head tied to the embedding: with a leaf of its own over the same bytes (untie_holders), each
    holder's backward adds its part into the one ``.grad``, bit for bit autograd's sum, and the slot never holds
    the head's gradient waiting for the embedding's (what autograd's input buffer does)."""
    import torch.nn as nn

    from interop.live.pipeline import untie_holders

    use_rack("trn2:1")
    dev = torch.device("hybrid", 0)
    vocab, dim = 4096, 64
    torch.manual_seed(0)
    tokens = torch.randint(0, vocab, (4, 8))

    def tied_blocks():
        torch.manual_seed(1)
        embed = nn.Embedding(vocab, dim)
        head = nn.Linear(dim, vocab, bias=False)
        head.weight = embed.weight
        return nn.ModuleList([nn.Sequential(embed), nn.Sequential(nn.LayerNorm(dim), head)]).to(dev)

    def backward_peak(blocks):
        x = tokens.to(dev)
        loss = blocks[1](blocks[0](x)).float().logsumexp(-1).mean()
        base = torch.hybrid.memory_allocated(0)
        torch.hybrid.reset_peak_memory_stats(0)
        loss.backward()
        return torch.hybrid.max_memory_allocated(0) - base

    # Both with the gradient made beforehand, as the runner's flat buffer is.
    plain = tied_blocks()
    plain[0][0].weight.grad = torch.zeros_like(plain[0][0].weight)
    plain_peak = backward_peak(plain)
    untied = tied_blocks()
    weight = untied[0][0].weight
    pairs = untie_holders(untied)
    assert [(p is weight, leaf is not weight, leaf.data_ptr() == weight.data_ptr()) for leaf, p in pairs] == \
        [(True, True, True)]
    weight.grad = torch.zeros_like(weight)
    pairs[0][0].grad = weight.grad
    untied_peak = backward_peak(untied)
    assert torch.equal(weight.grad.cpu(), plain[0][0].weight.grad.cpu())
    assert pairs[0][0].grad is weight.grad
    weight_bytes = weight.numel() * weight.element_size()
    # The head's gradient held waiting for the embedding's is what the leaf saves (to a few KB of temporaries).
    assert plain_peak - untied_peak == pytest.approx(weight_bytes, rel=0.05), (plain_peak, untied_peak)
