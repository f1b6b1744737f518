"""``interop.diverge``'s comparison rules on records written by hand: what a large tensor keeps, the tolerance's
edges, a rescaled loss, ``nn.DataParallel``'s replicas, partial sums, mixed precision and parameters drawn on
the device (the recorded runs are tests/interop/test_diverge.py's).
"""

from __future__ import annotations

import pytest
import torch

from interop.diverge import compare, tensors
from interop.diverge.result import build


def test_a_large_tensor_keeps_a_digest_and_the_same_global_samples_as_its_slice():
    full = torch.randn(300, 200)
    ref = tensors.summarise(full, limit=1000)
    assert ref.values is None and len(ref.sample_index) <= tensors.SAMPLES + 1
    same = tensors.pair(tensors.summarise(full.clone(), limit=1000), ref, 0)
    assert same.how == "digest equal"
    rows = tensors.summarise(full[150:].clone(), limit=1000)  # a data-parallel rank's half
    paired = tensors.pair(rows, ref, 1)
    assert paired.test is not None and torch.equal(paired.test, paired.ref)
    changed = full.clone()
    changed.view(-1)[int(ref.sample_index[7])] += 1.0
    diff = compare.measure(*(lambda p: (p.test, p.ref))(tensors.pair(tensors.summarise(changed, limit=1000),
                                                                      ref, 0)), "forward", "float32")
    assert diff["differs"] and diff["max_abs_diff"] == pytest.approx(1.0, rel=1e-5)


def test_non_finite_on_one_side_always_differs_and_the_update_rule_counts_elements():
    ref = torch.ones(2000, dtype=torch.float64)
    test = ref.clone()
    test[3] = float("nan")
    assert compare.measure(test, ref, "forward", "float32")["differs"]
    both = ref.clone()
    both[3] = float("nan")
    assert not compare.measure(both.clone(), both, "forward", "float32")["differs"]
    one_far = ref.clone()
    one_far[0] = 2.0  # 1 element of 2000 a whole step off: 0.05 %, under the 0.1 % allowed
    assert not compare.measure(one_far, ref, "update", "float32")["differs"]
    one_far[1:4] = 2.0  # 4 of 2000: 0.2 %
    assert compare.measure(one_far, ref, "update", "float32")["differs"]


def _records(points, rank=0):
    return dict(rank=rank, world=1, steps=1, collectives=[],
                points=[dict(seq=i, step=1, module=m, call_index=0, phase="forward",
                             tensors=[(path, tensors.summarise(torch.tensor(v)))]) for i, (m, path, v) in
                        enumerate(points)])


@pytest.mark.parametrize("backward_loss, diverged", [(4.0, False), (1.0, True)])
def test_a_model_loss_the_script_rescales_before_backward_is_not_a_divergence(backward_loss, diverged):
    """nn.DataParallel's replicas each return a quarter; transformers 5's Trainer multiplies by their number before
    backward (the same loss: a note), 4.49's did not (the loss at step 1 differs)."""
    reference = _records([("", "loss", 4.0), ("<loss>", "loss", 4.0)])
    run = _records([("", "loss", [1.0, 1.0, 1.0, 1.0]), ("<loss>", "loss", backward_loss)])
    result = build(reference, [run], "1 process", "cpu")
    assert result.diverged is diverged
    if diverged:
        assert (result.first.module, result.first.tensor, result.first.test_max) == ("", "loss", 1.0)
    else:
        assert "rescales it after the model" in result.notes[0] and result.points_compared == 2


def _point(seq, module, phase, value, **extra):
    return dict(seq=seq, step=1, module=module, call_index=0, phase=phase,
                tensors=[("args[0]" if phase == "input_grad" else "output", tensors.summarise(torch.tensor(value)))],
                **extra)


def test_dataparallel_replicas_are_compared_as_slices_their_gradients_undivided():
    """A replica's rows are its slice of the batch; one loss over the gathered batch makes a row's input gradient
    the reference's (a DDP rank's own-rows loss would make it twice): replica 1's wrong rows are named."""
    grad = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
    reference = dict(rank=0, world=1, steps=1, collectives=[],
                     points=[_point(0, "body", "forward", grad), _point(1, "body", "input_grad", grad)])

    def run(rows_of_replica_1):
        return dict(rank=0, world=1, steps=1, collectives=[], points=[
            _point(0, "body", "forward", grad[:2], replica=0), _point(1, "body", "forward", rows_of_replica_1,
                                                                     replica=1),
            _point(2, "body", "input_grad", grad[:2], replica=0), _point(3, "body", "input_grad", grad[2:],
                                                                         replica=1)])

    agreed = build(reference, [run(grad[2:])], "1 process", "cpu")
    assert not agreed.diverged and agreed.points_compared == 2, str(agreed)
    wrong = build(reference, [run([[5.0, 6.0], [7.0, 9.0]])], "1 process", "cpu")
    assert (wrong.first.module, wrong.first.phase, wrong.first.replica, wrong.first.rank) == ("body", "forward", 1, 1)
    assert "DataParallel replica 1" in str(wrong) and wrong.first.compared == "slice 1 of 2 along dim 0"


def _tp_records(rank, partial, reduced):
    """A rank's row-parallel output (a partial sum), then an all-reduce of its shape or another point."""
    after = (dict(seq=1, step=1, label="all_reduce", size=2, shapes=[[2, 2]], dtypes=["float32"],
                  inputs=[dict(absmax=1.0, sum=1.0, finite=True)], outputs=None),) if reduced else ()
    return dict(rank=rank, world=2, steps=1, collectives=list(after),
                points=[_point(0, "mlp.down", "forward", partial), _point(2, "mlp", "forward", [[4.0, 6.0],
                                                                                                [8.0, 10.0]])])


@pytest.mark.parametrize("reduced", [True, False])
def test_a_partial_sum_agrees_when_all_reduced_next_and_is_named_when_not(reduced):
    reference = dict(rank=0, world=1, steps=1, collectives=[],
                     points=[_point(0, "mlp.down", "forward", [[4.0, 6.0], [8.0, 10.0]]),
                             _point(1, "mlp", "forward", [[4.0, 6.0], [8.0, 10.0]])])
    ranks = [_tp_records(0, [[1.0, 2.0], [3.0, 4.0]], reduced), _tp_records(1, [[3.0, 4.0], [5.0, 6.0]], reduced)]
    result = build(reference, ranks, "2 ranks", "cpu")
    assert result.diverged is not reduced, str(result)
    if not reduced:
        assert (result.first.module, result.first.phase) == ("mlp.down", "forward")
        assert result.first.cause.startswith("a partial sum never all-reduced") and result.first.max_rel_diff > 0.5


def test_a_float32_tensor_of_a_bfloat16_run_is_judged_at_bfloat16s_rounding():
    from interop.diverge import tolerance

    assert tolerance.judged_dtype("float32", "bfloat16") == "bfloat16"
    assert tolerance.judged_dtype("bfloat16", "float32") == "bfloat16"
    ref = torch.full((64,), 1.0, dtype=torch.float64)
    test = ref.clone()
    test[0] = 1.03  # 3 %: a bfloat16 gradient's rounding over a batch, far beyond float32's
    assert compare.measure(test, ref, "param_grad", "float32")["differs"]
    judged = compare.measure(test, ref, "param_grad", "float32", computed="bfloat16")
    assert not judged["differs"] and "float32 computed in bfloat16" in judged["tolerance"]
    test[0] = 1.1
    assert compare.measure(test, ref, "param_grad", "float32", computed="bfloat16")["differs"]


@pytest.mark.parametrize("reference_kind", ["cpu", "slot"])
def test_a_parameter_drawn_on_the_device_against_the_cpu_reference_is_randomness(reference_kind):
    """An embedding resized on cuda draws its new rows from the slot's generator, the CPU reference from the
    CPU's: named as randomness against the CPU, a plain divergence against a slot (which draws alike)."""
    def records(value, **extra):
        return dict(rank=0, world=1, steps=1, collectives=[], points=[dict(
            seq=0, step=1, module="embed", call_index=0, phase="init",
            tensors=[("weight", tensors.summarise(torch.tensor(value)))], drew_since_seed=True, **extra)])

    result = build(records([1.0, 2.0, 0.3]), [records([1.0, 2.0, -0.7], device_drew=True)], "1 process",
                   reference_kind, reference_kind)
    assert result.diverged and (result.first.module, result.first.phase) == ("embed", "init")
    if reference_kind == "cpu":
        assert result.first.cause.startswith("randomness: the run drew random numbers on its device")
        assert "--reference slot" in result.first.cause
    else:
        assert result.first.cause is None


def test_against_the_same_ranks_each_rank_is_compared_whole_with_its_peer():
    """A rank's input gradient and its row-parallel partial sum, against the same rank of a reference of the same
    parallelism: each set whole against its peer's (no sum over ranks, no all-reduce looked for); the rank that
    differs is the one named, with no partial-sum cause."""
    from interop.diverge.result import build_peers

    def rank(r, grad, partial):
        return dict(rank=r, world=2, steps=1, collectives=[],
                    points=[_point(0, "mlp.down", "forward", partial), _point(1, "body", "input_grad", grad)])

    grads, partials = [[1.0, 2.0], [3.0, 4.0]], [[0.5, 1.5], [2.0, 3.0]]
    references = [rank(r, [grads[r]], [partials[r]]) for r in (0, 1)]
    agreed = build_peers(references, [rank(r, [grads[r]], [partials[r]]) for r in (0, 1)], "2 ranks", "gloo")
    assert not agreed.diverged and agreed.points_compared == 4
    assert agreed.last_agreed.compared == "full, rank against rank"
    run = [rank(0, [grads[0]], [partials[0]]), rank(1, [grads[1]], [[2.0, 3.3]])]
    wrong = build_peers(references, run, "2 ranks", "gloo")
    assert (wrong.first.module, wrong.first.phase, wrong.first.rank) == ("mlp.down", "forward", 1)
    assert wrong.first.max_abs_diff == pytest.approx(0.3) and wrong.first.cause is None


def test_memory_never_written_is_told_from_an_initialisation_that_differs():
    # pytorch/examples' FSDP2 example: to_empty() and a reset_parameters() that skips the blocks leave them as
    # whatever the allocator's bytes held; such bit patterns read as magnitudes no initialiser draws.
    ref = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)) * 0.02
    garbage = torch.tensor([1.14e27, -3.0e-38, 7.5e-41, 0.0] * 1024).reshape(64, 64)
    never_written = compare.measure(garbage, ref, "init", "float32")
    assert never_written["differs"] and never_written["uninitialised"]
    assert never_written["max_abs_diff"] == pytest.approx(1.14e27, rel=1e-3)
    other_draw = torch.randn(64, 64, generator=torch.Generator().manual_seed(1)) * 0.02
    drawn = compare.measure(other_draw, ref, "init", "float32")
    assert drawn["differs"] and not drawn["uninitialised"]
    assert not compare.measure(ref.clone(), ref, "init", "float32")["uninitialised"]
