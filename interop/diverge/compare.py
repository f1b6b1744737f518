"""Setting the run under test's records against the reference's: the first point that differs, the last that
agreed.

Points are visited in the order the reference recorded them (its execution order); each is compared on every
rank of the run under test that recorded the same (step, module, call index, phase). What means the same on
both sides is compared (see :mod:`interop.diverge.tensors` for shards and slices):

* a data-parallel rank's input gradients, its rows of the batch, are the reference's rows times the number of
  slices (its loss averages its own rows, the reference's all of them): they are divided by it;
* a module's scalar output (a loss) on several ranks is compared as their mean, as is ``nn.DataParallel``'s
  vector of its replicas' scalars, since each averages its own rows;
* a plain tensor of the reference's full shape on every rank that differs, but whose sum over the ranks agrees,
  is a partial sum (a row-parallel layer's output written by hand, the gradient of a column-parallel layer's
  input): it agrees when every rank all-reduces a tensor of its shape next (before its next recorded point),
  and is a divergence, a partial sum never all-reduced, when not.

Against a reference of the same parallelism (``--reference gloo``: the same ranks on the CPU over Gloo), rank r
is compared with the reference's rank r, each walk rank against rank (``peer``): tensor for tensor, a shard
against the same shard, and none of the above applies.
"""

from __future__ import annotations

import bisect
import itertools
import math

import torch

from interop.diverge import tolerance
from interop.diverge.tensors import inferred_slice, pair, pair_local


def _key(point: dict) -> tuple:
    return point["step"], point["module"], point["call_index"], point["phase"]


def by_replica(ranks: list[dict]) -> list[dict]:
    """One process's records split into one per ``nn.DataParallel`` replica, each set against its slice of the
    reference as a rank's would be: replica 0's with the main thread's points, replica k's alone. The replicas
    of a run of several ranks (DataParallel inside each rank: which slice of the global batch a replica holds is
    not known) are left out."""
    if not any("replica" in p for r in ranks for p in r["points"]):
        return ranks
    if len(ranks) > 1:
        return [dict(r, points=[p for p in r["points"] if "replica" not in p]) for r in ranks]
    [records] = ranks
    count = 1 + max(p["replica"] for p in records["points"] if "replica" in p)
    split = [dict(records, rank=k, points=[p for p in records["points"] if p.get("replica", 0) == k],
                  collectives=records["collectives"] if k == 0 else []) for k in range(count)]
    return split


def index_points(records: dict) -> dict[tuple, dict]:
    """Each key's first point."""
    index: dict[tuple, dict] = {}
    for point in records["points"]:
        index.setdefault(_key(point), point)
    return index


def measure(test: torch.Tensor, ref: torch.Tensor, phase: str, dtype: str, computed: str | None = None) -> dict:
    """max_abs_diff, max_rel_diff, whether they differ beyond the limit, and the limit (see tolerance; ``computed``:
    the lowest precision the runs computed in)."""
    test, ref = test.reshape(-1), ref.reshape(-1)
    finite_t, finite_r = torch.isfinite(test), torch.isfinite(ref)
    # Non-finite on one side only, or non-finite on both but not the same (inf against NaN, +inf against -inf).
    one_sided = (finite_t != finite_r) | (~finite_t & ~finite_r & ~(test.isnan() & ref.isnan()) & (test != ref))
    both = finite_t & finite_r
    diff = (test[both] - ref[both]).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if bool(one_sided.any()):
        max_abs = math.inf
    scale = float(ref[finite_r].abs().max()) if bool(finite_r.any()) else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    if phase == "update":
        rms = float(ref[finite_r].pow(2).mean().sqrt()) if bool(finite_r.any()) else 0.0
        far = (diff > tolerance.UPDATE_STEP * rms).sum() + one_sided.sum()
        share = float(far) / max(test.numel(), 1)
        return dict(max_abs_diff=max_abs, max_rel_diff=max_rel, differs=share > tolerance.UPDATE_SHARE,
                    tolerance=f"{100 * tolerance.UPDATE_SHARE:g} % of elements over {tolerance.UPDATE_STEP:g} "
                              f"RMS step ({100 * share:.3g} % are)",
                    test_max=_absmax(test), reference_max=scale)
    garbage = _uninitialised(test) or _uninitialised(ref)
    judged = tolerance.judged_dtype(dtype, computed)
    bound = tolerance.limit(phase, judged)
    as_what = dtype if judged == dtype else f"{dtype} computed in {judged}"
    return dict(max_abs_diff=max_abs, max_rel_diff=max_rel, differs=bool(one_sided.any()) or max_rel > bound,
                tolerance=f"{bound:g} ({as_what}, {phase})", test_max=_absmax(test), reference_max=scale,
                uninitialised=garbage)


UNINITIALISED_ABOVE, UNINITIALISED_BELOW = 1e20, 1e-30
"""Magnitudes no initialiser or training step produces in float32 parameters: memory never written (``to_empty``,
``torch.empty``) reads as such bit patterns."""


def _uninitialised(t: torch.Tensor) -> bool:
    magnitude = t[torch.isfinite(t)].abs()
    return bool(((magnitude > UNINITIALISED_ABOVE) | ((magnitude > 0) & (magnitude < UNINITIALISED_BELOW))).any())


def _absmax(t: torch.Tensor) -> float:
    finite = t[torch.isfinite(t)]
    nonfinite = t.numel() - finite.numel()
    value = float(finite.abs().max()) if finite.numel() else 0.0
    return math.nan if nonfinite and not finite.numel() else value


def _partial_sum(worst: dict, tests: list, ref_summary, phase: str, reduced_next: dict, world: int,
                 computed: str | None) -> dict | None:
    """When each rank holds a whole tensor of the reference's shape and their sum agrees with the reference (see
    the module doc): the sum's comparison if every rank all-reduces it next, else ``worst`` (the rank that
    differs most) marked as a partial sum never reduced. None otherwise."""
    if phase not in ("forward", "input_grad") or world < 2 or len(tests) != world:
        return None
    if any(s.sharded or s.values is None or tuple(s.shape) != tuple(ref_summary.global_shape) for _, s in tests):
        return None
    if ref_summary.values is None:
        return None
    total = torch.stack([s.values for _, s in tests]).sum(0)
    result = measure(total, ref_summary.values, phase, ref_summary.dtype, computed)
    if result["differs"]:
        return None
    shape = list(ref_summary.global_shape)
    reduced = all(shape in (reduced_next.get(rank) or {}).get("shapes", ()) for rank, _ in tests)
    if reduced:
        return dict(result, rank=None, compared="sum over ranks (a partial sum, all-reduced next)", sharded=False,
                    agreeing_ranks=[rank for rank, _ in tests])
    return dict(worst, unreduced_partial=True,
                compared=f"{worst['compared']}; the ranks' sum agrees: a partial sum that no all-reduce follows")


def _compare_path(tests: list, ref_summary, phase: str, reduced_next: dict | None = None, world: int = 1,
                  computed: str | None = None, replicas: bool = False, peer: bool = False) -> dict | None:
    """The worst rank's comparison of one tensor of one point; None when no rank could be compared.
    ``reduced_next``: rank -> the all-reduce that rank issued right after the point (:class:`NextCollective`);
    ``computed``: the lowest precision the runs computed in (:func:`tolerance.judged_dtype`); ``replicas``:
    the tensors are ``nn.DataParallel`` replicas' (one loss over the gathered batch: a row's gradient is the
    reference's, not the number of slices times it); ``peer``: the reference's tensor is the same rank's (see
    the module doc)."""
    dtype = ref_summary.dtype
    computed = computed if phase != "init" else None  # parameters are stored at their own precision
    scalar = ref_summary.numel == 1 and phase == "forward"
    if scalar and tests:
        values = []
        for rank, summary in tests:
            if summary.values is None:
                return None
            values.append(summary.values.reshape(-1).mean())  # nn.DataParallel's gathered replicas: a vector
        test = torch.stack(values).mean().reshape(1)
        how = "mean over ranks" if len(values) > 1 else ("mean of the replicas' values"
                                                          if tests[0][1].numel > 1 else "full")
        result = measure(test, ref_summary.values.reshape(1), phase, dtype, computed)
        return dict(result, rank=tests[0][0] if len(tests) == 1 else None, compared=how)
    worst = None
    agreeing = []
    for rank, summary in tests:
        paired = pair_local(summary, ref_summary) if peer else pair(summary, ref_summary, rank)
        if paired.test is None:
            continue
        test = paired.test
        inferred = None if peer else inferred_slice(summary, ref_summary, rank)
        if phase == "input_grad" and inferred is not None and inferred[0] == 0 and not replicas:
            test = test / inferred[1]  # a rank's loss averages its own rows: each row's gradient is k times
        result = dict(measure(test, paired.ref, phase, dtype, computed), rank=rank, compared=paired.how,
                      sharded=summary.sharded)
        if not result["differs"]:
            agreeing.append(rank)
        if worst is None or (result["differs"], result["max_rel_diff"]) > (worst["differs"], worst["max_rel_diff"]):
            worst = result
    if worst is not None:
        worst["agreeing_ranks"] = agreeing
        if worst["differs"]:
            return _partial_sum(worst, tests, ref_summary, phase, reduced_next or {}, world, computed) or worst
    return worst


def compare_tensors(point: dict, matches: list, field: str, reduced: dict | None = None, world: int = 1,
                    computed: str | None = None, peer: bool = False) -> dict:
    """{path: the worst rank's comparison} for one point's ``field`` ('tensors' or 'inputs'); ``reduced``,
    ``world``, ``computed`` and ``peer`` as :func:`_compare_path`'s."""
    results = {}
    for path, ref_summary in point.get(field) or ():
        tests = [(rank, dict(p.get(field) or ()).get(path)) for rank, p in matches]
        tests = [(rank, s) for rank, s in tests if s is not None]
        tests = tests if peer else _consistent(tests, ref_summary)
        replicas = all("replica" in p for _, p in matches)
        compared = (_compare_path(tests, ref_summary, point["phase"], reduced, world, computed, replicas, peer)
                    if tests else None)
        if compared is not None:
            results[path] = compared
    return results


def _consistent(tests: list, ref_summary) -> list:
    """A plain tensor is taken as a slice of the reference's only when every rank holds one of the same shape
    (a pipeline's first stage returns activations where the reference's model returns logits: no slice)."""
    shapes = {tuple(s.shape) for _, s in tests}
    if len(shapes) > 1:
        return [(rank, s) for rank, s in tests if s.sharded or tuple(s.shape) == tuple(ref_summary.global_shape)]
    return tests


class NextCollective:
    """For one rank's records: the all-reduce it issued right after a point, before its next recorded point."""

    def __init__(self, records: dict):
        self.points = sorted(p["seq"] for p in records["points"])
        self.collectives = sorted(records.get("collectives", []), key=lambda c: c["seq"])
        self.seqs = [c["seq"] for c in self.collectives]

    def after(self, seq: int) -> dict | None:
        i = bisect.bisect_right(self.seqs, seq)
        if i == len(self.collectives):
            return None
        collective = self.collectives[i]
        j = bisect.bisect_right(self.points, seq)
        next_point = self.points[j] if j < len(self.points) else math.inf
        return collective if collective["seq"] < next_point and collective["label"].startswith("all_reduce") else None


def walk(reference: dict, ranks: list[dict], peer: bool = False):
    """Yield (reference point, {path: comparison}, {input path: comparison}, the test points by rank) in the
    reference's order, for every point at least one rank of the run under test recorded. ``peer``: ``ranks`` is
    the one rank the reference's is (see the module doc)."""
    indexed = [(r["rank"], index_points(r)) for r in ranks]
    following = {r["rank"]: NextCollective(r) for r in ranks}
    world = len(ranks)
    computed = tolerance.lowest_computed(itertools.chain(reference["points"], *(r["points"] for r in ranks)))
    for point in sorted(reference["points"], key=lambda p: p["seq"]):
        key = _key(point)
        matches = [(rank, index[key]) for rank, index in indexed if key in index]
        if not matches:
            continue
        reduced = {rank: following[rank].after(p["seq"]) for rank, p in matches}
        yield (point, compare_tensors(point, matches, "tensors", reduced, world, computed, peer),
               compare_tensors(point, matches, "inputs", computed=computed, peer=peer), dict(matches))
